"""Uses a Tensor compute method (clamp) instead of a kernel."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp(min=0)
