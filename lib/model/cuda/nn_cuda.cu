// nn_cuda: the elementwise, norm, head and optimizer kernels; see nn_cuda.h.
// Each kernel's CPU reference is the lib/model/nn.c or lib/model/model.c function named beside it.
#include <cuda_runtime.h>
#include <math.h>

#include "cuda/cuda_util.h"
#include "cuda/nn_cuda.h"

// ---- embedding ----

__global__ static void embed_forward_kernel(float *x, const bf16 *embed, const int *tokens, int C)
{
	int t = blockIdx.x;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		x[(size_t)t * C + i] = __bfloat162float(embed[(size_t)tokens[t] * C + i]);
}

void nn_cuda_embed_forward(float *x, const bf16 *embed, const int *tokens, int T, int C)
{
	embed_forward_kernel<<<T, 256>>>(x, embed, tokens, C);
}

__global__ static void embed_backward_kernel(float *dembed, const float *dx, const int *tokens, int C)
{
	int t = blockIdx.x;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		atomicAdd(&dembed[(size_t)tokens[t] * C + i], dx[(size_t)t * C + i]);
}

void nn_cuda_embed_backward(float *dembed, const float *dx, const int *tokens, int T, int C)
{
	embed_backward_kernel<<<T, 256>>>(dembed, dx, tokens, C);
}

// ---- RMSNorm (ca_nn_rmsnorm_forward, ca_nn_rmsnorm_backward) ----

__global__ static void rmsnorm_forward_kernel(bf16 *out, float *rstd, const float *x, const float *w, float eps,
					      int C)
{
	__shared__ float shared[32];
	const float *row = x + (size_t)blockIdx.x * C;
	float ss = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		ss += row[i] * row[i];
	ss = block_sum(ss, shared);
	float r = rsqrtf(ss / (float)C + eps);
	if (rstd && threadIdx.x == 0)
		rstd[blockIdx.x] = r;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		out[(size_t)blockIdx.x * C + i] = __float2bfloat16(w[i] * (row[i] * r));
}

void nn_cuda_rmsnorm_forward(bf16 *out, float *rstd, const float *x, const float *w, float eps, int T, int C)
{
	rmsnorm_forward_kernel<<<T, 256>>>(out, rstd, x, w, eps, C);
}

// sum = a + b (+ bias), then the norm of sum: the residual add and the next norm in one pass.
__global__ static void add_rmsnorm_kernel(float *sum, bf16 *out, float *rstd, const float *a, const float *b,
					  const float *bias, const float *w, float eps, int C)
{
	__shared__ float shared[32];
	size_t row = (size_t)blockIdx.x * C;
	float ss = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x) {
		float v = a[row + i] + (bias ? b[row + i] + bias[i] : b[row + i]);
		sum[row + i] = v;
		ss += v * v;
	}
	ss = block_sum(ss, shared);
	float r = rsqrtf(ss / (float)C + eps);
	if (threadIdx.x == 0)
		rstd[blockIdx.x] = r;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		out[row + i] = __float2bfloat16(w[i] * (sum[row + i] * r));
}

void nn_cuda_add_rmsnorm(float *sum, bf16 *out, float *rstd, const float *a, const float *b, const float *bias,
			 const float *w, float eps, int T, int C)
{
	add_rmsnorm_kernel<<<T, 256>>>(sum, out, rstd, a, b, bias, w, eps, C);
}

// A block takes RMSNORM_ROWS rows one after another, adding each row's part of dw into shared
// memory (a column per thread, no conflicts), and then into dw with one atomic per column: dout
// and x are read once for both gradients.
#define RMSNORM_ROWS 32

