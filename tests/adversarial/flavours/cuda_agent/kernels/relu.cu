// ReLU for CUDA-Agent's layout: the launcher is called from relu_binding.cpp.
#include <cuda_runtime.h>

__global__ void relu_kernel(const float *__restrict__ x, float *__restrict__ y, long long n)
{
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	long long stride = (long long)gridDim.x * blockDim.x;
	for (; i < n; i += stride)
		y[i] = fmaxf(x[i], 0.f);
}

void relu_launch(const float *x, float *y, long long n, cudaStream_t stream)
{
	long long blocks = (n + 255) / 256;
	if (blocks > 132 * 32)
		blocks = 132 * 32;
	if (blocks > 0)
		relu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, y, n);
}
