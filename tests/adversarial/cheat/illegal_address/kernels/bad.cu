// Writes through a wild pointer: an illegal memory access, a sticky CUDA error.
#include <cuda_runtime.h>

__global__ void wild(float *y, long long n)
{
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (i < n)
		y[i + (1LL << 40)] = 1.f;
}

extern "C" int wild_launch(const float *x, float *y, long long n, cudaStream_t stream)
{
	(void)x;
	wild<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(y, n);
	return (int)cudaGetLastError();
}
