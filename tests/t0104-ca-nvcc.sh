#!/bin/sh
# ca-nvcc: nvcc's own results (objects, dependency files, diagnostics, exit
# statuses) with cudafe++ and cicc run side by side; other modes passed to
# nvcc; no temporary file left behind; never itself as the real nvcc.
# Needs nvcc, no GPU. Objects are compared with nvcc's temporary file name
# masked: it carries nvcc's process id, so two nvcc runs differ there too.
# The unit with torch's headers takes minutes: CA_TEST_NVCC_TORCH=1 runs it.
. "$(dirname "$0")/test-lib.sh"

expect_success 'usage is printed by --help' 'ca-nvcc --help | grep -q "^usage: ca-nvcc"'

NVCC=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -z "$NVCC" ]; then
	skip 'ca-nvcc against nvcc' 'nvcc not found'
	test_done
	exit
fi
export CA_NVCC_REAL=$NVCC CA_NVCC_VERBOSE=1

# The sources: a kernel, one with a syntax error, one whose device side
# alone fails, one missing a header, one with warnings on both sides.
S=$TRASH_BASE/src
mkdir -p "$S"
cp "$TESTS_DIR/data/build/add.cu" "$S/add.cu"
printf '__global__ void k(float *x) { x[threadIdx.x] *= 2 +; }\n' >"$S/syntax.cu"
printf '#ifdef __CUDA_ARCH__\n#error device side only\n#endif\nint f() { return 1; }\n' >"$S/device.cu"
printf '#include "missing.h"\n' >"$S/missing.cu"
printf '#warning both sides\n__global__ void k(float *x) { int unused; x[0] = 1; }\n' >"$S/warn.cu"

