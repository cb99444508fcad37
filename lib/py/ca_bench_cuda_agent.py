"""ca_bench_cuda_agent: the comparison path of bench/bench-eval.sh.

Reimplements, from its published description, how CUDA-Agent's workspace
scripts evaluate one candidate in its agent_workdir layout (binding.cpp,
binding_registry.h, kernels/*.cu, kernels/*_binding.cpp, model.py,
model_new.py), so ca's figures can be put beside it. Each phase is its own
Python process, as compile.sh, the verification script and the profiling
script are:

    python3 ca_bench_cuda_agent.py compile TASK.py WORKDIR BUILD_DIR
        torch.utils.cpp_extension.load of binding.cpp and every kernel
        source as the extension cuda_extension (a fresh build directory
        per candidate, as each agent workspace has its own).
    python3 ca_bench_cuda_agent.py verify TASK.py WORKDIR BUILD_DIR
        load the extension (up to date: no rebuild), import ModelNew, copy
        the reference's weights, 5 checks with fresh inputs against Model
        in the same process (torch.allclose, atol = rtol = 1e-2).
    python3 ca_bench_cuda_agent.py profile TASK.py WORKDIR BUILD_DIR
        5 warm-up and 10 timed calls under torch.profiler for ModelNew,
        eager Model and torch.compile(Model); device time per call.

Each prints one JSON object: the phase, its seconds inside Python (start-up
excluded) and what it measured.
"""
import glob
import importlib.util
import json
import os
import sys
import time

T_START = time.time()

import torch  # noqa: E402
from torch.utils.cpp_extension import load  # noqa: E402


def build(workdir, build_dir):
    sources = [os.path.join(workdir, "binding.cpp")]
    sources += sorted(glob.glob(os.path.join(workdir, "kernels", "*.cu")))
    sources += sorted(glob.glob(os.path.join(workdir, "kernels", "*.cpp")))
    os.makedirs(build_dir, exist_ok=True)
    ext = load(name="cuda_extension", sources=sources, build_directory=build_dir,
               extra_include_paths=[workdir], extra_cflags=["-O3"], extra_cuda_cflags=["-O3"],
               verbose=False)
    sys.modules["cuda_extension"] = ext
    return ext


def import_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def models(task_path, workdir):
    task = import_file(task_path, "model")
    sys.path.insert(0, workdir)
    new = import_file(os.path.join(workdir, "model_new.py"), "model_new")
    init = task.get_init_inputs()
    torch.manual_seed(0)
    ref = task.Model(*init).cuda().eval()
    cand = new.ModelNew(*init).cuda().eval()
    cand.load_state_dict(ref.state_dict())
    return task, ref, cand


def device_us_per_call(fn, inputs, warmup=5, iters=10):
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                fn(*inputs)
                torch.cuda.synchronize()
    total = 0.0
    for e in prof.key_averages():
        for attr in ("self_device_time_total", "self_cuda_time_total"):
            v = getattr(e, attr, 0) or 0
            if v > 0:
                total += v
                break
    return total / iters


def main():
    phase, task_path, workdir, build_dir = sys.argv[1:5]
    t0 = time.time()
    out = {"phase": phase, "import_s": t0 - T_START}
    build(workdir, build_dir)
    out["load_s"] = time.time() - t0
    if phase == "verify":
        task, ref, cand = models(task_path, workdir)
        with torch.no_grad():
            for k in range(5):
                torch.manual_seed(k)
                inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
                want = ref(*inputs)
                got = cand(*inputs)
                torch.cuda.synchronize()
                if not torch.allclose(want, got, atol=1e-2, rtol=1e-2):
                    raise SystemExit("check %d failed" % k)
        out["checks"] = 5
    elif phase == "profile":
        task, ref, cand = models(task_path, workdir)
        torch.manual_seed(0)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
        out["candidate_us"] = device_us_per_call(cand, inputs)
        out["eager_us"] = device_us_per_call(ref, inputs)
        out["compile_us"] = device_us_per_call(torch.compile(ref), inputs)
    out["seconds"] = time.time() - t0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
