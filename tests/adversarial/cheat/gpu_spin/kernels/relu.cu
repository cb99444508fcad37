// ReLU, four floats per thread when the pointers allow it.
#include <cuda_runtime.h>

__global__ void relu_vec4(const float4 *__restrict__ x, float4 *__restrict__ y, long long n4)
{
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	long long stride = (long long)gridDim.x * blockDim.x;
	for (; i < n4; i += stride) {
		float4 v = x[i];
		v.x = fmaxf(v.x, 0.f);
		v.y = fmaxf(v.y, 0.f);
		v.z = fmaxf(v.z, 0.f);
		v.w = fmaxf(v.w, 0.f);
		y[i] = v;
	}
}

__global__ void relu_tail(const float *__restrict__ x, float *__restrict__ y, long long start, long long n)
{
	long long i = start + blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = fmaxf(x[i], 0.f);
}

extern "C" int relu_launch(const float *x, float *y, long long n, cudaStream_t stream)
{
	long long n4 = n / 4;
	if (n4 > 0) {
		int blocks = (int)((n4 + 255) / 256);
		if (blocks > 132 * 32)
			blocks = 132 * 32;
		relu_vec4<<<blocks, 256, 0, stream>>>((const float4 *)x, (float4 *)y, n4);
	}
	if (n - n4 * 4 > 0)
		relu_tail<<<1, 256, 0, stream>>>(x, y, n4 * 4, n);
	return (int)cudaGetLastError();
}

// One thread that holds the GPU for ns nanoseconds of its global timer.
__global__ void spin(long long ns)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while ((long long)(t - t0) < ns);
}

extern "C" int spin_launch(const float *anchor, long long ns, cudaStream_t stream)
{
	(void)anchor;
	spin<<<1, 1, 0, stream>>>(ns);
	return (int)cudaGetLastError();
}
