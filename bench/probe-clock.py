"""Where a timed call's time beyond its kernels goes, on a GPU.

One process times a 4096^2 fp32 matmul (eager torch.matmul, and a ca
candidate through ca_kernels) 40 times per variant after 5 warm-up calls,
with CUDA events from an idle device (ca's clock without CUPTI), without
the L2 flush, and with the device kept busy by a 1.5 ms spin when the
start event is recorded (the device's own time); "none" and "tiny" (an
empty call, a one-element add) give the events' and a launch's floor.
With mode cupti, ca's CUPTI shim traces every loop (its cost, and the
kernels' own time per call). One JSON line per variant: span median and
minimum, cv, the host's time from the start event to the call's return,
and the tail (a device-wide synchronize after the end event).

Run it in several fresh processes; bench/eval-h200.md (session 7) has
the figures that led ca-profile to time a call by its device window:

    lib=$(ca-build tests/adversarial/honest/matmul | jq -r .library)
    for i in 1 2 3; do for m in plain cupti; do
        CA_CUPTI_LIB=$PWD/bin/libca-cupti.so python3 bench/probe-clock.py \
            lib/py tests/adversarial/honest/matmul "$lib" $m p$i
    done; done

argv: lib/py  candidate_dir  kernels_lib  mode (plain|cupti)  tag
"""
import json
import os
import sys
import time

if len(sys.argv) != 6 or sys.argv[4] not in ("plain", "cupti"):
    sys.exit("usage: probe-clock.py LIB_PY CANDIDATE_DIR KERNELS_LIB plain|cupti TAG")
lib_py, cand_dir, klib, mode, tag = sys.argv[1:6]
sys.path.insert(0, lib_py)
T0 = time.perf_counter()
early = None
if mode == "cupti":
    import ca_runner
    early = ca_runner._CuptiEarly()
    early.run()
import torch
tracer = None
if mode == "cupti":
    tracer = ca_runner.Tracer("cuda", early)
sys.path.insert(0, cand_dir)
os.environ["CA_KERNELS_LIB"] = klib
import importlib.util
spec = importlib.util.spec_from_file_location("model_new", os.path.join(cand_dir, "model_new.py"))
mn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mn)
dev = torch.device("cuda:0")
cand = mn.ModelNew().to(dev).eval()
N = 4096
g = torch.Generator(device=dev).manual_seed(1)
sets = [(torch.rand(N, N, device=dev, generator=g), torch.rand(N, N, device=dev, generator=g)) for _ in range(2)]
l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
flush = torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.int32, device=dev)
tiny = torch.zeros(1, device=dev)
perf = time.perf_counter
rec, esync, elapsed = torch.cuda.Event.record, torch.cuda.Event.synchronize, torch.cuda.Event.elapsed_time
stream = torch.cuda.current_stream()

def med(v):
    v = sorted(v); n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])

# _sleep calibration: cycles per microsecond
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize()
rec(s, stream); torch.cuda._sleep(1000000); rec(e, stream); esync(e)
cyc_per_us = 1000000 / (elapsed(s, e) * 1000.0)
SLEEP = int(1500 * cyc_per_us)  # 1.5 ms of device spin before the start event

fns = {
    "eager": lambda a, b: torch.matmul(a, b),
    "cand": lambda a, b: cand(a, b),
    "tiny": lambda a, b: tiny.add_(1.0),
    "none": lambda a, b: None,
}

def run(fname, variant, warm=5, iters=40):
    f = fns[fname]
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    sp = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
    host_launch, host_total, tails = [], [], []
    out = None
    if tracer is not None:
        tracer.start(timing=True)
    with torch.no_grad():
        for i in range(warm + iters):
            a, b = sets[i % 2]
            if variant != "noflush":
                flush.zero_()
            if variant == "busy":
                torch.cuda._sleep(SLEEP)
            else:
                torch.cuda.synchronize()
            x, y = (starts[i - warm], ends[i - warm]) if i >= warm else sp
            h0 = perf()
            rec(x, stream)
            out = f(a, b)
            h1 = perf()
            rec(y, stream)
            esync(y)
            h2 = perf()
            torch.cuda.synchronize()
            h3 = perf()
            if i >= warm:
                host_launch.append((h1 - h0) * 1e6)
                host_total.append((h3 - h0) * 1e6)
                tails.append((h3 - h2) * 1e6)
    torch.cuda.synchronize()
    kern = None
    if tracer is not None:
        ks = tracer.stop() or []
        kern = {k["name"][:60]: round(k["total_us"] / max(1, k["calls"]), 2) for k in ks[:4]}
        kcalls = {k["name"][:60]: k["calls"] for k in ks[:4]}
    spans = [elapsed(x, y) * 1000.0 for x, y in zip(starts, ends)]
    m = sum(spans) / len(spans)
    cv = (sum((v - m) ** 2 for v in spans) / len(spans)) ** 0.5 / m if m else 0
    r = {"tag": tag, "mode": mode, "fn": fname, "variant": variant, "span_med": round(med(spans), 2),
         "span_min": round(min(spans), 2), "cv": round(cv, 4), "host_launch_med": round(med(host_launch), 2),
         "host_total_med": round(med(host_total), 2), "tail_med": round(med(tails), 2)}
    if kern is not None:
        r["kern_per_call"] = kern
        r["kern_calls"] = kcalls
    print(json.dumps(r), flush=True)

print(json.dumps({"tag": tag, "mode": mode, "start_s": round(perf() - T0, 2), "cyc_per_us": round(cyc_per_us, 1),
                  "tracer": tracer.kind if tracer else None}), flush=True)
for fname in ("none", "tiny", "eager", "cand"):
    for variant in ("idle", "noflush", "busy"):
        try:
            run(fname, variant)
        except Exception as ex:
            print(json.dumps({"tag": tag, "fn": fname, "variant": variant, "error": repr(ex)}), flush=True)
# again, late in the process
for fname in ("eager", "cand"):
    run(fname, "idle")
