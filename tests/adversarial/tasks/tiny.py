import torch
import torch.nn as nn


class Model(nn.Module):
    """Outputs far below the default atol: an all-zero answer must still fail."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 0.001


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
