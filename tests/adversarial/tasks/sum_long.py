import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over a long middle dimension of non-negative values: the sum is
    dominated by the mean, so a sum over a subset of the rows, scaled up,
    lands within 1% of it on every draw of get_inputs()."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 2
rows = 1 << 19
cols = 8


def get_inputs():
    x = torch.rand(batch_size, rows, cols)
    return [x]


def get_init_inputs():
    return [1]
