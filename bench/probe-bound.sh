#!/bin/sh
# How close honest candidates come to the parent's clock bound, on a GPU.
#
# ca-profile rejects a timed loop whose self-reported median is below half
# of what its own clock implies per call (the fastest tenth, less the
# reference's overhead per call) and times a doubted loop again, up to
# three more times. This profiles honest candidates of the adversarial
# suite several times over, with one slot and with three slots on GPU 0,
# and prints per profile: id, ok, candidate_us, the implied time per call
# (2 x (clock.min_reported_us + 5)), their ratio (an honest loop passes
# at 0.5 or more), the loops it took, and the error if any.
# bench/eval-h200.md (session 8) has the figures.
#
#   make all && sh bench/probe-bound.sh [OUTDIR]
#
# CA_PROBE_RUNS names the runs to do (default: all five below, in order).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-/tmp/ca-probe-bound}
mkdir -p "$OUT"
PATH=$ROOT/bin:$PATH
ADV=$ROOT/tests/adversarial
rec() { # candidate task
	jq -nc --arg id "$1" --rawfile code "$ADV/tasks/$2.py" --arg dir "$ADV/$1" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
}
{
	for i in 1 2 3 4; do rec honest/relu relu; done
	rec honest/sum sum; rec honest/sum sum
	rec honest/softmax softmax; rec honest/softmax softmax
	rec cheat/timer_patch relu; rec cheat/side_stream relu
} >"$OUT/stream.ndjson"
show() {
	jq -r '[.id, (.profile.ok | tostring), (.profile.candidate_us * 10 | round / 10),
		(2 * (.profile.clock.min_reported_us + 5) * 10 | round / 10),
		(.profile.candidate_us / (2 * (.profile.clock.min_reported_us + 5)) * 1000 | round / 1000),
		.profile.clock.loops, (.profile.error // "" | .[0:60])] | @tsv' "$1"
}
profile() { # name, then ca-profile's options
	name=$1; shift
	echo "== $name"
	ca-profile --verify --no-compile --iters 20 "$@" <"$OUT/stream.ndjson" >"$OUT/$name.ndjson" 2>"$OUT/$name.err"
	show "$OUT/$name.ndjson"
}
# The first run also caches the tasks' baselines.
for run in ${CA_PROBE_RUNS:-warm one-slot-1 one-slot-2 three-slots-1 three-slots-2}; do
	case $run in
	three-slots*) profile "$run" --gpus 0,0,0 ;;
	*) profile "$run" ;;
	esac
done
