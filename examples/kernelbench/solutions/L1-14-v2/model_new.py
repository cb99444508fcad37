import torch
import torch.nn as nn

import ca_kernels


class ModelNew(nn.Module):
    """triu(A @ B) for upper triangular A, B: cuBLAS on the 512 x 512 blocks
    on and above the diagonal, over the k range that can be nonzero
    (kernels/triu_blocked.cu); other sizes use kernels/triu_matmul.cu."""

    def __init__(self):
        super().__init__()
        self._lib = ca_kernels.load()

    def forward(self, A, B):
        n = A.shape[0]
        C = torch.empty((n, n), device=A.device, dtype=A.dtype)
        ca_kernels.launch(self._lib.triu_matmul_blocked, A, B, C, n)
        return C
