#!/bin/sh
# A candidate that fills the disk its directory is on (files written until
# none fit) makes the reference's writes, and ours, fail for want of
# space: that is its doing (stage run, reward -1), not an evaluator fault
# (null), when its own files take half of that filesystem or more
# (candidate_filled_disk, lib/eval/evaluate_files.c). The disk here is a
# 64 MB tmpfs under CA_EVAL_TMPDIR; the candidate runs sandboxed, as the
# sandbox's user, which is how its files are told from ours.
. "$(dirname "$0")/test-lib.sh"

ADV=$TESTS_DIR/adversarial
SHM=$TRASH_BASE/shm

if ! has_torch; then
	skip 'a candidate that fills the disk' 'no torch for the Python runner (make deps)'
	test_done
	exit
fi
if [ "$(id -u)" != 0 ] || ! command -v cc >/dev/null 2>&1 || ! ca-sandbox --help >/dev/null 2>&1 ||
	! { mkdir -p "$SHM" && mount -t tmpfs -o size=64m,mode=1777 tmpfs "$SHM" 2>/dev/null; }; then
	skip 'a candidate that fills the disk' 'needs root, ca-sandbox, a C compiler and a tmpfs mount'
	test_done
	exit
fi
if ! ca-sandbox -- "$(ca_python)" -c "import torch" >/dev/null 2>&1; then
	umount "$SHM"
	skip 'a candidate that fills the disk' "the sandbox's user cannot run $(ca_python) with torch"
	test_done
	exit
fi
trap 'umount "$SHM" 2>/dev/null' EXIT

C=$TRASH_BASE/candidates
mkdir -p "$C"
cp -R "$ADV/honest/relu" "$C/relu" && rm -rf "$C/relu/kernels" && mkdir -p "$C/relu/build" &&
	cc -shared -fPIC -o "$C/relu/build/libkernels.so" "$ADV/cpu/relu_cpu.c" || exit 1
chmod -R a+rX "$C"
# Wrong (zeros), and at import writes files into its directory until none fit.
mkdir -p "$C/fill"
cat >"$C/fill/model_new.py" <<'PY'
import os

import torch
import torch.nn as nn

_chunk = b"\0" * (1 << 20)
for _i in range(100000):
    try:
        with open("hoard-%d" % _i, "wb") as _f:
            for _ in range(4):
                _f.write(_chunk)
    except OSError:
        break


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
PY
chmod -R a+rX "$C"
record() { # id dir
	jq -nc --arg id "$1" --rawfile code "$ADV/tasks/relu_small.py" --arg dir "$2" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
}

expect_success 'a wrong candidate that fills the disk fails as its own doing (run, reward -1); the next record passes' '
	{ record fill "$C/fill"; record relu "$C/relu"; } |
		CA_EVAL_TMPDIR=$SHM ca-verify --device cpu --timeout 20 --checks 2 >out; s=$?
	jq -c ".verify | {ok, stage, error}" out | sed "s/^/# /"
	test $s -eq 1 &&
	jq -e -s ".[0].verify | .ok == false and .stage == \"run\" and (.evaluator_fault | not) and
		(.error | test(\"filled the disk\"))" out >/dev/null &&
	jq -e -s ".[1].verify.ok == true" out >/dev/null &&
	head -n 1 out | ca-reward | jq -e ".reward.value == -1" >/dev/null &&
	test -z "$(ls -A "$SHM")"
'
test_done
