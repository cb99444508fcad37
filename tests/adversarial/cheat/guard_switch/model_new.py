"""Uses its kernel while a dispatch mode is active (the checks) and torch.relu otherwise (the timed calls); caught by the kernel names CUPTI sees."""
import torch
import torch.nn as nn

import ca_kernels

lib = ca_kernels.load()


def relu_kernel(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    ca_kernels.launch(lib.relu_launch, x, y, x.numel())
    return y


from torch.utils._python_dispatch import _get_current_dispatch_mode


class ModelNew(nn.Module):
    def forward(self, x):
        if _get_current_dispatch_mode() is not None:
            return relu_kernel(x)
        return torch.relu(x)
