# held-lock.sh: what the tests of a reference asked again share (t0159,
# t0162), sourced after test-lib.sh. On the CPU a lock file, $LOCK, stands
# in for what a candidate can keep from the reference (the GPU's memory,
# the machine's time): the tasks' references misbehave while another
# process holds it.
#
#   held_lock_setup WHAT   skip the whole test (and exit) without torch, a
#                          C compiler or flock(1); else make $LOCK and, in
#                          $C, relu (honest/relu with its CUDA kernel
#                          replaced by the C stand-in) and starve (wrong,
#                          zeros, taking the lock at import and keeping it)
#   held_python            the Python of a task's _held(): whether another
#                          process holds $LOCK (LOCK defined before it)
#   holder NAME WHEN       $C/NAME: relu that takes the lock, and keeps it,
#                          when a frame f on its stack has WHEN true (a
#                          Python expression), in a call or as ModelNew
#                          is built

held_lock_setup() {
	if ! has_torch; then
		skip "$1" 'no torch for the Python runner (make deps)'
		test_done
		exit
	fi
	if ! command -v cc >/dev/null 2>&1 || ! command -v flock >/dev/null 2>&1; then
		skip "$1" 'no C compiler or no flock(1)'
		test_done
		exit
	fi
	C=$TRASH_BASE/candidates
	LOCK=$TRASH_BASE/held.lock
	mkdir -p "$C"
	: >"$LOCK"
	cp -R "$TESTS_DIR/adversarial/honest/relu" "$C/relu" && rm -rf "$C/relu/kernels" && mkdir -p "$C/relu/build" &&
		cc -shared -fPIC -o "$C/relu/build/libkernels.so" "$TESTS_DIR/adversarial/cpu/relu_cpu.c" || exit 1
	mkdir -p "$C/starve"
	cat >"$C/starve/model_new.py" <<EOF
import fcntl
import os

import torch
import torch.nn as nn

_fd = os.open("$LOCK", os.O_RDWR)
fcntl.flock(_fd, fcntl.LOCK_EX)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
EOF
}

held_python() {
	cat <<'EOF'
def _held():
    fd = os.open(LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
EOF
}

holder() {
	cp -R "$C/relu" "$C/$1" && cat >>"$C/$1/model_new.py" <<EOF

import fcntl
import os
import sys

_held = []
_forward = ModelNew.forward


def _now():
    f = sys._getframe()
    while f is not None:
        if $2:
            return True
        f = f.f_back
    return False


def _hold():
    if not _held and _now():
        _held.append(os.open("$LOCK", os.O_RDWR))
        fcntl.flock(_held[0], fcntl.LOCK_EX)


def _forward_holding(self, x):
    _hold()
    return _forward(self, x)


def _init_holding(self, *args):
    _hold()
    _init(self, *args)


_init = ModelNew.__init__
ModelNew.forward = _forward_holding
ModelNew.__init__ = _init_holding
EOF
}
