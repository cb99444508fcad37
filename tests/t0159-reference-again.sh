#!/bin/sh
# A reference request that fails beside the candidate is asked again
# (lib/eval/evaluate_again.c): beside it, then with it killed. On the CPU a
# lock file stands in for the GPU's memory: the task's reference fails,
# as torch does out of memory, while another process holds the lock.
#   - a wrong candidate that holds it from its import fails as the
#     candidate's doing (stage run, reward -1), not as the evaluator's
#     (null): holding what the reference needs earns nothing;
#   - held by a process that is not the candidate: the reference's
#     failure, an evaluator fault (ok null), as before;
#   - a failure that comes once and goes: the record goes on and passes.
# tests/gpu/t0150 has the GPU's case (cheat/starve: the memory itself).
. "$(dirname "$0")/test-lib.sh"
. "$TESTS_DIR/held-lock.sh"

held_lock_setup 'a reference failure asked again'

# The task: ReLU whose reference fails while another process holds $LOCK,
# and the first time it runs while $TRASH_BASE/once exists.
cat >"$TRASH_BASE/shared.py" <<EOF
import fcntl
import os

import torch
import torch.nn as nn

LOCK = "$LOCK"
ONCE = "$TRASH_BASE/once"


$(held_python)


class Model(nn.Module):
    def forward(self, x):
        if _held():
            raise RuntimeError("out of memory: what the model needs is held by another process")
        if os.path.exists(ONCE):
            os.unlink(ONCE)
            raise RuntimeError("out of memory, for a moment")
        return torch.relu(x)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
EOF

# A correct candidate (the C stand-in's ReLU) that takes the lock in its
# first timed call (the runner's time or burst request on its stack) and
# keeps it: the reference's baselines or bursts after it fail beside it.
holder starve_late 'f.f_code.co_name in ("op_time", "op_burst")' || exit 1

# The same candidate taking the lock in its first robustness check (the
# last of verify's), so that it holds it through profile's baselines.
holder starve_mid 'f.f_code.co_name == "op_run" and (f.f_locals.get("req") or {}).get("robust")' || exit 1

# The same task whose reference fails only in its timed loops (a time or
# burst request on its stack): as a loop that needs more memory than one
# call, the failure is first met there.
sed -e 's/^        if _held():$/        if _held() and _in_loop():/' "$TRASH_BASE/shared.py" >"$TRASH_BASE/shared_loop.py" &&
	cat >>"$TRASH_BASE/shared_loop.py" <<EOF


def _in_loop():
    import sys
    f = sys._getframe()
    while f is not None:
        if f.f_code.co_name in ("op_time", "op_burst"):
            return True
        f = f.f_back
    return False
EOF
grep -q "_in_loop():" "$TRASH_BASE/shared_loop.py" || exit 1

record() { # id dir [task]
	jq -nc --arg id "$1" --rawfile code "$TRASH_BASE/${3:-shared}.py" --arg dir "$2" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
}
verify() { ca-verify --device cpu --no-sandbox --timeout 20 --checks 2 "$@"; }

expect_success 'a wrong candidate that holds what the reference needs fails as its own doing (run), reward -1' '
	record starve "$C/starve" | verify >out; s=$?
	jq -c ".verify | {ok, stage, error}" out
	test $s -eq 1 &&
	jq -e ".verify | .ok == false and .stage == \"run\" and (.evaluator_fault | not) and
		(.error | test(\"passed once it was killed\")) and (.error | test(\"held by another process\"))" out &&
	ca-reward out | jq -e ".reward.value == -1"
'

expect_success 'the next record after it is scored normally' '
	{ record starve "$C/starve"; record relu "$C/relu"; } | verify >out
	test "$(jq -r ".verify.ok" out | tr "\n" " ")" = "false true "
'

expect_status 4 'held by a process that is not the candidate: the reference'"'"'s failure (ok null, exit 4)' '
	flock "$LOCK" sleep 60 & holder=$!
	sleep 0.5
	record relu "$C/relu" | verify >out; s=$?
	kill $holder 2>/dev/null; pkill -f "sleep 60" 2>/dev/null
	jq -c ".verify | {ok, stage, error}" out
	jq -e ".verify | .ok == null and .stage == \"reference\" and .evaluator_fault" out || exit 9
	exit $s
'

expect_success 'a failure that comes once and goes: asked again, the record goes on and passes' '
	: >"$TRASH_BASE/once"
	record relu "$C/relu" | verify >out
	jq -c ".verify | {ok, stage, error, checks_passed}" out
	test ! -e "$TRASH_BASE/once" &&
	jq -e ".verify | .ok == true and .checks_passed == 2" out
'

expect_success 'a correct candidate that holds it from its timed calls on fails in profile as its own doing, not null' '
	record starve_late "$C/starve_late" | CA_CACHE=$TRASH/cache ca-profile --verify --device cpu --no-sandbox --no-compile \
		--iters 10 --warmup 2 --timeout 20 >out; s=$?
	jq -c "{verify: .verify.ok, profile: (.profile | {ok, stage, error})}" out
	test $s -eq 1 &&
	jq -e ".verify.ok and .profile.ok == false and .profile.stage == \"run\" and
		(.profile.error | test(\"passed once it was killed\"))" out &&
	ca-reward out | jq -e ".reward.value == -1"
'

expect_success 'the same when the reference fails only in its timed loops (its baselines, run again as a whole)' '
	record starve_mid "$C/starve_mid" shared_loop | CA_CACHE=$TRASH/cache ca-profile --verify --device cpu --no-sandbox \
		--no-compile --iters 10 --warmup 2 --timeout 20 >out; s=$?
	jq -c "{verify: .verify.ok, profile: (.profile | {ok, stage, error})}" out
	test $s -eq 1 &&
	jq -e ".verify.ok and .profile.ok == false and .profile.stage == \"run\" and
		(.profile.error | test(\"passed once it was killed\"))" out
'

expect_success 'the honest candidate is profiled normally beside the same task' '
	record relu "$C/relu" shared_loop | CA_CACHE=$TRASH/cache ca-profile --verify --device cpu --no-sandbox --no-compile \
		--iters 10 --warmup 2 --timeout 20 >out
	jq -c "{verify: .verify.ok, profile: (.profile | {ok, stage, error})}" out
	jq -e ".verify.ok and .profile.ok" out
'

test_done
