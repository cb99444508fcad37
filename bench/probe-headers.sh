#!/bin/sh
# What each header tier costs the compilers on KernelBench's load_inline
# ReLU (tests/adversarial/flavours/kernelbench): its CUDA unit through nvcc
# (--time: the phase times) and its C++ unit (the module) through the host
# compiler, with the flags torch's ninja build gives them, for each tier
# the runner tries in turn (lib/py/ca_runner.py, _light_headers): the
# lightest (_ops_header), ca's light header (lib/py/light), torch's own.
# One process at a time, so that the phases do not share the CPUs; then the
# CUDA unit through ca-nvcc (bin/, where built), as the runner builds it. No
# GPU needed; nvcc and a torch with its headers are.
#
#   sh bench/probe-headers.sh [ARCH]     (ARCH: sm_90 unless given)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${CA_PYTHON:-python3}
ARCH=${1:-sm_90}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if ! "$PY" -c 'import torch' 2>/dev/null || [ ! -x "$NVCC" ]; then
	echo "probe-headers: needs torch ($PY) and nvcc" >&2
	exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$PY" - "$ROOT/tests/adversarial/flavours/kernelbench/model_new.py" "$W" <<'EOF' || exit 1
import re
import sys
text = open(sys.argv[1]).read()
cuda = re.search(r'cuda_source = r"""(.*?)"""', text, re.S).group(1)
cxx = re.search(r'cpp_source = "(.*?)"', text).group(1)
# As load_inline writes them: torch/types.h and the CUDA headers before the
# CUDA source; torch/extension.h before the C++ one, the module after it.
open(sys.argv[2] + "/unit.cu", "w").write("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + cuda)
open(sys.argv[2] + "/main.cpp", "w").write(
    "#include <torch/extension.h>\n" + cxx + "\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
    'm.def("relu_cuda", torch::wrap_pybind_function(relu_cuda), "relu_cuda");\n}\n')
open(sys.argv[2] + "/cuda.txt", "w").write(cuda)
open(sys.argv[2] + "/cxx.txt", "w").write(cxx)
EOF
OPS=$(TORCH_EXTENSIONS_DIR=$W/ext PYTHONPATH=$ROOT/lib/py "$PY" -c '
import sys
import ca_runner
print(ca_runner._ops_header([open(sys.argv[1]).read()], [open(sys.argv[2]).read()]))' "$W/cuda.txt" "$W/cxx.txt")
INC=$("$PY" -c 'from torch.utils import cpp_extension as c; print(" ".join("-isystem " + p for p in c.include_paths()))')
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
STD=$("$PY" -c 'import torch; print("-std=c++20" if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 10) else "-std=c++17")')
DEFS="-DTORCH_EXTENSION_NAME=relu_inline -DTORCH_API_INCLUDE_EXTENSION_H $INC -isystem $PYINC"
# torch's nvcc flags for a CUDA unit (ninja's cuda_cflags), for nvcc and ca-nvcc alike.
CUFLAGS="$DEFS -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
	-D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr -gencode=arch=compute_${ARCH#sm_},code=$ARCH
	--compiler-options -fPIC $STD"
echo "torch $("$PY" -c 'import torch; print(torch.__version__)'), $($NVCC --version | tail -n 1), $(c++ --version | head -n 1), $(nproc) CPUs"
now() { date +%s.%N; }
since() { awk "BEGIN{printf \"%.2f\", $(now) - $1}"; }
for tier in "lightest:$OPS" "light:$ROOT/lib/py/light" "torch:"; do
	name=${tier%%:*} dir=${tier#*:}
	cd "$W" || exit 1
	rm -f t.csv
	t0=$(now)
	CPATH=$dir "$NVCC" $CUFLAGS -c unit.cu -o unit.o --time t.csv >log 2>&1 || { echo "$name: nvcc failed"; tail -n 3 log; }
	n=$(since "$t0")
	phases=$(awk -F' , ' 'NR > 1 && $(NF-1) > 100 {printf " %s %.2f,", $2, $(NF-1) / 1000}' t.csv)
	t0=$(now)
	CPATH=$dir c++ $DEFS -fPIC $STD -c main.cpp -o main.o >log 2>&1 || { echo "$name: c++ failed"; tail -n 3 log; }
	echo "$name: CUDA unit ${n} s (${phases%,}); C++ unit $(since "$t0") s"
	# The CUDA unit as the runner builds it: through ca-nvcc (cudafe++ beside cicc), where it is built.
	if [ -x "$ROOT/bin/ca-nvcc" ]; then
		t0=$(now)
		CPATH=$dir CA_NVCC_REAL=$NVCC CA_NVCC_VERBOSE=1 "$ROOT/bin/ca-nvcc" $CUFLAGS -c unit.cu -o unit.o >log 2>&1 ||
			{ echo "$name: ca-nvcc failed"; tail -n 3 log; }
		echo "$name: CUDA unit through ca-nvcc $(since "$t0") s ($(grep -o '[a-z+]*: [0-9.]* s' log | tr '\n' ',' | sed 's/,$//'))"
	fi
done
