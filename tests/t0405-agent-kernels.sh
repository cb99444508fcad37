#!/bin/sh
# The kernels the GPU test's replayed agent writes (KernelBench L1/14 and
# L2/18), checked without a GPU: they compile for sm_90, and their steps,
# run on the CPU, match a double-precision reference. Needs nvcc.
. "$(dirname "$0")/test-lib.sh"

D=$TESTS_DIR/data/agent
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
if [ -z "$NVCC" ]; then
	skip 'agent kernels compile and match a CPU reference' 'nvcc not found'
	test_done
	exit 0
fi

for k in kb-l1-14/kernels/triu_matmul.cu kb-l2-18/kernels/linear_sum.cu; do
	expect_success "$k compiles for sm_90 as ca-build compiles it" '
		"$NVCC" -shared -Xcompiler -fPIC -arch=sm_90 -O3 -std=c++17 -o k.so "$D/'"$k"'"
	'
done

expect_success 'emulated on the CPU, both kernels match the reference' '
	(cd "$D" && "$NVCC" -O2 -std=c++17 -o "$TRASH/emulate" emulate-kernels.cu) && "$TRASH/emulate"
'

test_done
