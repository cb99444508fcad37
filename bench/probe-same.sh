#!/bin/sh
# Is the reference's own code, submitted as the candidate, measured as fast
# as the reference? (A speedup it did not earn would be rewarded.) On a GPU
# machine: the task's own forward (torch.relu for relu_mid, the matmul) as a
# KernelBench candidate (--allow-torch), each record its own `ca-profile
# --verify --no-compile` run, ROUNDS rounds with the task's baselines
# measured afresh and ROUNDS with them cached. Prints each record's eager_us,
# candidate_us, speedup, baseline_retimed and bursts, then the speedups and
# eager times of each task and mode together.
#
#   make all && sh bench/probe-same.sh [ROUNDS] [TASK ...]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATH=$ROOT/bin:$PATH
export PATH
ROUNDS=${1:-3}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- relu_mid
if ! command -v nvidia-smi >/dev/null 2>&1; then
	echo "probe-same: no GPU here; nothing to measure" >&2
	exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export CA_CACHE=${CA_CACHE:-$W/cache}
A=$ROOT/tests/adversarial/tasks
for task in "$@"; do
	mkdir -p "$W/$task"
	# The task's Model, renamed ModelNew: the reference's code to the line.
	sed 's/^class Model(/class ModelNew(/; s/super(Model, self)/super(ModelNew, self)/' "$A/$task.py" >"$W/$task/model_new.py"
	jq -nc --arg id "$task" --rawfile code "$A/$task.py" --arg dir "$W/$task" \
		'{id: $id, code: $code, candidate: {dir: $dir}}' >"$W/$task.nd"
	for mode in fresh cached; do
		r=1
		while [ $r -le "$ROUNDS" ]; do
			[ $mode = fresh ] && rm -rf "$CA_CACHE/baselines"
			ca-profile --verify --no-compile --allow-torch "$W/$task.nd" 2>"$W/e.txt" |
				jq -c --arg t "$task" --arg m "$mode" '.profile | {task: $t, mode: $m, ok, eager_us, candidate_us,
					speedup: (if .candidate_us then (.eager_us / .candidate_us * 1000 | round / 1000) else null end), retimed: .baseline_retimed,
					burst: .clock.burst, error: (.error // "" | .[0:120])}' | tee -a "$W/all.nd"
			r=$((r + 1))
		done
	done
done
jq -s -c 'group_by(.task + .mode)[] | {task: .[0].task, mode: .[0].mode, speedups: map(.speedup), eager_us: map(.eager_us | . * 10 | round / 10)}' "$W/all.nd"
