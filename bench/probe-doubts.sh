#!/bin/sh
# Why does our clock doubt honest loops? (bench/eval-h200.md, session 19.)
# On a GPU machine: three honest relu_mid candidates, each in its own
# `ca-profile --verify -v` run, ROUNDS rounds, baselines cached: ours
# (honest/relu), KernelBench's load_inline (flavours/kernelbench) and the
# task's own torch.relu as a candidate (its loop is the reference's to the
# line). Prints each record's outcome and each timed loop's -v line (the
# CPU, our clock against the bound, the reference's overhead, the
# candidate's page faults and CPU time), then, over all loops, the page
# faults and CPU share of the doubted loops against the accepted ones.
#
#   make all && sh bench/probe-doubts.sh [ROUNDS] [ca-profile options]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATH=$ROOT/bin:$PATH
export PATH
ROUNDS=${1:-5}
[ $# -gt 0 ] && shift
if ! command -v nvidia-smi >/dev/null 2>&1; then
	echo "probe-doubts: no GPU here; nothing to measure" >&2
	exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export CA_CACHE=${CA_CACHE:-$W/cache}
A=$ROOT/tests/adversarial
mkdir -p "$W/ref"
cat >"$W/ref/model_new.py" <<'PY'
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
PY
rec() { jq -nc --arg id "$1" --rawfile code "$A/tasks/relu_mid.py" --arg dir "$2" '{id: $id, code: $code, candidate: {dir: $dir}}'; }
rec ca "$A/honest/relu" >"$W/ca.nd"
rec kb "$A/flavours/kernelbench" >"$W/kb.nd"
rec ref "$W/ref" >"$W/ref.nd"
one() { # name [ca-profile options]
	n=$1
	shift
	ca-profile --verify --no-compile --allow-torch -v "$@" "$W/$n.nd" >"$W/o.nd" 2>"$W/e.txt"
	printf '%s: ' "$n"
	jq -c '.profile | {ok, candidate_us, reported_us, eager_us, retimed, error: (.error // "" | .[0:100])}' "$W/o.nd"
	grep -o 'timed loop.*' "$W/e.txt" | tee -a "$W/loops.txt" | sed 's/^/  /'
}
for name in ca kb ref; do one $name "$@" >/dev/null; done  # builds and baselines
: >"$W/loops.txt"
r=1
while [ $r -le "$ROUNDS" ]; do
	echo "== round $r"
	for name in ca kb ref; do one $name "$@"; done
	r=$((r + 1))
done
# Page faults and the CPU share (CPU time / wall time) of the candidate's processes, doubted against accepted.
awk '{
	ok = $0 ~ /: accepted$/
	if (match($0, /processes: [0-9]+ page faults/)) { split(substr($0, RSTART, RLENGTH), f, " "); faults = f[2] }
	if (match($0, /[0-9.]+ ms of CPU in [0-9.]+ ms/)) { split(substr($0, RSTART, RLENGTH), c, " "); share = c[6] > 0 ? c[1] / c[6] : 0 }
	n[ok]++; sf[ok] += faults; sc[ok] += share
}
END {
	for (k = 1; k >= 0; k--)
		if (n[k])
			printf "%s loops: %d, page faults %.0f on average, CPU share %.2f\n", k ? "accepted" : "doubted", n[k], sf[k] / n[k], sc[k] / n[k]
}' "$W/loops.txt"
