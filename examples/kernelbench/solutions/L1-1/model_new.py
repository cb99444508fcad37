import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
        ca_kernels.launch(lib.matmul_launch, a, b, c, a.shape[0])
        return c
