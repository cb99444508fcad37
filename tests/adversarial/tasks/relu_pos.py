import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU whose inputs are drawn non-negative: the identity is right on
    every draw of get_inputs() and wrong for the task's shapes and dtypes."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 1024
dim = 4096


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
