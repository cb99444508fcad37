#!/bin/sh
# The three workspace flavours on a GPU, one honest ReLU each, sandboxed:
# ours (kernels/*.cu with extern "C" launchers, built by nvcc, called through
# ca_kernels), CUDA-Agent's agent_workdir (kernels/*_binding.cpp, built by
# ca-build as the torch extension cuda_extension) and KernelBench's
# (model_new.py builds its CUDA with load_inline): each verified and
# profiled by one ca-profile --verify run.
. "$(dirname "$0")/../test-lib.sh"

if ! has_gpu || ! has_torch; then
	skip 'the three workspace flavours' 'needs a GPU and torch'
	test_done
	exit
fi
ADV=$TESTS_DIR/adversarial
LOG=${CA_GPU_LOG:-$TRASH_BASE}
mkdir -p "$LOG"
PY=$(ca_python)
if [ -z "${CA_EVAL_OPTS+set}" ]; then
	ca-sandbox --gpu --env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" -- "$PY" -c \
		'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1 || CA_EVAL_OPTS=--no-sandbox
fi
record() { # id dir
	jq -nc --arg id "$1" --rawfile code "$ADV/tasks/relu_mid.py" --arg dir "$2" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
}
{
	record ca "$ADV/honest/relu"
	record cuda-agent "$ADV/flavours/cuda_agent"
	record kernelbench "$ADV/flavours/kernelbench"
} >"$TRASH_BASE/records.ndjson"

expect_success 'ours, CUDA-Agent'"'"'s and KernelBench'"'"'s workspaces: verified and profiled' '
	ca-profile --verify --no-compile -v -u ${CA_EVAL_OPTS:-} "$TRASH_BASE/records.ndjson" >"$LOG/flavours.ndjson" 2>"$LOG/flavours.err"
	jq -c "{id, flavour: .verify.build.flavour, verify: (.verify | {ok, stage, error, seconds}), profile: (.profile | {ok, stage, error, candidate_us, eager_us})}" "$LOG/flavours.ndjson" | cut -c1-600 | sed "s/^/# /"
	jq -e -s "length == 3 and all(.verify.ok and .profile.ok and .profile.candidate_us > 0)" "$LOG/flavours.ndjson"
'
test_done
