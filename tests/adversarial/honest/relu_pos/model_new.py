import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        ca_kernels.launch(lib.relu_launch, x, y, x.numel())
        return y
