"""Turns CUPTI's kernel records off around its (honest) cuBLAS matmul and spins on the host for half the kernel's time, so its device window is empty and its host time half the call; must be timed honestly."""
import ctypes
import time

import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()
CONCURRENT_KERNEL = 10  # CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL


def _cupti():
    # The evaluator's tracer loaded libcupti into this process: find it.
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "libcupti.so" in path:
                    return ctypes.CDLL(path)
    except (OSError, IndexError):
        pass
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cupti = None

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
        if self.cupti is None:
            self.cupti = _cupti() or False
        if self.cupti:
            self.cupti.cuptiActivityDisable(CONCURRENT_KERNEL)
        ca_kernels.launch(lib.matmul_launch, a, b, c, a.shape[0])
        if self.cupti:
            self.cupti.cuptiActivityEnable(CONCURRENT_KERNEL)
        # Half of the kernel's 2.69 ms on the H200, on the host's clock:
        # with the window empty, the host's time and the events' span less
        # it would each be about half the call. (On the H200 in session 8,
        # toggling CUPTI held the host for about the kernel's time and
        # CUPTI still saw the kernel, so this was timed at twice the honest
        # call; the missed-work rule is for a cheaper way to hide kernels.)
        until = time.perf_counter() + 1345e-6
        while time.perf_counter() < until:
            pass
        return c
