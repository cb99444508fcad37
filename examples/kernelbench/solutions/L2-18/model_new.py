import torch
import torch.nn as nn

import ca_kernels


class ModelNew(nn.Module):
    """Linear, then sum over features; the max, mean and two logsumexp that
    follow act on a dimension of size 1 and change nothing. The sum moves
    inside the product: x @ colsum(W) + sum(b) (kernels/linear_sum.cu)."""

    CHUNKS = 64

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self._lib = ca_kernels.load()

    def forward(self, x):
        w, b = self.linear.weight, self.linear.bias
        out_features, in_features = w.shape
        batch = x.shape[0]
        dev = x.device
        partial = torch.empty((self.CHUNKS, in_features), device=dev, dtype=torch.float32)
        wsum = torch.empty((in_features,), device=dev, dtype=torch.float32)
        bsum = torch.empty((1,), device=dev, dtype=torch.float32)
        out = torch.empty((batch, 1), device=dev, dtype=torch.float32)
        ca_kernels.launch(self._lib.linear_sum_forward, x, w, b, partial, wsum, bsum, out,
                          batch, in_features, out_features, self.CHUNKS)
        return out
