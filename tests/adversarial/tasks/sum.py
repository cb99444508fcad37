import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over dimension 1 (KernelBench level 1 #47, smaller input)."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 64
dim1 = 4096
dim2 = 2047


def get_inputs():
    x = torch.rand(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [1]
