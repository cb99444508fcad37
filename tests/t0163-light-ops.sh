#!/bin/sh
# The lightest torch headers a candidate's torch extension is built with
# first (lib/py/ca_runner.py, _ops_header): ATen's Tensor and only the
# operators its sources call (their ATen/ops headers without what those
# include for their definitions), torch's names for them, and for a C++
# unit torch's Python bindings. nvcc and g++ compile a load_inline ReLU's
# units in about a third of the time; one that needs more fails with it
# and is built again with ca's light header, then torch's (t0158,
# tests/gpu/t0152).
. "$(dirname "$0")/test-lib.sh"

if ! has_torch; then
	skip 'the lightest CUDA header' 'no torch for the Python runner (make deps)'
	test_done
	exit
fi

PY=$(ca_python)
EXT=$TRASH_BASE/ext
mkdir -p "$EXT"
# KernelBench's load_inline ReLU: its CUDA source, and one that calls torch::tensor (torch's own, not
# at::tensor under torch's name: its floating values take the default dtype).
"$PY" - "$TESTS_DIR/adversarial/flavours/kernelbench/model_new.py" "$TRASH_BASE" <<'EOF' || exit 1
import re
import sys
src = re.search(r'cuda_source = r"""(.*?)"""', open(sys.argv[1]).read(), re.S).group(1)
open(sys.argv[2] + "/relu.cu.txt", "w").write(src)
open(sys.argv[2] + "/tensor.cu.txt", "w").write(src.replace("auto y = torch::empty_like(xc);",
    "auto y = torch::empty_like(xc) + torch::tensor({0.f}, xc.options());"))
EOF
ops() { # [cuda-file [cxx-file]]: the directory _ops_header makes for these sources, or None
	TORCH_EXTENSIONS_DIR=$EXT PYTHONPATH=$ROOT/lib/py "$PY" -c '
import sys
import ca_runner
print(ca_runner._ops_header(*[[open(p).read()] if p else [] for p in (sys.argv[1:] + ["", ""])[:2]]))' "$@" 2>/dev/null
}
# load_inline's C++ source for the ReLU: its declaration, and the module torch writes after it.
printf 'torch::Tensor relu_cuda(torch::Tensor x);\n' >"$TRASH_BASE/relu.cpp.txt"

expect_success 'the operators the sources call, each by its own header, and torch'"'"'s names for them' '
	d=$(ops "$TRASH_BASE/relu.cu.txt" "$TRASH_BASE/relu.cpp.txt") && test -d "$d" && cat "$d/torch/types.h" &&
	grep -q "^#include <ATen/ops/empty_like.h>$" "$d/torch/types.h" &&
	grep -q "^#include <ATen/ops/contiguous.h>$" "$d/torch/types.h" &&
	grep -q "^#include <torch/ca-names.h>$" "$d/torch/types.h" &&
	grep -q "^#include_next <torch/types.h>$" "$d/torch/types.h" &&
	! grep -q "ops/relu_kernel.h\|ops/fmaxf.h\|ops/relu_cuda.h" "$d/torch/types.h" &&
	grep -q "^#include <torch/csrc/Exceptions.h>$" "$d/torch/extension.h" &&
	grep -q "^#include <torch/types.h>$" "$d/torch/extension.h" &&
	grep -q "using namespace at;" "$d/torch/ca-names.h" && grep -q "kFloat32" "$d/torch/ca-names.h" &&
	! grep -q "#include" "$d/torch/ca-names.h" &&
	grep -q "empty_like_ops.h" "$d/ATen/ops/empty_like.h" && ! grep -q "DeviceGuard.h" "$d/ATen/ops/empty_like.h"
'

expect_success 'the same sources, the same directory (the next process rebuilds nothing); others, another' '
	sed "s/torch::empty_like(xc)/torch::zeros_like(xc)/" "$TRASH_BASE/relu.cu.txt" >zeros.txt &&
	a=$(ops "$TRASH_BASE/relu.cu.txt") && b=$(ops "$TRASH_BASE/relu.cu.txt") && c=$(ops zeros.txt) &&
	test "$a" = "$b" && test "$a" != "$c"
'

expect_success 'none without sources, or where they name requires_grad; C++ sources alone, one' '
	test "$(ops)" = None &&
	sed "s/xc.numel();/xc.numel(); (void)xc.requires_grad();/" "$TRASH_BASE/relu.cu.txt" >rg.txt &&
	test "$(ops rg.txt)" = None && test "$(ops "" rg.txt)" = None &&
	test -d "$(ops "" "$TRASH_BASE/relu.cpp.txt")"
'

# load_inline'"'"'s C++ unit for the ReLU, compiled with the host compiler and the flags torch'"'"'s would have.
expect_success 'g++ compiles load_inline'"'"'s C++ unit (the module) with it' '
	{ printf "#include <torch/extension.h>\n"; cat "$TRASH_BASE/relu.cpp.txt"
	  printf "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\nm.def(\"relu_cuda\", torch::wrap_pybind_function(relu_cuda), \"relu_cuda\");\n}\n"; } >main.cpp &&
	T=$("$PY" -c "from torch.utils import cpp_extension as c; print(\" \".join(\"-isystem \" + p for p in c.include_paths()))") &&
	I=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()[\"include\"])") &&
	CPATH=$(ops "$TRASH_BASE/relu.cu.txt" "$TRASH_BASE/relu.cpp.txt") c++ -std=c++20 $T -isystem "$I" \
		-DTORCH_EXTENSION_NAME=relu_inline -DTORCH_API_INCLUDE_EXTENSION_H -fPIC -c main.cpp -o main.o -MMD -MF main.d &&
	nm main.o | grep -q PyInit_relu_inline && grep -q "ca-light-.*/torch/extension.h" main.d && ! grep -q "torch/python.h" main.d
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

expect_success 'a unit that calls torch'"'"'s own torch::tensor fails with it (not ATen'"'"'s): built again with more' '
	! grep -q "ops/tensor.h" "$(ops "$TRASH_BASE/tensor.cu.txt")/torch/types.h" &&
	! unit "$TRASH_BASE/tensor.cu.txt" "$(ops "$TRASH_BASE/tensor.cu.txt")" >log 2>&1
	s=$?
	tail -3 log
	test $s -eq 0 && ! test -s unit.o && grep -q "tensor" log
'

test_done
