"""ca_bench_cuda_agent: the comparison path of bench/bench-eval.sh.

Reimplements, from its published description, how CUDA-Agent's workspace
scripts evaluate one candidate, so ca's figures can be put beside it:
compile every kernel as a torch extension with torch.utils.cpp_extension.load,
run 5 correctness checks against the reference in the same process, then 5
warm-up and 10 timed calls under torch.profiler. Prints one JSON object
with the seconds each phase took.

    python3 ca_bench_cuda_agent.py TASK.py KERNEL.cu LAUNCHER NARGS BUILD_DIR

The kernel file's extern "C" launcher (as in ca's own workspaces) is wrapped
in a pybind11 binding that allocates the output like the first input.
"""
import importlib.util
import json
import os
import sys
import time

import torch
from torch.utils.cpp_extension import load

BINDING = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
extern "C" int %(launcher)s(const float *x, float *y, long long n, cudaStream_t s);
torch::Tensor forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int rc = %(launcher)s(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), at::cuda::getCurrentCUDAStream());
    TORCH_CHECK(rc == 0, "launcher failed");
    return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
"""


def main():
    task, kernel, launcher, build = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
    os.makedirs(build, exist_ok=True)
    binding = os.path.join(build, "binding.cpp")
    with open(binding, "w") as f:
        f.write(BINDING % {"launcher": launcher})
    t0 = time.time()
    ext = load(name="ca_bench_ext", sources=[binding, kernel], build_directory=build,
               extra_cuda_cflags=["-O3"], verbose=False)
    t1 = time.time()
    spec = importlib.util.spec_from_file_location("task", task)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.Model(*mod.get_init_inputs()).cuda().eval()
    with torch.no_grad():
        for k in range(5):
            torch.manual_seed(k)
            inputs = [x.cuda() for x in mod.get_inputs()]
            ref = model(*inputs)
            out = ext.forward(*inputs)
            torch.cuda.synchronize()
            if not torch.allclose(ref, out, atol=1e-2, rtol=1e-2):
                raise SystemExit("check %d failed" % k)
    t2 = time.time()
    with torch.no_grad():
        for _ in range(5):
            ext.forward(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                ext.forward(*inputs)
                torch.cuda.synchronize()
        kernel_us = sum(e.self_device_time_total for e in prof.key_averages()
                        if getattr(e, "self_device_time_total", 0) > 0) / 10.0
    t3 = time.time()
    print(json.dumps({"build_s": t1 - t0, "verify_s": t2 - t1, "profile_s": t3 - t2,
                      "total_s": t3 - t0, "kernel_us_per_call": kernel_us}))


if __name__ == "__main__":
    main()