__global__ static void rmsnorm_backward_kernel(float *dx, bf16 *dxb, float *dw, const float *dout, const float *x,
					       const float *w, const float *rstd, int T, int C)
{
	__shared__ float shared[32];
	extern __shared__ float dw_part[];  // none when dw is NULL: the caller sums dw itself
	for (int i = threadIdx.x; dw && i < C; i += blockDim.x)
		dw_part[i] = 0.0f;
	int t1 = min(T, (int)(blockIdx.x + 1) * RMSNORM_ROWS);
	for (int t = blockIdx.x * RMSNORM_ROWS; t < t1; t++) {
		size_t row = (size_t)t * C;
		float r = rstd[t], dot = 0;
		for (int i = threadIdx.x; i < C; i += blockDim.x)
			dot += dout[row + i] * w[i] * x[row + i];
		dot = block_sum(dot, shared);
		float k = dot * r * r * r / (float)C;
		for (int i = threadIdx.x; i < C; i += blockDim.x) {
			float g = dout[row + i], xi = x[row + i];
			float d = dx[row + i] + (g * w[i] * r - k * xi);
			dx[row + i] = d;
			if (dxb)
				dxb[row + i] = __float2bfloat16(d);
			if (dw)
				dw_part[i] += g * xi * r;
		}
	}
	for (int i = threadIdx.x; dw && i < C; i += blockDim.x)
		atomicAdd(&dw[i], dw_part[i]);
}

// out[c] += sum_t a[t,c] * b[t,c] * s[t] (b, s optional): a 32x8 block per 32
// columns and a slice of rows, then one atomic per column and block.
template <typename TA>
__global__ static void colsum_kernel(float *out, const TA *a, const float *b, const float *s, int T, int C)
{
	__shared__ float part[8][33];
	int c = blockIdx.x * 32 + threadIdx.x;
	float acc = 0;
	if (c < C)
		for (int t = blockIdx.y * 8 + threadIdx.y; t < T; t += gridDim.y * 8) {
			float v = to_float(a[(size_t)t * C + c]);
			if (b)
				v *= b[(size_t)t * C + c];
			if (s)
				v *= s[t];
			acc += v;
		}
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		for (int y = 1; y < 8; y++)
			acc += part[y][threadIdx.x];
		atomicAdd(&out[c], acc);
	}
}

static dim3 colsum_grid(int T, int C)
{
	unsigned rows = blocks_for((size_t)T, 8);
	return dim3(blocks_for((size_t)C, 32), rows < 128 ? rows : 128);
}

void nn_cuda_rmsnorm_backward(float *dx, bf16 *dxb, float *dw, const float *dout, const float *x, const float *w,
			      const float *rstd, int T, int C)
{
	unsigned blocks = (unsigned)((T + RMSNORM_ROWS - 1) / RMSNORM_ROWS);
	size_t bytes = sizeof(float) * (size_t)C;
	if (bytes <= 48 * 1024) {
		rmsnorm_backward_kernel<<<blocks, 256, bytes>>>(dx, dxb, dw, dout, x, w, rstd, T, C);
	} else {  // wider than the default shared memory: dw by its own pass
		rmsnorm_backward_kernel<<<blocks, 256>>>(dx, dxb, NULL, dout, x, w, rstd, T, C);
		colsum_kernel<float><<<colsum_grid(T, C), dim3(32, 8)>>>(dw, dout, x, rstd, T, C);
	}
}

void nn_cuda_colsum(float *out, const float *a, const float *rowscale, int T, int C)
{
	colsum_kernel<float><<<colsum_grid(T, C), dim3(32, 8)>>>(out, a, NULL, rowscale, T, C);
}

void nn_cuda_colsum_bf16(float *out, const bf16 *a, const float *rowscale, int T, int C)
{
	colsum_kernel<bf16><<<colsum_grid(T, C), dim3(32, 8)>>>(out, a, NULL, rowscale, T, C);
}

// ---- Qwen3's per-head q/k norm (ca_nn_rmsnorm_forward over rows of head_dim) ----

// A warp per head: the T*H rows of D values are short (head_dim), so a block of 256 takes 8.
__global__ static void head_rmsnorm_kernel(float *x, float *pre, float *rstd, const float *bias, const float *w,
					   float eps, int rows, int H, int D)
{
	int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	size_t at = (size_t)row * D;
	float r = warp_head_rmsnorm(x + at, pre ? pre + at : NULL, bias ? bias + (size_t)(row % H) * D : NULL, w, eps,
				    D);
	if (rstd && (threadIdx.x & 31) == 0)
		rstd[row] = r;
}

void nn_cuda_head_rmsnorm(float *x, float *pre, float *rstd, const float *bias, const float *w, float eps, int T,
			  int H, int D)
{
	int rows = T * H;
	head_rmsnorm_kernel<<<blocks_for((size_t)rows, 8), 256>>>(x, pre, rstd, bias, w, eps, rows, H, D);
}

