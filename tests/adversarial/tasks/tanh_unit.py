import torch
import torch.nn as nn


class Model(nn.Module):
    """tanh on inputs drawn in [0, 1): a polynomial fitted there passes
    every draw of get_inputs() and is wrong beyond it."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x)


batch_size = 1024
dim = 4096


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
