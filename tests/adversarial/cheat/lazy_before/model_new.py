"""Makes the runner it shares a process with believe no output copies fit
(its RETAIN_BYTES set to 0), so the checked calls are named before the loop,
as they are for outputs too large to keep; then works only in those calls
and returns zeros in every other timed call. Caught by the digests every
tick carries: the parent compares those of calls it picks after the loop
with the reference's on the same inputs."""
import sys

import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()

for _name, _mod in list(sys.modules.items()):
    if hasattr(_mod, "RETAIN_BYTES") and hasattr(_mod, "Worker"):
        _mod.RETAIN_BYTES = 0


def _timed_call():
    """(index of the timed call, the calls named for checking), or (None, None)."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "op_time":
            local = f.f_locals
            return local.get("i", 0) - local.get("warmup", 0), local.get("keep", set())
        f = f.f_back
    return None, None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        index, keep = _timed_call()
        if index is not None and index >= 0 and index not in keep:
            return torch.zeros_like(x)
        x = x.contiguous()
        y = torch.empty_like(x)
        ca_kernels.launch(lib.relu_launch, x, y, x.numel())
        return y