# mask FILE: FILE with nvcc's temporary names made equal (same length).
mask() { sed 's/tmpxft_[0-9a-f]\{8\}_[0-9a-f]\{8\}/tmpxft_XXXXXXXX_XXXXXXXX/g' "$1"; }
# both ARGS...: nvcc in n/ and ca-nvcc in c/ with the same relative names,
# TMPDIR an empty t/; each one's stdout, stderr and exit status kept.
both() {
	mkdir -p n c t
	(cd n && "$NVCC" "$@" >out 2>err; echo $? >status)
	(cd c && TMPDIR=$TRASH/t ca-nvcc "$@" >out 2>err; echo $? >status)
	grep '^ca-nvcc: ' c/err >c/said
	grep -v '^ca-nvcc: ' c/err >c/err.nvcc
	mv c/err.nvcc c/err
}
same() { # the results of both, compared
	cmp_output n/status c/status && cmp_output n/out c/out && cmp_output n/err c/err &&
	for f in n/*.o n/*.d; do
		[ -e "$f" ] || continue
		mask "$f" >masked.n && mask "c/${f#n/}" >masked.c && cmp masked.n masked.c || { echo "$f differs"; return 1; }
	done
	[ -z "$(ls -A t)" ] || { echo "left in TMPDIR:"; ls -la t; return 1; }
}
side_by_side() { grep -q 'ca-nvcc: ran side by side' c/said || { cat c/said; return 1; }; }

expect_success 'a kernel: the same object, side by side, nothing left in TMPDIR or the directory' '
	both -c $S/add.cu -o add.o && same && side_by_side && [ -s c/add.o ] &&
	[ "$(ls c | sort | tr "\n" " ")" = "add.o err out said status " ]'
expect_success '-MD -MF as torch asks: the same dependency file' '
	both -MD -MF add.o.d -c $S/add.cu -o add.o && same && side_by_side && [ -s c/add.o.d ]'
expect_success 'the long forms, and a -o in a directory' '
	mkdir -p n/obj c/obj &&
	both --generate-dependencies-with-compile --dependency-output obj/add.d -c $S/add.cu -o obj/add.o &&
	same && side_by_side && cmp n/obj/add.d c/obj/add.d && cmp_output n/obj/add.d c/obj/add.d &&
	mask n/obj/add.o >m1 && mask c/obj/add.o >m2 && cmp m1 m2'
expect_success 'several -gencode architectures, SASS and PTX: the same object' '
	both -c $S/add.cu -o add.o -gencode=arch=compute_80,code=sm_80 \
		-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90 &&
	same && side_by_side && [ "$(grep -c "cicc: " c/said)" -eq 2 ]'
expect_success 'flags torch passes (-isystem, -D, --expt-relaxed-constexpr, -Xcompiler, -std, -O3)' '
	both -isystem /usr/include -DNAME=x -D__CUDA_NO_HALF_OPERATORS__ --expt-relaxed-constexpr \
		--compiler-options -fPIC -std=c++17 -O3 -arch=sm_90 -c $S/add.cu -o add.o && same && side_by_side'
expect_success 'warnings on both sides: the same diagnostics in the same order' '
	both -c $S/warn.cu -o warn.o && same && side_by_side && grep -q "both sides" c/err'
for unit in syntax device missing; do
	expect_success "$unit.cu fails: the same diagnostics and exit status, no object, nothing left" '
		both -c $S/'$unit'.cu -o '$unit'.o && same && [ "$(cat c/status)" -ne 0 ] && [ ! -e c/'$unit'.o ]'
done
expect_success 'a dependency file that cannot be written: nvcc'"'"'s message and status' '
	both -MD -MF nowhere/add.d -c $S/add.cu -o add.o && same && [ "$(cat c/status)" -ne 0 ]'
expect_success 'other modes go to nvcc: --version, -E, -ptx, -M, -dc, a link' '
	for args in "--version" "-E $S/add.cu" "-ptx $S/add.cu -o add.ptx" "-M $S/add.cu" \
		"-dc $S/add.cu -o add.o" "-c $S/add.cu $S/warn.cu" "-keep -c $S/add.cu -o add.o"; do
		rm -rf n c t && both $args && cmp n/status c/status && cmp n/out c/out &&
		grep -q "runs it" c/said || { echo "$args"; cat c/said; exit 1; }
	done
	both -c $S/add.cu -o add.o && (cd c && ca-nvcc add.o -o add.so -shared 2>said) && grep -q "runs it" c/said'
expect_success 'CA_NVCC_PARALLEL=0: nvcc runs it' '
	mkdir c && (cd c && CA_NVCC_PARALLEL=0 ca-nvcc -c $S/add.cu -o add.o 2>said) &&
	grep -q "runs it: CA_NVCC_PARALLEL=0" c/said && [ -s c/add.o ]'
expect_success 'never itself: an nvcc in PATH that is ca-nvcc is passed over' '
	mkdir bin && ln -s "$(command -v ca-nvcc)" bin/nvcc &&
	env -u CA_NVCC_REAL -u CUDA_HOME PATH="$PWD/bin:$(dirname "$NVCC"):$PATH" ca-nvcc --version >out 2>said &&
	grep -q "Cuda compilation tools" out && grep -q "^ca-nvcc: $(dirname "$NVCC")/nvcc runs it" said'
expect_status 4 'no nvcc anywhere: exit 4 with a message' '
	mkdir bin && ln -s "$(command -v ca-nvcc)" bin/nvcc &&
	env -u CA_NVCC_REAL -u CUDA_HOME PATH="$PWD/bin:/usr/bin:/bin" "$(command -v ca-nvcc)" -c x.cu 2>err; s=$?
	grep -q "^ca-nvcc: no nvcc found" err && exit $s'
expect_success 'SIGTERM during a compile: the phases are killed, TMPDIR left empty, ca-nvcc dies by it' '
	printf "#include <iostream>\n#include <map>\n#include <regex>\n#include <algorithm>\n__global__ void k() {}\n" >slow.cu &&
	mkdir t && TMPDIR=$PWD/t ca-nvcc -c slow.cu -o slow.o 2>said & pid=$!
	sleep 1; kill -TERM $pid; wait $pid; s=$?
	[ $s -eq 143 ] || { echo "status $s"; cat said; exit 1; }
	sleep 0.5; [ -z "$(ls -A t)" ] && ! pgrep -f "slow.cu" >/dev/null'

# A load_inline unit as torch's ninja builds it (flags from cpp_extension).
if [ -z "$CA_TEST_NVCC_TORCH" ]; then
	skip 'a unit including torch/extension.h' 'slow (1 to 4 min): set CA_TEST_NVCC_TORCH=1'
elif ! flags=$("$(ca_python)" -c '
import sysconfig, torch.utils.cpp_extension as c
print(" ".join("-isystem " + p for p in c.include_paths("cuda") + [sysconfig.get_paths()["include"]]))' 2>/dev/null); then
	skip 'a unit including torch/extension.h' 'torch is not installed'
else
	printf '#include <torch/extension.h>\n__global__ void k(float *x) { x[threadIdx.x] *= 2; }\ntorch::Tensor twice(torch::Tensor a) { k<<<1, 32>>>(a.data_ptr<float>()); return a; }\n' >"$S/torch.cu"
	expect_success 'a unit including torch/extension.h, with torch ninja'"'"'s flags: the same object and dependency file' '
		both -MD -MF t.o.d -DTORCH_EXTENSION_NAME=t -DTORCH_API_INCLUDE_EXTENSION_H '"$flags"' \
			-D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ \
			-D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr -gencode=arch=compute_90,code=sm_90 \
			--compiler-options -fPIC -std=c++20 -c $S/torch.cu -o t.o && same && side_by_side'
fi
test_done
