import torch
import torch.nn as nn


class Model(nn.Module):
    """A tiny elementwise task for the CPU tests: y = relu(x) * scale, small outputs."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return [0.001]