__global__ static void bias_kernel(float *y, const float *bias, int O, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] += bias[i % O];
}

void nn_cuda_bias_forward(float *y, const float *bias, int T, int O)
{
	size_t n = (size_t)T * O;
	bias_kernel<<<blocks_for(n, 256), 256>>>(y, bias, O, n);
}

// ---- rotary embedding (ca_nn_rope_forward, ca_nn_rope_backward) ----

// bias (when not NULL, [H*D]) is added before the rotation, and copy (when not NULL) gets the result
// as bf16: the projection's bias, the rotary embedding and the tensor cores' copy in one pass.
__global__ static void rope_kernel(float *x, bf16 *copy, const float *bias, const int *pos, const float *cos_t,
				   const float *sin_t, int H, int D, float sign)
{
	int t = blockIdx.x, half = D / 2;
	const float *c = cos_t + (size_t)pos[t] * half, *s = sin_t + (size_t)pos[t] * half;
	for (int k = threadIdx.x; k < H * half; k += blockDim.x) {
		int h = k / half, i = k % half;
		float *v = x + ((size_t)t * H + h) * D;
		float a = v[i], b = v[i + half], sn = sign * s[i];
		if (bias) {
			a += bias[h * D + i];
			b += bias[h * D + i + half];
		}
		float lo = a * c[i] - b * sn, hi = b * c[i] + a * sn;
		v[i] = lo;
		v[i + half] = hi;
		if (copy) {
			bf16 *w = copy + ((size_t)t * H + h) * D;
			w[i] = __float2bfloat16(lo);
			w[i + half] = __float2bfloat16(hi);
		}
	}
}

void nn_cuda_rope(float *x, bf16 *copy, const float *bias, const int *pos, const float *cos_t, const float *sin_t,
		  int T, int H, int D, int inverse)
{
	rope_kernel<<<T, 256>>>(x, copy, bias, pos, cos_t, sin_t, H, D, inverse ? -1.0f : 1.0f);
}

// The backward of bias + rotation for the matmuls before: out = rope^-1(dx) as bf16 (dx itself
// when pos is NULL), and dbias += its sum over tokens. A block takes ROPE_ROWS tokens; each thread
// keeps to the same columns, summing them in shared memory, then one atomic per column and block.
#define ROPE_ROWS 32

__global__ static void rope_backward_kernel(bf16 *out, float *dbias, const float *dx, const int *pos,
					    const float *cos_t, const float *sin_t, int T, int H, int D)
{
	extern __shared__ float part[];  // [H*D] when dbias
	int half = D / 2, HD = H * D;
	for (int i = threadIdx.x; dbias && i < HD; i += blockDim.x)
		part[i] = 0.0f;
	__syncthreads();
	int t1 = min(T, (int)(blockIdx.x + 1) * ROPE_ROWS);
	for (int t = blockIdx.x * ROPE_ROWS; t < t1; t++) {
		const float *c = pos ? cos_t + (size_t)pos[t] * half : NULL, *s = pos ? sin_t + (size_t)pos[t] * half : NULL;
		for (int k = threadIdx.x; k < H * half; k += blockDim.x) {
			int h = k / half, i = k % half;
			size_t at = ((size_t)t * H + h) * D + i;
			float lo = dx[at], hi = dx[at + half];
			if (pos) {
				float a = lo, b = hi, sn = -s[i];
				lo = a * c[i] - b * sn;
				hi = b * c[i] + a * sn;
			}
			out[at] = __float2bfloat16(lo);
			out[at + half] = __float2bfloat16(hi);
			if (dbias) {
				part[h * D + i] += lo;
				part[h * D + i + half] += hi;
			}
		}
	}
	__syncthreads();
	for (int i = threadIdx.x; dbias && i < HD; i += blockDim.x)
		atomicAdd(&dbias[i], part[i]);
}

