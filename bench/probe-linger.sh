#!/bin/sh
# Does GPU work a candidate left queued slow the reference while the
# candidate is stopped? (A hole suspected in session 21: ca-profile stops
# the candidate's processes while the reference is timed, but kernels
# already queued keep running, and an inflated baseline is a speedup the
# candidate did not earn.) On a GPU machine, relu_mid, baselines timed
# afresh in every run: honest/relu as it is, then the same kernel with a
# thread that keeps about half a second of its own ReLU kernel (on a 1 GB
# buffer, not an ATen kernel, so the fallback rule cannot see it) queued
# on a side stream whenever its worker waits for a request (as cheat/hog
# does with the CPU).
# Prints each record's eager_us, candidate_us, the speedup and ca-reward's
# value. If "linger" reads a far higher eager_us than "honest", the hole is
# real; see the closing note of session 21 for the defense proposed.
#
#   make all && sh bench/probe-linger.sh [ROUNDS]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATH=$ROOT/bin:$PATH
export PATH
ROUNDS=${1:-2}
[ $# -gt 0 ] && shift
if ! command -v nvidia-smi >/dev/null 2>&1; then
	echo "probe-linger: no GPU here; nothing to measure" >&2
	exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
export CA_CACHE=${CA_CACHE:-$W/cache}
A=$ROOT/tests/adversarial
cp -R "$A/honest/relu" "$W/honest"
cp -R "$A/honest/relu" "$W/linger"
cat >"$W/linger/model_new.py" <<'PY'
import sys
import threading
import time

import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()
main = threading.main_thread()


def linger():
    side = torch.cuda.Stream()
    a = torch.randn(1 << 28, device="cuda")
    b = torch.empty_like(a)
    pending = []
    while True:
        f = sys._current_frames().get(main.ident)
        idle = f is not None and f.f_code.co_name == "main"
        pending = [e for e in pending if not e.query()]
        if idle and len(pending) < 800:
            with torch.cuda.stream(side):
                ca_kernels.launch(lib.relu_launch, a, b, a.numel())
                e = torch.cuda.Event()
                e.record()
            pending.append(e)
        else:
            time.sleep(0.0005)


threading.Thread(target=linger, daemon=True).start()


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        ca_kernels.launch(lib.relu_launch, x, y, x.numel())
        return y
PY
r=1
while [ "$r" -le "$ROUNDS" ]; do
	for name in honest linger; do
		rm -rf "$CA_CACHE/baselines"
		jq -nc --arg id "$name" --rawfile code "$A/tasks/relu_mid.py" --arg dir "$W/$name" \
			'{id: $id, code: $code, candidate: {dir: $dir}}' |
			ca-profile --verify --no-compile "$@" 2>"$W/e.txt" | ca-reward 2>/dev/null |
			jq -c '{id, ok: .profile.ok, eager_us: .profile.eager_us, candidate_us: .profile.candidate_us,
				baseline_retimed: .profile.baseline_retimed, reward: .reward.value, error: (.profile.error // "" | .[0:120])}'
	done
	r=$((r + 1))
done
