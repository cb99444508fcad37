import torch
import torch.nn as nn

import ca_kernels


class ModelNew(nn.Module):
    """triu(A @ B) for upper triangular A, B: only the tiles and the k range
    that can be nonzero are computed (kernels/triu_matmul.cu)."""

    def __init__(self):
        super().__init__()
        self._lib = ca_kernels.load()

    def forward(self, A, B):
        n = A.shape[0]
        C = torch.empty((n, n), device=A.device, dtype=A.dtype)
        ca_kernels.launch(self._lib.triu_matmul, A, B, C, n)
        return C
