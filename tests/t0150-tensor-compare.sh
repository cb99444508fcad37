#!/bin/sh
# lib/tensor and lib/compare: the unit tests, then tensor files written by
# the Python runner read by C (and back), nested values, every dtype.
. "$(dirname "$0")/test-lib.sh"

expect_success 'lib/tensor, lib/compare, cache keys, kernel policy: unit tests' 'test-tensor_compare "$TRASH"'
expect_status 2 'the unit-test driver refuses bad usage' 'test-tensor_compare'

if ! has_torch; then
	skip 'runner tensor files' 'no torch for the Python runner (make deps)'
	test_done
	exit
fi
PY=$(ca_python)
RUNNER_DIR=$ROOT/lib/py

expect_success 'nested values written by the runner are read by C with names, dtypes and shapes' '
	"$PY" -c "
import sys, torch
sys.path.insert(0, \"$RUNNER_DIR\")
import ca_runner as r
value = (torch.arange(6, dtype=torch.float32).reshape(2, 3), {\"mean\": torch.tensor(1.5, dtype=torch.float64), \"n\": 3},
         [torch.tensor([1, -2], dtype=torch.int64), torch.tensor([True, False]), None],
         torch.tensor([1.0, -2.0], dtype=torch.bfloat16), torch.tensor([0.5], dtype=torch.float16), 2.5)
r.write_tensors(\"out.ten\", value)
back = r.read_tensors(\"out.ten\")
assert torch.equal(back[0], value[0]) and back[1][\"n\"] == 3 and back[2][2] is None and back[5] == 2.5
assert isinstance(back[2], list) and torch.equal(back[3], value[3])
" &&
	test-tensor_compare dump out.ten >dump &&
	cat >expect <<-\EOF2 &&
	(0) float32 [2, 3] 0 1 2 3
	(1){mean} float64 [] 1.5
	(1){n} int64(scalar) [] 3
	(2)[0] int64 [2] 1 -2
	(2)[1] bool [2] 1 0
	(2)[2] none []
	(3) bfloat16 [2] 1 -2
	(4) float16 [1] 0.5
	(5) float64(scalar) [] 2.5
	EOF2
	cmp_output expect dump
'

expect_success 'compare: a file against itself is equal, max errors 0' '
	"$PY" -c "
import sys, torch
sys.path.insert(0, \"$RUNNER_DIR\")
import ca_runner as r
torch.manual_seed(0)
x = torch.randn(64, 64)
r.write_tensors(\"ref.ten\", x)
r.write_tensors(\"near.ten\", x + 1e-4)
r.write_tensors(\"far.ten\", x + 0.5)
r.write_tensors(\"half.ten\", x.half())
r.write_tensors(\"tuple.ten\", (x,))
" &&
	test-tensor_compare compare ref.ten ref.ten >out &&
	grep -q "^equal max_abs_err=0 " out &&
	test-tensor_compare compare ref.ten near.ten &&
	! test-tensor_compare compare ref.ten far.ten &&
	test-tensor_compare compare ref.ten far.ten 1 0 &&
	! test-tensor_compare compare ref.ten half.ten >out && grep -q "dtype float16, expected float32" out &&
	! test-tensor_compare compare ref.ten tuple.ten >out && grep -q structure out
'

expect_success 'compare: a candidate file much larger than the reference is refused before it is read' '
	"$PY" -c "
import sys, torch
sys.path.insert(0, \"$RUNNER_DIR\")
import ca_runner as r
r.write_tensors(\"small.ten\", torch.zeros(4))
r.write_tensors(\"big.ten\", torch.zeros(1 << 20))
" &&
	! test-tensor_compare compare small.ten big.ten >out && grep -q "more than" out
'
test_done
