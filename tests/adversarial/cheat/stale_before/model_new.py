"""lazy_before with a better lie: the checked calls are named before the
loop (its runner's RETAIN_BYTES set to 0, as for outputs too large to
keep), it works only in those calls, and every other timed call returns
the output of the last call it did work in: another input's output, with
the same distribution, so its sums are close to the right ones. It also
leaves every burst call but the first undone. Caught only by a digest that
tells one input's output from another's."""
import sys

import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()

for _name, _mod in list(sys.modules.items()):
    if hasattr(_mod, "RETAIN_BYTES") and hasattr(_mod, "Worker"):
        _mod.RETAIN_BYTES = 0


def _frame():
    """(name of the runner's op, index of the timed call, the calls named for checking)."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_name
        if name == "op_time":
            local = f.f_locals
            return name, local.get("i", 0) - local.get("warmup", 0), local.get("keep", set())
        if name == "op_burst":
            return name, None, None
        f = f.f_back
    return None, None, None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None

    def forward(self, x):
        op, index, keep = _frame()
        stale = self.last is not None and self.last.shape == x.shape
        if stale and ((op == "op_time" and index is not None and index >= 0 and index not in keep)
                      or op == "op_burst"):
            return self.last
        x = x.contiguous()
        y = torch.empty_like(x)
        ca_kernels.launch(lib.relu_launch, x, y, x.numel())
        self.last = y
        return y
