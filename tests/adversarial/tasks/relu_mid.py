import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU on a mid-sized input (milliseconds on a CPU), for the CPU timing tests."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 2048
dim = 2048


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
