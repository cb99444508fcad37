import torch
import torch.nn as nn


class Model(nn.Module):
    """Row softmax (KernelBench level 1 #23, smaller input)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 32768


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
