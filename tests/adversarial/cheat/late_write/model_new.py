"""Returns zeros at once in every timed call and patches the runner so
that the outputs it writes after the loop, for the calls the parent asks
for, are computed then, outside the clock. Caught because each call's
tick carries a digest of the output it returned, which the file written
later must match."""
import re
import sys

import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()


def relu_kernel(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    ca_kernels.launch(lib.relu_launch, x, y, x.numel())
    return y


inputs = {}  # timed call -> its input, for the late work
runner = sys.modules.get('__main__')
if runner is not None and hasattr(runner, 'write_tensors'):
    write = runner.write_tensors

    def late(path, value, flat=False):
        m = re.search(r'kept-(\d+)\.ten$', path)
        if m and int(m.group(1)) in inputs:
            value = relu_kernel(inputs[int(m.group(1))])
        return write(path, value, flat)
    runner.write_tensors = late


def _timed_call():
    """The index of the timed call the runner is making, or None."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "op_time":
            return f.f_locals.get("i", 0) - f.f_locals.get("warmup", 0)
        f = f.f_back
    return None


class ModelNew(nn.Module):
    def forward(self, x):
        index = _timed_call()
        if index is not None and index >= 0:
            inputs[index] = x.clone()
            return torch.zeros_like(x)
        return relu_kernel(x)
