"""Asks for far more device memory than exists."""
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
        waste = torch.empty(1 << 42, dtype=torch.uint8, device=x.device)
        return relu_kernel(x) + 0 * waste[0]
