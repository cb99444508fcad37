#!/bin/sh
# A reference that does not answer in time, or dies, beside the candidate
# is started afresh and asked again (lib/eval/evaluate_again.c,
# reference_gone): beside the candidate, then with it killed. On the CPU
# a lock file stands in for what a candidate can keep from the reference
# (the machine's time): the task's reference hangs, or kills itself,
# while another process holds the lock.
#   - a wrong candidate that holds it fails as its own doing (stage run,
#     reward -1), not as the evaluator's (null): a reference it starved
#     into a timeout earns it nothing;
#   - the same in profile's timed loops, and at the sizes --shapes gave
#     the task (the reference's model made again there);
#   - held by a process that is not the candidate, or a reference that
#     answers alone only near its limit: the evaluator's fault (ok null);
#   - a hang or a death that comes once and goes: the record goes on and
#     passes (the candidate's answer, come while the reference restarted,
#     is read then).
# t0159 has the same for a reference that answers that it failed.
. "$(dirname "$0")/test-lib.sh"
. "$TESTS_DIR/held-lock.sh"

held_lock_setup 'a reference gone, asked again'

# The task: ReLU whose reference hangs (HOW=hang) or kills itself
# (HOW=die) while another process holds $LOCK; hangs the first time it
# runs a check while $TRASH_BASE/once exists (once-shapes: the first
# at other sizes than its own); takes 5 s a call while
# $TRASH_BASE/slow exists. Its sizes are globals, for --shapes.
task() { # HOW
	cat <<EOF
import fcntl
import os
import signal
import sys
import time

import torch
import torch.nn as nn

LOCK = "$LOCK"
ONCE = "$TRASH_BASE/once"
SLOW = "$TRASH_BASE/slow"
BATCH = 16
DIM = 64
BATCH0 = BATCH


$(held_python)


def _checking():
    f = sys._getframe()
    while f is not None and f.f_code.co_name != "op_inputs":
        f = f.f_back
    return f is not None


def _stuck():
    if "$1" == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


class Model(nn.Module):
    def forward(self, x):
        if _held():
            _stuck()
        once = ONCE if x.shape[0] == BATCH0 else ONCE + "-shapes"
        if os.path.exists(once) and _checking():
            os.unlink(once)
            _stuck()
        if os.path.exists(SLOW):
            time.sleep(5)
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
EOF
}
task hang >"$TRASH_BASE/hang.py" && task die >"$TRASH_BASE/die.py" || exit 1

# Correct candidates that take the lock in their first timed call, or as
# ModelNew is built at other sizes (--shapes).
holder starve_time 'f.f_code.co_name in ("op_time", "op_burst")' &&
	holder starve_shapes 'f.f_code.co_name == "op_resize"' || exit 1

# An honest candidate that answers each call 1 s late (within --timeout 2):
# the reference that dies at once is read first.
cp -R "$C/relu" "$C/relu_slow" && cat >>"$C/relu_slow/model_new.py" <<EOF || exit 1

import time

_forward = ModelNew.forward
ModelNew.forward = lambda self, x: (time.sleep(1), _forward(self, x))[1]
EOF

record() { # id dir task
	jq -nc --arg id "$1" --rawfile code "$TRASH_BASE/$3.py" --arg dir "$2" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
}
verify() { ca-verify --device cpu --no-sandbox --timeout 2 --checks 2 "$@"; }
blamed='.ok == false and .stage == "run" and (.evaluator_fault | not) and (.error | test("passed once it was killed"))'

expect_success 'a wrong candidate that starves the reference into a timeout fails as its own doing (run), reward -1' '
	record starve "$C/starve" hang | verify >out; s=$?
	jq -c ".verify | {ok, stage, error}" out
	test $s -eq 1 &&
	jq -e ".verify | $blamed and (.error | test(\"no answer within 8 s\"))" out &&
	ca-reward out | jq -e ".reward.value == -1"
'

expect_success 'the same when the reference dies beside it' '
	record starve "$C/starve" die | verify >out; s=$?
	jq -c ".verify | {ok, stage, error}" out
	test $s -eq 1 &&
	jq -e ".verify | $blamed and (.error | test(\"signal 9\"))" out
'

expect_status 4 'held by a process that is not the candidate: the reference'"'"'s fault (ok null, exit 4)' '
	flock "$LOCK" sleep 120 & holder=$!
	sleep 0.5
	record relu "$C/relu" hang | verify >out; s=$?
	kill $holder 2>/dev/null; pkill -f "sleep 120" 2>/dev/null
	jq -c ".verify | {ok, stage, error}" out
	jq -e ".verify | .ok == null and .stage == \"reference\" and .evaluator_fault and
		(.error | test(\"asked again: it failed beside the candidate and 1 time\"))" out || exit 9
	exit $s
'

expect_status 4 'a reference that answers alone only near its limit: the evaluator'"'"'s fault' '
	record starve "$C/starve" hang | { : >"$TRASH_BASE/slow"; verify; } >out; s=$?
	rm -f "$TRASH_BASE/slow"
	jq -c ".verify | {ok, stage, error}" out
	jq -e ".verify | .ok == null and .stage == \"reference\" and (.error | test(\"too near its limit\"))" out || exit 9
	exit $s
'

expect_success 'a hang that comes once and goes: asked again, the record goes on and passes' '
	: >"$TRASH_BASE/once"
	record relu "$C/relu" hang | verify >out
	jq -c ".verify | {ok, stage, error, checks_passed}" out
	test ! -e "$TRASH_BASE/once" &&
	jq -e ".verify | .ok == true and .checks_passed == 2" out
'

expect_success 'a correct candidate that starves the reference'"'"'s timed loops fails in profile as its own doing' '
	record starve_time "$C/starve_time" hang | CA_CACHE=$TRASH/cache ca-profile --verify --device cpu --no-sandbox \
		--no-compile --iters 10 --warmup 2 --timeout 1 >out; s=$?
	jq -c "{verify: .verify.ok, profile: (.profile | {ok, stage, error})}" out
	test $s -eq 1 &&
	jq -e ".verify.ok and (.profile | $blamed)" out
'

expect_success 'a death that comes once beside an honest candidate: its answer, read after the restart, is kept' '
	: >"$TRASH_BASE/once"
	record relu_slow "$C/relu_slow" die | verify >out
	jq -c ".verify | {ok, stage, error, checks_passed}" out
	test ! -e "$TRASH_BASE/once" &&
	jq -e ".verify | .ok == true and .checks_passed == 2" out
'

expect_success 'a hang that comes once at the sizes --shapes gave: the reference made again there, the record passes' '
	: >"$TRASH_BASE/once-shapes"
	record relu "$C/relu" hang | verify --shapes 1 >out
	jq -c ".verify | {ok, stage, error, shapes, inputs_shipped}" out
	test ! -e "$TRASH_BASE/once-shapes" &&
	jq -e ".verify | .ok == true and .shapes.passed == 1 and .shapes.sizes[0].globals.BATCH != 16 and
		(.inputs_shipped | not)" out
'

expect_success 'a correct candidate that starves the reference there is blamed' '
	record starve_shapes "$C/starve_shapes" hang | verify --shapes 1 >out; s=$?
	jq -c ".verify | {ok, stage, error, shapes}" out
	test $s -eq 1 &&
	jq -e ".verify | .ok == false and (.error | test(\"passed once it was killed\"))" out
'

test_done
