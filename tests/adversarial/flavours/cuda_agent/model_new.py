"""ReLU in CUDA-Agent's agent_workdir layout: kernels/*.cu with torch
bindings in kernels/*_binding.cpp, registered through binding_registry.h
and built (by ca-build) as the torch extension cuda_extension."""
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.relu_forward(x)
