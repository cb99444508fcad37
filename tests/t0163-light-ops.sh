#!/bin/sh
# The lightest torch headers a candidate's torch extension is built with
# first (lib/py/ca_runner.py, _ops_header): where its CUDA sources allow,
# torch/types.h (which load_inline puts before them) declares ATen's
# Tensor and only the operators the sources call. nvcc compiles such a
# unit in about half the time; one that needs more fails with it and is
# built again with ca's light header, then torch's (t0158, tests/gpu/t0152).
. "$(dirname "$0")/test-lib.sh"

if ! has_torch; then
	skip 'the lightest CUDA header' 'no torch for the Python runner (make deps)'
	test_done
	exit
fi

PY=$(ca_python)
EXT=$TRASH_BASE/ext
mkdir -p "$EXT"
# KernelBench's load_inline ReLU: its CUDA source, and one that calls torch::tensor (not an ATen operator).
"$PY" - "$TESTS_DIR/adversarial/flavours/kernelbench/model_new.py" "$TRASH_BASE" <<'EOF' || exit 1
import re
import sys
src = re.search(r'cuda_source = r"""(.*?)"""', open(sys.argv[1]).read(), re.S).group(1)
open(sys.argv[2] + "/relu.cu.txt", "w").write(src)
open(sys.argv[2] + "/tensor.cu.txt", "w").write(src.replace("auto y = torch::empty_like(xc);",
    "auto y = torch::empty_like(xc) + torch::tensor({0.f}, xc.options());"))
EOF
ops() { # the sources' files: the directory _ops_header makes, or None
	TORCH_EXTENSIONS_DIR=$EXT PYTHONPATH=$ROOT/lib/py "$PY" -c '
import sys
import ca_runner
print(ca_runner._ops_header([open(p).read() for p in sys.argv[1:]]))' "$@" 2>/dev/null
}

expect_success 'the operators the CUDA source calls, each by its own header, and torch'"'"'s names for them' '
	d=$(ops "$TRASH_BASE/relu.cu.txt") && test -d "$d" && cat "$d/torch/types.h" &&
	grep -q "^#include <ATen/ops/empty_like.h>$" "$d/torch/types.h" &&
	grep -q "^#include <ATen/ops/contiguous.h>$" "$d/torch/types.h" &&
	grep -q "^namespace torch { using namespace at; }$" "$d/torch/types.h" &&
	grep -q "^#include_next <torch/types.h>$" "$d/torch/types.h" &&
	! grep -q "ops/relu_kernel.h\|ops/fmaxf.h" "$d/torch/types.h" &&
	grep -q "^#include <torch/python.h>$" "$d/torch/extension.h"
'

expect_success 'the same sources, the same directory (the next process rebuilds nothing); others, another' '
	a=$(ops "$TRASH_BASE/relu.cu.txt") && b=$(ops "$TRASH_BASE/relu.cu.txt") && c=$(ops "$TRASH_BASE/tensor.cu.txt") &&
	test "$a" = "$b" && test "$a" != "$c"
'

expect_success 'none without CUDA sources, or where they name requires_grad' '
	test "$(ops)" = None &&
	sed "s/xc.numel();/xc.numel(); (void)xc.requires_grad();/" "$TRASH_BASE/relu.cu.txt" >rg.txt &&
	test "$(ops rg.txt)" = None
'

if ! command -v nvcc >/dev/null 2>&1; then
	skip 'nvcc compiles a load_inline CUDA unit with it' 'no nvcc'
	test_done
	exit
fi
# A CUDA unit as load_inline writes it, compiled (not linked) with the flags torch's would have.
unit() { # source-file tier-dir
	{ printf '#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n'; cat "$1"; } >unit.cu
	T=$("$PY" -c 'from torch.utils import cpp_extension as c; print(" ".join("-isystem " + p for p in c.include_paths()))')
	I=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
	CPATH=$2 nvcc -std=c++20 $T -isystem "$I" -DTORCH_EXTENSION_NAME=relu_inline -DTORCH_API_INCLUDE_EXTENSION_H \
		--expt-relaxed-constexpr -Xcompiler -fPIC -O2 -c unit.cu -o unit.o
}

expect_success 'nvcc compiles KernelBench'"'"'s ReLU unit with it' '
	unit "$TRASH_BASE/relu.cu.txt" "$(ops "$TRASH_BASE/relu.cu.txt")" && test -s unit.o
'

expect_success 'a unit that calls what is not an ATen operator (torch::tensor) fails with it: built again with more' '
	! unit "$TRASH_BASE/tensor.cu.txt" "$(ops "$TRASH_BASE/tensor.cu.txt")" >log 2>&1
	s=$?
	tail -3 log
	test $s -eq 0 && ! test -s unit.o && grep -q "tensor" log
'

test_done