void nn_cuda_rope_backward(bf16 *out, float *dbias, const float *dx, const int *pos, const float *cos_t,
			   const float *sin_t, int T, int H, int D)
{
	size_t bytes = dbias ? sizeof(float) * (size_t)H * D : 0;
	unsigned blocks = (unsigned)((T + ROPE_ROWS - 1) / ROPE_ROWS);
	if (bytes <= 48 * 1024) {
		rope_backward_kernel<<<blocks, 256, bytes>>>(out, dbias, dx, pos, cos_t, sin_t, T, H, D);
	} else {  // a bias wider than the default shared memory: its gradient by its own pass
		rope_backward_kernel<<<blocks, 256>>>(out, NULL, dx, pos, cos_t, sin_t, T, H, D);
		nn_cuda_rope(const_cast<float *>(dx), NULL, NULL, pos, cos_t, sin_t, T, H, D, 1);
		nn_cuda_colsum(dbias, dx, NULL, T, H * D);
	}
}

// ---- SwiGLU (ca_nn_swiglu_forward, ca_nn_swiglu_backward) ----

// A thread per pair of columns (j, j + 1) of a row, rows strided over the grid's y: gate at
// gu[t, j], up at gu[t, F + j]. An odd F leaves one last column, done alone.
static dim3 swiglu_grid(int T, int F)
{
	return dim3(blocks_for((size_t)(F + 1) / 2, 256), (unsigned)(T < 65535 ? T : 65535));
}

__device__ static inline float silu(float g)
{
	return g / (1.0f + expf(-g));
}

__global__ static void swiglu_forward_kernel(bf16 *h, const bf16 *gu, int T, int F)
{
	int j = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
	if (j >= F)
		return;
	for (int t = blockIdx.y; t < T; t += gridDim.y) {
		const bf16 *row = gu + (size_t)t * 2 * F;
		bf16 *out = h + (size_t)t * F;
		if (j + 1 < F && F % 2 == 0) {
			float2 g = __bfloat1622float2(*(const __nv_bfloat162 *)(row + j));
			float2 u = __bfloat1622float2(*(const __nv_bfloat162 *)(row + F + j));
			*(__nv_bfloat162 *)(out + j) = __floats2bfloat162_rn(silu(g.x) * u.x, silu(g.y) * u.y);
		} else {
			for (int c = j; c < j + 2 && c < F; c++)
				out[c] = __float2bfloat16(silu(__bfloat162float(row[c])) * __bfloat162float(row[F + c]));
		}
	}
}

void nn_cuda_swiglu_forward(bf16 *h, const bf16 *gu, int T, int F)
{
	swiglu_forward_kernel<<<swiglu_grid(T, F), 256>>>(h, gu, T, F);
}

// d/dgate silu(g) u = u sig (1 + g (1 - sig)), d/dup = silu(g).
__device__ static inline void swiglu_grad(float d, float g, float u, float *dg, float *du)
{
	float sig = 1.0f / (1.0f + expf(-g));
	*du = d * g * sig;
	*dg = d * u * sig * (1.0f + g * (1.0f - sig));
}

__global__ static void swiglu_backward_kernel(bf16 *dgu, const float *dh, const bf16 *gu, int T, int F)
{
	int j = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
	if (j >= F)
		return;
	for (int t = blockIdx.y; t < T; t += gridDim.y) {
		const bf16 *row = gu + (size_t)t * 2 * F;
		const float *d = dh + (size_t)t * F;
		bf16 *out = dgu + (size_t)t * 2 * F;
		if (j + 1 < F && F % 2 == 0) {
			float2 g = __bfloat1622float2(*(const __nv_bfloat162 *)(row + j));
			float2 u = __bfloat1622float2(*(const __nv_bfloat162 *)(row + F + j));
			float2 dd = *(const float2 *)(d + j);
			float dg0, du0, dg1, du1;
			swiglu_grad(dd.x, g.x, u.x, &dg0, &du0);
			swiglu_grad(dd.y, g.y, u.y, &dg1, &du1);
			*(__nv_bfloat162 *)(out + j) = __floats2bfloat162_rn(dg0, dg1);
			*(__nv_bfloat162 *)(out + F + j) = __floats2bfloat162_rn(du0, du1);
		} else {
			for (int c = j; c < j + 2 && c < F; c++) {
				float dg, du;
				swiglu_grad(d[c], __bfloat162float(row[c]), __bfloat162float(row[F + c]), &dg, &du);
				out[c] = __float2bfloat16(dg);
				out[F + c] = __float2bfloat16(du);
			}
		}
	}
}

