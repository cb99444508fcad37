// Linear -> sum over features -> max, mean, logsumexp, logsumexp over a
// dimension of size 1, which leave the value unchanged. So
//   out[i] = sum_j (x[i] . W[j] + b[j]) = x[i] . (sum_j W[j]) + sum_j b[j]:
// a column sum of W, a sum of b, and one dot product per row of x, instead
// of a full GEMM. W is read once (coalesced), x once.
//
// The steps are __host__ __device__ so a CPU emulation can check them.
#include <cuda_runtime.h>

#define THREADS 256

// partial[c][k] = sum of W[j][k] over the rows j of chunk c.
__host__ __device__ inline void colsum_one(const float* W, float* partial, long long rows, long long cols,
	long long rows_per_chunk, long long c, long long k)
{
	long long r0 = c * rows_per_chunk, r1 = r0 + rows_per_chunk;
	if (r1 > rows)
		r1 = rows;
	float acc = 0.f;
	for (long long j = r0; j < r1; j++)
		acc += W[j * cols + k];
	partial[c * cols + k] = acc;
}

__global__ void colsum_kernel(const float* __restrict__ W, float* __restrict__ partial, long long rows,
	long long cols, long long rows_per_chunk)
{
	long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (k < cols)
		colsum_one(W, partial, rows, cols, rows_per_chunk, blockIdx.y, k);
}

__host__ __device__ inline float sum_chunks(const float* partial, long long chunks, long long cols, long long k)
{
	float acc = 0.f;
	for (long long c = 0; c < chunks; c++)
		acc += partial[c * cols + k];
	return acc;
}

__device__ inline float block_sum(float v)
{
	__shared__ float warp_sums[THREADS / 32];
	for (int off = 16; off > 0; off >>= 1)
		v += __shfl_down_sync(0xffffffffu, v, off);
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	if (lane == 0)
		warp_sums[warp] = v;
	__syncthreads();
	v = threadIdx.x < THREADS / 32 ? warp_sums[threadIdx.x] : 0.f;
	if (warp == 0)
		for (int off = 16; off > 0; off >>= 1)
			v += __shfl_down_sync(0xffffffffu, v, off);
	__syncthreads();
	return v;   // valid in thread 0
}

// wsum[k] = sum over chunks; block 0 also sums the bias into bsum[0].
__global__ void finish_sums_kernel(const float* __restrict__ partial, const float* __restrict__ bias,
	float* __restrict__ wsum, float* __restrict__ bsum, long long chunks, long long cols, long long nbias)
{
	long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (k < cols)
		wsum[k] = sum_chunks(partial, chunks, cols, k);
	if (blockIdx.x == 0) {
		float acc = 0.f;
		for (long long j = threadIdx.x; j < nbias; j += blockDim.x)
			acc += bias[j];
		acc = block_sum(acc);
		if (threadIdx.x == 0)
			bsum[0] = acc;
	}
}

// out[i] = x[i] . wsum + bsum: one block per row.
__global__ void row_dot_kernel(const float* __restrict__ x, const float* __restrict__ wsum,
	const float* __restrict__ bsum, float* __restrict__ out, long long cols)
{
	const float* row = x + blockIdx.x * cols;
	float acc = 0.f;
	for (long long k = threadIdx.x; k < cols; k += blockDim.x)
		acc += row[k] * wsum[k];
	acc = block_sum(acc);
	if (threadIdx.x == 0)
		out[blockIdx.x] = acc + bsum[0];
}

extern "C" int linear_sum_forward(const float* x, const float* W, const float* b, float* partial,
	float* wsum, float* bsum, float* out, long long batch, long long in_features,
	long long out_features, long long chunks, cudaStream_t stream)
{
	if (batch <= 0 || in_features <= 0 || out_features <= 0 || chunks <= 0 || chunks > 65535 || batch > 2147483647LL)
		return (int)cudaErrorInvalidValue;
	long long rows_per_chunk = (out_features + chunks - 1) / chunks;
	dim3 grid((unsigned)((in_features + THREADS - 1) / THREADS), (unsigned)chunks);
	colsum_kernel<<<grid, THREADS, 0, stream>>>(W, partial, out_features, in_features, rows_per_chunk);
	finish_sums_kernel<<<(unsigned)((in_features + THREADS - 1) / THREADS), THREADS, 0, stream>>>(
		partial, b, wsum, bsum, chunks, in_features, out_features);
	row_dot_kernel<<<(unsigned)batch, THREADS, 0, stream>>>(x, wsum, bsum, out, in_features);
	return (int)cudaGetLastError();
}
