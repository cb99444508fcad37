/*
 * cuda_util: the helpers the files of lib/model/cuda share, so that each is
 * written once (C++ only, header-only, everything internal to the file
 * that includes it): the bf16 type, grid sizes, warp and block reductions,
 * fp32/bf16 conversions for kernels templated on the matrix type, and on
 * the host set_why (lib/core's ca_err_why, linked into the library) and
 * CUDA_TRY, which put a failed call's reason into the caller's why buffer
 * (CA_MODEL_WHY bytes).
 */
#ifndef CA_CUDA_UTIL_H
#define CA_CUDA_UTIL_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>

extern "C" {
#include "err.h"
#include "model.h"
}

typedef __nv_bfloat16 bf16;

static inline unsigned blocks_for(size_t n, unsigned threads)
{
	return (unsigned)((n + threads - 1) / threads);
}

__device__ static inline float warp_sum(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

__device__ static inline float warp_max(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
	return x;
}

// A reduction over a block of up to 1024 threads (blockDim.x a multiple of
// 32) by a warp reduction and its identity; every thread gets it, and shared
// (32 floats) may be written again at once.
template <float (*warp_reduce)(float)>
__device__ static inline float block_reduce(float x, float *shared, float identity)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	x = warp_reduce(x);
	__syncthreads();
	if (lane == 0)
		shared[warp] = x;
	__syncthreads();
	x = threadIdx.x < nwarps ? shared[threadIdx.x] : identity;
	if (warp == 0)
		x = warp_reduce(x);
	if (threadIdx.x == 0)
		shared[0] = x;
	__syncthreads();
	float r = shared[0];
	__syncthreads();
	return r;
}

__device__ static inline float block_sum(float x, float *shared)
{
	return block_reduce<warp_sum>(x, shared, 0.0f);
}

__device__ static inline float block_max(float x, float *shared)
{
	return block_reduce<warp_max>(x, shared, -INFINITY);
}

// Qwen3's q/k norm: RMSNorm over one head's D values (ca_nn_rmsnorm_forward
// with a row of head_dim) by one warp, in place: x = w * ((x + bias) * rstd).
// bias (may be NULL) is the head's part of the projection's bias; pre (may
// be NULL) keeps x + bias for the backward. Returns rstd.
__device__ static inline float warp_head_rmsnorm(float *x, float *pre, const float *bias, const float *w, float eps,
						 int D)
{
	int lane = threadIdx.x & 31;
	float ss = 0.0f;
	for (int i = lane; i < D; i += 32) {
		float v = bias ? x[i] + bias[i] : x[i];
		x[i] = v;
		if (pre)
			pre[i] = v;
		ss += v * v;
	}
	ss = warp_sum(ss);
	float r = rsqrtf(ss / (float)D + eps);
	for (int i = lane; i < D; i += 32)
		x[i] = w[i] * (x[i] * r);
	return r;
}

__device__ static inline float to_float(float x) { return x; }
__device__ static inline float to_float(bf16 x) { return __bfloat162float(x); }
template <typename W> __device__ static inline W from_float(float x);
template <> __device__ inline float from_float<float>(float x) { return x; }
template <> __device__ inline bf16 from_float<bf16>(float x) { return __float2bfloat16(x); }

// A failed call's reason into a why[CA_MODEL_WHY], as the rest of the model does.
#define set_why(why, ...) ca_err_why((why), CA_MODEL_WHY, __VA_ARGS__)

// In a host function with a char *why that returns int: on failure, the
// call and CUDA's reason into why, and return -1.
#define CUDA_TRY(call)                                                                        \
	do {                                                                                  \
		cudaError_t e_ = (call);                                                      \
		if (e_ != cudaSuccess) {                                                      \
			set_why(why, "%s: %s", #call, cudaGetErrorString(e_));                \
			return -1;                                                            \
		}                                                                             \
	} while (0)

#endif
