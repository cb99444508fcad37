#!/bin/sh
# verify sends each check to the reference and the candidate at once. The
# candidate's reply is taken as soon as it comes, before the reference's
# (lib/eval/evaluate_verify.c), and at its own --timeout at the latest:
#   - taking it stops the candidate's whole process tree, so processes it
#     leaves spinning cannot starve the reference's check of the CPUs
#     (a reference that does not answer is an evaluator fault, ok null,
#     where the candidate's wrong outputs earn -1);
#   - a reference slower than --timeout does not make a candidate that
#     answered in time late (it was read after the reference, past its
#     deadline, and judged "timeout").
. "$(dirname "$0")/test-lib.sh"

if ! has_torch || ! command -v cc >/dev/null 2>&1; then
	skip 'a candidate that starves the reference of CPU' 'no torch for the Python runner (make deps), or no C compiler'
	test_done
	exit
fi

C=$TRASH_BASE/candidates
MARK=ca-t0161-hog-$$
mkdir -p "$C/hog"
# Wrong (zeros); each call leaves 32 processes spinning until killed, each
# a session of its own (where the kernel groups the CPU by session, as
# many shares as sessions).
cat >"$C/hog/model_new.py" <<EOF
import os
import subprocess

import torch
import torch.nn as nn

_SPIN = "for i in \$(seq 32); do setsid sh -c 'while :; do :; done # $MARK' & done"


class ModelNew(nn.Module):
    def forward(self, x):
        subprocess.Popen(["sh", "-c", _SPIN])
        return torch.zeros_like(x)
EOF
# The task: ReLU whose reference spends about 1.2 s of CPU per call.
cat >"$TRASH_BASE/task.py" <<'EOF'
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        n = 0
        for i in range(12000000):
            n += i & 1
        return torch.relu(x) + 0 * n


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
EOF
record() { jq -nc --arg id "$1" --rawfile code "$TRASH_BASE/task.py" --arg dir "$2" '{id: $id, code: $code, candidate: {dir: $dir}}'; }

expect_success 'a wrong candidate whose processes spin beside the reference'"'"'s check fails on its outputs (reward -1), not as an evaluator fault' '
	record hog "$C/hog" | ca-verify --device cpu --no-sandbox --timeout 3 --checks 2 --robust 0 >out; s=$?
	sleep 0.5; left=$(pgrep -f "$MARK" | wc -l); pkill -KILL -f "$MARK" 2>/dev/null
	say "# its processes left after it: $left"
	jq -c ".verify | {ok, stage, error, seconds}" out | sed "s/^/# /"
	test $s -eq 1 && test "$left" -eq 0 &&
	jq -e ".verify | .ok == false and .stage == \"compare\" and (.evaluator_fault | not)" out >/dev/null &&
	ca-reward out | jq -e ".reward.value == -1" >/dev/null
'
pkill -KILL -f "$MARK" 2>/dev/null

# An honest candidate (the C stand-in's ReLU) and a reference that takes
# longer than --timeout over each call.
cp -R "$TESTS_DIR/adversarial/honest/relu" "$C/relu" && rm -rf "$C/relu/kernels" && mkdir -p "$C/relu/build" &&
	cc -shared -fPIC -o "$C/relu/build/libkernels.so" "$TESTS_DIR/adversarial/cpu/relu_cpu.c" || exit 1
sed -e 's/^        n = 0$/        time.sleep(2.5)\n        n = 0/' -e 's/range(12000000)/range(1)/' -e 's/^import torch$/import time\n\nimport torch/' \
	"$TRASH_BASE/task.py" >"$TRASH_BASE/slow.py" && grep -q "time.sleep" "$TRASH_BASE/slow.py" || exit 1
expect_success 'a candidate that answers in time passes beside a reference slower than --timeout' '
	jq -nc --arg id relu --rawfile code "$TRASH_BASE/slow.py" --arg dir "$C/relu" "{id: \$id, code: \$code, candidate: {dir: \$dir}}" |
		ca-verify --device cpu --no-sandbox --timeout 2 --checks 2 --robust 0 >out
	jq -c ".verify | {ok, stage, error, seconds}" out | sed "s/^/# /"
	jq -e ".verify.ok == true" out >/dev/null
'
test_done
