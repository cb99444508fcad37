#!/bin/sh
# GPU work a candidate leaves queued behind its replies (session 21's
# suspected hole; lib/eval/evaluate_idle.c): on a GPU machine, relu_mid,
# baselines timed afresh in every run, honest/relu and
# tests/adversarial/cheat/gpu_linger (a kernel holding the GPU for SPIN
# seconds queued behind its load and its timed loop; ca-verify, then
# ca-profile, which loads it afresh: its baselines follow its load), each with the
# reference's idle probes off (CA_EVAL_IDLE_S=0: the hole as it was) and
# on (the default). Prints each record's eager_us, candidate_us,
# gpu_wait_s, ca-reward's value, and the error of a failed one. With the
# probes off, gpu_linger's eager_us far above honest's is the hole.
#
#   make all && sh bench/probe-linger.sh [ROUNDS [SPIN]]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATH=$ROOT/bin:$PATH
export PATH
ROUNDS=${1:-1}
SPIN=${2:-1.5}
if ! command -v nvidia-smi >/dev/null 2>&1; then
	echo "probe-linger: no GPU here; nothing to measure" >&2
	exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export CA_CACHE=${CA_CACHE:-$W/cache}
A=$ROOT/tests/adversarial
cp -R "$A/honest/relu" "$W/honest"
cp -R "$A/cheat/gpu_linger" "$W/linger"
sed -i "s/^SPIN_S = .*/SPIN_S = $SPIN/" "$W/linger/model_new.py"
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for idle in 0 10; do
		for name in honest linger; do
			rm -rf "$CA_CACHE/baselines"
			jq -nc --arg id "$name idle_s=$idle" --rawfile code "$A/tasks/relu_mid.py" --arg dir "$W/$name" \
				'{id: $id, code: $code, candidate: {dir: $dir}}' |
				ca-verify 2>"$W/v.txt" | CA_EVAL_IDLE_S=$idle ca-profile --no-compile 2>"$W/e.txt" | ca-reward 2>/dev/null |
				jq -c '{id, ok: .profile.ok, eager_us: .profile.eager_us, candidate_us: .profile.candidate_us,
					gpu_wait_s: .profile.gpu_wait_s, retimed: .profile.baseline_retimed, reward: .reward.value,
					error: (.profile.error // .verify.error // "" | .[0:160])}'
		done
	done
	r=$((r + 1))
done