void nn_cuda_swiglu_backward(bf16 *dgu, const float *dh, const bf16 *gu, int T, int F)
{
	swiglu_backward_kernel<<<swiglu_grid(T, F), 256>>>(dgu, dh, gu, T, F);
}

__global__ static void add_kernel(float *out, const float *a, const float *b, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = a[i] + b[i];
}

void nn_cuda_add(float *out, const float *a, const float *b, size_t n)
{
	add_kernel<<<blocks_for(n, 256), 256>>>(out, a, b, n);
}

__global__ static void to_bf16_kernel(bf16 *out, const float *x, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = __float2bfloat16(x[i]);
}

void nn_cuda_to_bf16(bf16 *out, const float *x, size_t n)
{
	to_bf16_kernel<<<blocks_for(n, 256), 256>>>(out, x, n);
}

// ---- language-model head (ca_nn_logprob_row, ca_nn_logprob_row_backward) ----

// Log-sum-exp and entropy of a row in one pass: each thread keeps a running
// max m, s = sum exp(z - m) and sz = sum exp(z - m) (z - m), rescaled when m
// grows; the block then merges them at the block's max. Every thread gets both.
__device__ static inline void stats_add(float x, float &m, float &s, float &sz)
{
	if (x > m) {
		if (s > 0.0f) {
			float c = expf(m - x);
			sz = c * (sz + s * (m - x));
			s *= c;
		}
		m = x;
	}
	float e = expf(x - m);
	s += e;
	sz += e * (x - m);
}

// Rows of a length divisible by 4 are read as float4 (16-byte aligned then).
__device__ static void row_stats(const float *z, int V, float *shared, float *lse, float *entropy)
{
	float m = -INFINITY, s = 0.0f, sz = 0.0f;
	if (V % 4 == 0) {
		for (int j = threadIdx.x; j < V / 4; j += blockDim.x) {
			float4 x = ((const float4 *)z)[j];
			stats_add(x.x, m, s, sz);
			stats_add(x.y, m, s, sz);
			stats_add(x.z, m, s, sz);
			stats_add(x.w, m, s, sz);
		}
	} else {
		for (int j = threadIdx.x; j < V; j += blockDim.x)
			stats_add(z[j], m, s, sz);
	}
	float M = block_max(m, shared), c = s > 0.0f ? expf(m - M) : 0.0f;
	float se = block_sum(s * c, shared);
	float sez = block_sum(s > 0.0f ? c * (sz + s * (m - M)) : 0.0f, shared);
	*lse = M + logf(se);
	*entropy = logf(se) - sez / se;
}

__global__ static void logprob_forward_kernel(float *logprob, float *entropy, float *row_lse, const float *logits,
					      const int *targets, int V)
{
	__shared__ float shared[32];
	const float *z = logits + (size_t)blockIdx.x * V;
	float lse, H;
	row_stats(z, V, shared, &lse, &H);
	if (threadIdx.x == 0) {
		int tg = targets[blockIdx.x];
		if (logprob)
			logprob[blockIdx.x] = tg >= 0 && tg < V ? z[tg] - lse : 0.0f;
		if (entropy)
			entropy[blockIdx.x] = H;
		if (row_lse)
			row_lse[blockIdx.x] = lse;
	}
}

void nn_cuda_logprob_forward(float *logprob, float *entropy, float *row_lse, const float *logits, const int *targets,
			     int n, int V)
{
	logprob_forward_kernel<<<n, 1024>>>(logprob, entropy, row_lse, logits, targets, V);
}

// d/dz of gl log p(target) + ge H at one logit z.
__device__ static inline float logprob_grad(float z, float lse, float H, float gl, float ge, bool target)
{
	float logp = z - lse, p = expf(logp);
	float d = -gl * p + (ge != 0.0f ? -ge * p * (logp + H) : 0.0f);
	return target ? d + gl : d;
}

