// Row softmax: one block per row, three passes over the row (max, sum, write).
#include <cuda_runtime.h>
#include <float.h>

template <bool IS_MAX>
__device__ float block_reduce(float v, float *shared)
{
	for (int o = 16; o > 0; o >>= 1) {
		float w = __shfl_xor_sync(0xffffffff, v, o);
		v = IS_MAX ? fmaxf(v, w) : v + w;
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	if (lane == 0)
		shared[warp] = v;
	__syncthreads();
	int warps = blockDim.x >> 5;
	v = threadIdx.x < warps ? shared[threadIdx.x] : (IS_MAX ? -FLT_MAX : 0.f);
	if (warp == 0) {
		for (int o = 16; o > 0; o >>= 1) {
			float w = __shfl_xor_sync(0xffffffff, v, o);
			v = IS_MAX ? fmaxf(v, w) : v + w;
		}
		if (lane == 0)
			shared[0] = v;
	}
	__syncthreads();
	float r = shared[0];
	__syncthreads();
	return r;
}

__global__ void softmax_rows(const float *__restrict__ x, float *__restrict__ y, long long cols)
{
	__shared__ float shared[32];
	const float *row = x + blockIdx.x * cols;
	float *out = y + blockIdx.x * cols;
	float m = -FLT_MAX;
	for (long long c = threadIdx.x; c < cols; c += blockDim.x)
		m = fmaxf(m, row[c]);
	m = block_reduce<true>(m, shared);
	float s = 0.f;
	for (long long c = threadIdx.x; c < cols; c += blockDim.x)
		s += __expf(row[c] - m);
	s = block_reduce<false>(s, shared);
	float inv = 1.f / s;
	for (long long c = threadIdx.x; c < cols; c += blockDim.x)
		out[c] = __expf(row[c] - m) * inv;
}

extern "C" int softmax_launch(const float *x, float *y, long long rows, long long cols, cudaStream_t stream)
{
	softmax_rows<<<(unsigned)rows, 1024, 0, stream>>>(x, y, cols);
	return (int)cudaGetLastError();
}
