"""Makes its own draws differ from the reference's (its runner's
make_inputs adds noise), so its inputs are shipped as files; once the
profile's first files appear in its workspace's .ca-io, it puts a
directory where every timed call's file will go, so the parent cannot put
them there. Were that failure taken for the evaluator's (stage system),
the record would carry no verdict and a wrong or slow kernel would escape
its -1; it is the candidate's doing (stage run)."""
import os
import sys

import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()
_runner = sys.modules.get("__main__")
_io = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".ca-io")

if _runner is not None and hasattr(_runner, "Worker"):
    _draw = _runner.Worker.make_inputs

    def _noisy(self, seed):
        return [x + 1e-3 * torch.rand_like(x) if isinstance(x, torch.Tensor) else x for x in _draw(self, seed)]

    _runner.Worker.make_inputs = _noisy


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocked = False

    def forward(self, x):
        if not self.blocked and os.path.exists(os.path.join(_io, "tin-w-0.ten")):
            self.blocked = True
            for k in range(1000):
                try:
                    os.mkdir(os.path.join(_io, "tin-call-%d.ten" % k))
                except OSError:
                    pass
        x = x.contiguous()
        y = torch.empty_like(x)
        ca_kernels.launch(lib.relu_launch, x, y, x.numel())
        return y
