"""What op_idle's probe reads (lib/py/ca_runner.py): the median host round
trip of five one-element kernels, each synchronized, on an idle GPU and
beside another process whose kernel holds the GPU (one thread of
torch.cuda._sleep, queued on a side stream); how long a killed
process's queued work takes to leave the GPU; and one ReLU's time (CUDA
events, 1 GB) idle and beside the other process, the inflation a baseline
timed beside it would carry. On a GPU machine:

    python3 bench/probe-idle.py
"""
import os
import signal
import statistics
import subprocess
import sys
import time

import torch

HOLD = r'''
import sys, torch
blocks, cycles = int(sys.argv[1]), int(sys.argv[2])
x = torch.empty(1, device="cuda")
torch.cuda.synchronize()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    for _ in range(blocks):
        torch.cuda._sleep(cycles)
torch.cuda.current_stream().synchronize()
print("queued", flush=True)
sys.stdin.readline()
'''


def probe_us(t):
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        h0 = time.perf_counter()
        t.add_(1)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - h0) * 1e6)
    return statistics.median(samples)


def relu_us(x, y):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(20):
        a.record()
        torch.clamp_min(x, 0, out=y)
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return statistics.median(out)


def sleep_rate():
    """torch.cuda._sleep's cycles per second here."""
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(100_000_000)
    b.record()
    b.synchronize()
    return 100_000_000 / (a.elapsed_time(b) * 1e-3)


def holder(kernels, seconds, rate):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(kernels), str(int(seconds * rate / kernels))],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "queued"
    return p


def main():
    t = torch.zeros(1, device="cuda")
    x = torch.randn(1 << 28, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        probe_us(t), relu_us(x, y)
    rate = sleep_rate()
    idle = [probe_us(t) for _ in range(20)]
    print("idle probe_us: median %.1f max %.1f" % (statistics.median(idle), max(idle)))
    print("idle relu_us (1 GB): %.1f" % relu_us(x, y))
    for kernels in (1, 3):
        p = holder(kernels, 6, rate)
        busy = [probe_us(t) for _ in range(10)]
        r = relu_us(x, y)
        print("beside %d queued sleep kernel(s), 6 s: probe_us median %.1f min %.1f; relu_us %.1f"
              % (kernels, statistics.median(busy), min(busy), r))
        h0 = time.perf_counter()
        p.kill()
        p.wait()
        killed = time.perf_counter() - h0
        while probe_us(t) > 200 and time.perf_counter() - h0 < 20:
            time.sleep(0.01)
        print("  killed in %.3f s; GPU idle %.3f s after the kill (probe %.1f us)"
              % (killed, time.perf_counter() - h0, probe_us(t)))
    p = holder(1, 60, rate)
    os.kill(p.pid, signal.SIGSTOP)
    busy = [probe_us(t) for _ in range(5)]
    print("beside a stopped process's 60 s kernel: probe_us median %.1f" % statistics.median(busy))
    h0 = time.perf_counter()
    p.kill()
    p.wait()
    while probe_us(t) > 200 and time.perf_counter() - h0 < 20:
        time.sleep(0.01)
    print("  stopped then killed: GPU idle %.3f s after the kill" % (time.perf_counter() - h0))


if __name__ == "__main__":
    main()
