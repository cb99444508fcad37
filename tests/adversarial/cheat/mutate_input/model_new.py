"""Writes its result into the input tensor and returns it."""
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
    def forward(self, x):
        ca_kernels.launch(lib.relu_launch, x, x, x.numel())
        return x
