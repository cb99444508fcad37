"""
The device clock of ca's Python workers, in one place, so that every
time ca takes of a task's eager model is taken alike: ca_runner.py's timed
loop (ca-profile's baselines and candidates) and ca_synth.py's workload
check (ca-filter).

A call is clocked on inputs put in place before it, with the L2 cache
flushed by writing a buffer twice its size and the device idle; CUDA
events go on the current stream around the call, and a device-wide
synchronize after it waits for work left on other streams. The time is
the median over the timed calls.
"""


def flush_buffer(torch, dev):
    """The buffer whose zeroing flushes the L2 cache of device dev."""
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20) or (50 << 20)
    return torch.empty(max(2 * l2, 64 << 20) // 4, dtype=torch.int32, device=dev)


def median(values):
    s = sorted(values)
    if not s:
        return 0.0
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def eager_ms(torch, fn, xs, warmup, iters):
    """fn(*inputs) clocked as ca-profile clocks its eager baseline, without
    the runner's protocol: before every call the inputs are copied afresh
    from xs (a call that writes its inputs changes nothing for the next),
    the L2 cache is flushed and the device is idle. The median in ms."""
    work = [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
    flush = flush_buffer(torch, torch.cuda.current_device())
    times = []
    for i in range(warmup + iters):
        for w, x in zip(work, xs):
            if isinstance(w, torch.Tensor):
                w.copy_(x)
        flush.zero_()
        torch.cuda.synchronize()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn(*work)
        b.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(a.elapsed_time(b))
    del flush, work
    return median(times)
