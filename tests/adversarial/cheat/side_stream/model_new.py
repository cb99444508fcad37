"""Launches its (honest) kernel on a side stream and returns at once; must be timed honestly."""
import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()


def relu_kernel(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    ca_kernels.launch(lib.relu_launch, x, y, x.numel())
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = None

    def forward(self, x):
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        y = torch.empty_like(x)
        with torch.cuda.stream(self.stream):
            ca_kernels.launch(lib.relu_launch, x, y, x.numel())
        return y
