import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        assert dim == 1, "this kernel reduces over dimension 1"
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        b, r, c = x.shape
        y = torch.empty((b, 1, c), device=x.device, dtype=x.dtype)
        ca_kernels.launch(lib.sum_dim1_launch, x, y, b, r, c)
        return y
