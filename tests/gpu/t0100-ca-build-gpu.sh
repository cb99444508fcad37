#!/bin/sh
# ca-build on a GPU: the ca flavour's library runs through ctypes, also
# inside ca-sandbox --gpu; the cuda-agent flavour imports as cuda_extension.
. "$(dirname "$0")/../test-lib.sh"

if ! has_gpu; then
	skip 'ca-build on a GPU' 'no GPU'
	test_done
	exit
fi
if ! has_torch; then
	skip 'ca-build on a GPU' "no torch in $(ca_python)"
	test_done
	exit
fi
chmod 755 "$TRASH_BASE"
CA_CACHE=$TRASH_BASE/cache
export CA_CACHE
PY=$(ca_python)
# An interpreter below a private /root is unreadable for the sandbox uid:
# cover /root and put the interpreter's top directory back, read-only.
SANDBOX_PY=
for p in "$(command -v "$PY")" "$(readlink -f "$(command -v "$PY")")"; do
	case $p in
	/root/*) top=$(echo "$p" | cut -d/ -f1-3); SANDBOX_PY="$SANDBOX_PY --ro $top" ;;
	esac
done
[ -n "$SANDBOX_PY" ] && SANDBOX_PY="--hide /root$SANDBOX_PY"

mkdir -p "$TRASH_BASE/ws/kernels"
cp "$TESTS_DIR/data/build/add.cu" "$TRASH_BASE/ws/kernels/add.cu"
cat >"$TRASH_BASE/run_add.py" <<'EOS'
import ctypes, os, sys, torch
lib = ctypes.CDLL(os.environ["LIB"])
a = torch.randn(1 << 20, device="cuda"); b = torch.randn_like(a); out = torch.empty_like(a)
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
rc = lib.add_launcher(ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                      ctypes.c_longlong(a.numel()), stream)
torch.cuda.synchronize()
assert rc == 0, rc
assert torch.equal(out, a + b)
print("add ok")
EOS

expect_success 'the arch comes from the GPU' '
	ca-build "$TRASH_BASE/ws" >out && cat out &&
	want=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .) &&
	jq -e --arg a "$want" ".arch == \$a and .ok" out
'
expect_success 'cold build within 2 s on this machine, cache hit within 0.1 s' '
	rm -rf "$CA_CACHE" && ca-build "$TRASH_BASE/ws" >a && ca-build "$TRASH_BASE/ws" >b &&
	echo "# cold $(jq .seconds a) s, cached $(jq .seconds b) s" &&
	jq -e ".seconds < 2" a && jq -e ".cached and .seconds < 0.1" b
'
expect_success 'the ca library runs through ctypes' '
	LIB=$(ca-build "$TRASH_BASE/ws" | jq -r .library) "$PY" "$TRASH_BASE/run_add.py"
'
expect_success 'and inside ca-sandbox --gpu (no network, dropped uid, Landlock)' '
	mkdir w && cp "$TRASH_BASE/run_add.py" w/ && cp "$(ca-build "$TRASH_BASE/ws" | jq -r .library)" w/libkernels.so &&
	ca-sandbox --gpu --dir w --time 120 --report r.json $SANDBOX_PY --env LIB=./libkernels.so -- "$PY" run_add.py;
	status=$?; jq -c . r.json; exit $status
'
expect_success 'without --gpu the sandbox has no GPU' '
	mkdir w && ca-sandbox --dir w --time 120 $SANDBOX_PY -- "$PY" -c "import torch; assert not torch.cuda.is_available()"
'

mkdir -p "$TRASH_BASE/agent/kernels"
cat >"$TRASH_BASE/agent/binding_registry.h" <<'EOS'
#pragma once
#include <torch/extension.h>
#include <functional>
#include <vector>
struct BindingRegistry {
	static BindingRegistry &instance() { static BindingRegistry r; return r; }
	std::vector<std::function<void(pybind11::module &)>> fns;
};
#define REGISTER_BINDING(name, fn) \
	static int name##_reg = (BindingRegistry::instance().fns.push_back([](pybind11::module &m) { m.def(#name, fn); }), 0)
EOS
cat >"$TRASH_BASE/agent/binding.cpp" <<'EOS'
#include "binding_registry.h"
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
	for (auto &f : BindingRegistry::instance().fns) f(m);
}
EOS
cat >"$TRASH_BASE/agent/kernels/scale.cu" <<'EOS'
#include <cuda_runtime.h>
__global__ void scale_kernel(const float *x, float *y, float a, long long n)
{
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (i < n) y[i] = a * x[i];
}
void scale_launch(const float *x, float *y, float a, long long n, cudaStream_t s)
{
	scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, y, a, n);
}
EOS
cat >"$TRASH_BASE/agent/kernels/scale_binding.cpp" <<'EOS'
#include "../binding_registry.h"
#include <cuda_runtime.h>
void scale_launch(const float *x, float *y, float a, long long n, cudaStream_t s);
torch::Tensor scale(torch::Tensor x, double a)
{
	auto y = torch::empty_like(x);
	scale_launch(x.data_ptr<float>(), y.data_ptr<float>(), (float)a, x.numel(), 0);
	return y;
}
REGISTER_BINDING(scale, scale);
EOS

expect_success 'cuda-agent: built without load(), imports as cuda_extension and runs' '
	ca-build "$TRASH_BASE/agent" >out; cat out; jq -e ".ok and .flavour == \"cuda-agent\"" out &&
	echo "# cuda-agent cold build $(jq .seconds out) s" &&
	LIBDIR=$(dirname "$(jq -r .library out)") "$PY" -c "
import os, sys, torch
sys.path.insert(0, os.environ[\"LIBDIR\"])
import cuda_extension
x = torch.randn(1000, device=\"cuda\")
assert torch.allclose(cuda_extension.scale(x, 2.0), 2 * x)
print(\"scale ok\")"
'

test_done
