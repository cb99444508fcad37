"""ReLU in KernelBench's form: model_new.py builds its own CUDA with
torch.utils.cpp_extension.load_inline when it is imported."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void relu_kernel(const float *x, float *y, long long n)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = fmaxf(x[i], 0.f);
}

torch::Tensor relu_cuda(torch::Tensor x)
{
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long long n = xc.numel();
    const int block = 256;
    relu_kernel<<<(unsigned)((n + block - 1) / block), block>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_inline = load_inline(name="relu_inline", cpp_sources=cpp_source, cuda_sources=cuda_source,
                          functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return relu_inline.relu_cuda(x)