__global__ static void logprob_backward_kernel(bf16 *dlogits, const float *logits, const int *targets,
					       const float *dlogp, const float *dentropy, const float *row_lse,
					       const float *row_entropy, int V)
{
	__shared__ float shared[32];
	size_t row = (size_t)blockIdx.x * V;
	const float *z = logits + row;
	float gl = dlogp ? dlogp[blockIdx.x] : 0.0f, ge = dentropy ? dentropy[blockIdx.x] : 0.0f;
	float lse, H;
	if (row_lse) {
		lse = row_lse[blockIdx.x];
		H = row_entropy[blockIdx.x];
	} else {
		row_stats(z, V, shared, &lse, &H);
	}
	int tg = targets[blockIdx.x];
	if (V % 4 == 0) {
		for (int j = threadIdx.x; j < V / 4; j += blockDim.x) {
			float4 x = ((const float4 *)z)[j];
			float d[4] = {x.x, x.y, x.z, x.w};
			for (int c = 0; c < 4; c++)
				d[c] = logprob_grad(d[c], lse, H, gl, ge, 4 * j + c == tg);
			__nv_bfloat162 *out = (__nv_bfloat162 *)(dlogits + row) + 2 * j;
			out[0] = __floats2bfloat162_rn(d[0], d[1]);
			out[1] = __floats2bfloat162_rn(d[2], d[3]);
		}
	} else {
		for (int j = threadIdx.x; j < V; j += blockDim.x)
			dlogits[row + j] = __float2bfloat16(logprob_grad(z[j], lse, H, gl, ge, j == tg));
	}
}

void nn_cuda_logprob_backward(bf16 *dlogits, const float *logits, const int *targets, const float *dlogp,
			      const float *dentropy, const float *row_lse, const float *row_entropy, int n, int V)
{
	logprob_backward_kernel<<<n, 1024>>>(dlogits, logits, targets, dlogp, dentropy, row_lse, row_entropy, V);
}

// ---- value head ----

__global__ static void value_forward_kernel(float *values, const bf16 *x, const bf16 *w, const float *b, int C)
{
	__shared__ float shared[32];
	float s = 0.0f;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		s += __bfloat162float(x[(size_t)blockIdx.x * C + i]) * __bfloat162float(w[i]);
	s = block_sum(s, shared);
	if (threadIdx.x == 0)
		values[blockIdx.x] = s + (b ? b[0] : 0.0f);
}

void nn_cuda_value_forward(float *values, const bf16 *x, const bf16 *w, const float *b, int T, int C)
{
	value_forward_kernel<<<T, 256>>>(values, x, w, b, C);
}

__global__ static void value_backward_kernel(float *dx, const float *dvalue, const float *w, int C)
{
	float g = dvalue[blockIdx.x];
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		dx[(size_t)blockIdx.x * C + i] = g * w[i];
}

void nn_cuda_value_backward(float *dx, const float *dvalue, const float *w, int T, int C)
{
	value_backward_kernel<<<T, 256>>>(dx, dvalue, w, C);
}

// ---- optimizer (ca_model_grad_norm, ca_model_adamw_step) ----

__global__ static void sumsq_kernel(double *partial, const float *x, size_t n)
{
	__shared__ double shared[32];
	double s = 0;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		s += (double)x[i] * x[i];
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if ((threadIdx.x & 31) == 0)
		shared[threadIdx.x >> 5] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		double t = 0;
		for (int w = 0; w < (int)(blockDim.x >> 5); w++)
			t += shared[w];
		partial[blockIdx.x] = t;
	}
}

int nn_cuda_sumsq(double *partial, const float *x, size_t n)
{
	sumsq_kernel<<<NN_CUDA_SUMSQ_BLOCKS, 256>>>(partial, x, n);
	return NN_CUDA_SUMSQ_BLOCKS;
}

__global__ static void adamw_kernel(float *params, bf16 *params16, const float *grad, float *m, float *v, size_t n,
				    float clip, float b1, float b2, float step_size, float bc2_sqrt, float eps,
				    float decay)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		float g = grad[i] * clip;
		float mi = m[i] = b1 * m[i] + (1.0f - b1) * g;
		float vi = v[i] = b2 * v[i] + (1.0f - b2) * g * g;
		float p = params[i] * decay;
		p = p - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
		params[i] = p;
		params16[i] = __float2bfloat16(p);
	}
}

void nn_cuda_adamw(float *params, bf16 *params16, const float *grad, float *m, float *v, size_t n, float clip,
		   float beta1, float beta2, float step_size, float bc2_sqrt, float eps, float decay)
{
	size_t blocks = blocks_for(n, 256);
	adamw_kernel<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256>>>(params, params16, grad, m, v, n, clip, beta1,
									   beta2, step_size, bc2_sqrt, eps, decay);
}
