#!/bin/sh
# ca-verify on real KernelBench tasks at their full size (level 1 #19 ReLU,
# #47 sum over a dimension; gigabytes of input per check) with the honest
# candidates of tests/adversarial: accepted, with their kernels recorded,
# the inputs drawn on the GPU by each process.
. "$(dirname "$0")/../test-lib.sh"

if ! has_gpu || ! has_torch; then
	skip 'real KernelBench tasks' 'needs a GPU and torch'
	test_done
	exit
fi
ADV=$TESTS_DIR/adversarial
KB=$TESTS_DIR/data/kernelbench
PY=$(ca_python)
if [ -z "${CA_EVAL_OPTS+set}" ]; then
	ca-sandbox --gpu --env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" -- "$PY" -c \
		'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1 || CA_EVAL_OPTS=--no-sandbox
fi
{
	jq -c --arg dir "$ADV/honest/relu" '{id: "kernelbench/L1/\(.num)", code, candidate: {dir: $dir}}' "$KB/19_ReLU.ndjson"
	jq -c --arg dir "$ADV/honest/sum" '{id: "kernelbench/L1/\(.num)", code, candidate: {dir: $dir}}' "$KB/47_Sum_reduction_over_a_dimension.ndjson"
} >"$TRASH_BASE/records.ndjson"
LOG=${CA_GPU_LOG:-$TRASH_BASE}
mkdir -p "$LOG"
# Inputs of 6.4 and 8.6 GB: each process draws them on the GPU under the check's seed.
expect_success 'full-size KernelBench ReLU and sum: both verified' '
	ca-verify -v --checks 2 --timeout 300 ${CA_EVAL_OPTS:-} "$TRASH_BASE/records.ndjson" >"$LOG/kernelbench.ndjson" 2>"$LOG/kernelbench.err"
	sed "s/^/# /" "$LOG/kernelbench.err"
	jq -e -s "length == 2 and all(.verify.ok and (.verify.kernels | length) > 0 and .verify.inputs_drawn_on == \"device\")" "$LOG/kernelbench.ndjson"
'
test_done
