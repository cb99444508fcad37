"""A kernel that writes far outside its buffer: the worker must be replaced and the next record scored normally."""
import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        ca_kernels.launch(lib.wild_launch, x, y, x.numel())
        return y
