"""
The pieces of the device clock that ca_runner.py's timed loop is made
of: the buffer whose zeroing flushes the L2 cache before each call, and
the median over the timed calls. There is one timed loop, op_time in
ca_runner.py: ca-profile's baselines and candidates go through it, and
ca_synth.py's workload check (ca-filter) calls it in its own process
(ca_runner.time_model), so every time ca takes of a task is taken alike.
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
