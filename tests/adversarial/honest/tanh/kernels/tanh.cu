// tanh, one float per thread.
#include <cuda_runtime.h>

__global__ void tanh_kernel(const float *__restrict__ x, float *__restrict__ y, long long n)
{
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	long long stride = (long long)gridDim.x * blockDim.x;
	for (; i < n; i += stride)
		y[i] = tanhf(x[i]);
}

extern "C" int tanh_launch(const float *x, float *y, long long n, cudaStream_t stream)
{
	long long blocks = (n + 255) / 256;
	tanh_kernel<<<(unsigned)(blocks > 4096 ? 4096 : blocks), 256, 0, stream>>>(x, y, n);
	return (int)cudaGetLastError();
}
