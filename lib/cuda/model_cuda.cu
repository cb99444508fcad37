// model_cuda: the CUDA forward pass of the policy engine; see model_cuda.h.
// One kernel family per layer, each the counterpart of a function in lib/nn.c.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "model.h"
}
#include "cuda/model_cuda.h"

struct layer_weights {
	__nv_bfloat16 *wq, *wk, *wv, *wo, *wgate, *wup, *wdown;
	float *bq, *bk, *bv, *bo, *ln1, *ln2;   // small vectors stay fp32
};

struct ca_cuda_model {
	struct ca_model_config cfg;
	cublasHandle_t blas;
	__nv_bfloat16 *embed, *lm_head, *score_w;
	float *norm, *score_b;
	struct layer_weights *layers;
	float *rope_cos, *rope_sin;
	void **owned;            // every device allocation, for freeing
	int nowned, capowned;
};

static void set_why(char *why, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, CA_MODEL_WHY, fmt, ap);
	va_end(ap);
}

#define CUDA_TRY(call)                                                                        \
	do {                                                                                  \
		cudaError_t e_ = (call);                                                      \
		if (e_ != cudaSuccess) {                                                      \
			set_why(why, "%s: %s", #call, cudaGetErrorString(e_));                \
			return -1;                                                            \
		}                                                                             \
	} while (0)

static void *device_alloc(struct ca_cuda_model *g, size_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess)
		return NULL;
	if (g->nowned == g->capowned) {
		g->capowned = g->capowned ? 2 * g->capowned : 64;
		g->owned = (void **)realloc(g->owned, sizeof(void *) * (size_t)g->capowned);
	}
	g->owned[g->nowned++] = p;
	return p;
}

static __nv_bfloat16 *upload_bf16(struct ca_cuda_model *g, const float *x, size_t n)
{
	if (!x)
		return NULL;
	__nv_bfloat16 *host = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (n ? n : 1));
	for (size_t i = 0; i < n; i++)
		host[i] = __float2bfloat16(x[i]);
	__nv_bfloat16 *d = (__nv_bfloat16 *)device_alloc(g, sizeof(__nv_bfloat16) * n);
	if (d && cudaMemcpy(d, host, sizeof(__nv_bfloat16) * n, cudaMemcpyHostToDevice) != cudaSuccess)
		d = NULL;
	free(host);
	return d;
}

static float *upload_f32(struct ca_cuda_model *g, const float *x, size_t n)
{
	if (!x)
		return NULL;
	float *d = (float *)device_alloc(g, sizeof(float) * n);
	if (d && cudaMemcpy(d, x, sizeof(float) * n, cudaMemcpyHostToDevice) != cudaSuccess)
		d = NULL;
	return d;
}

extern "C" void ca_cuda_model_free(struct ca_cuda_model *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->nowned; i++)
		cudaFree(g->owned[i]);
	free(g->owned);
	free(g->layers);
	if (g->blas)
		cublasDestroy(g->blas);
	free(g);
}

extern "C" struct ca_cuda_model *ca_cuda_model_upload(const struct ca_model *m, char *why)
{
	const struct ca_model_config *c = &m->cfg;
	struct ca_cuda_model *g = (struct ca_cuda_model *)calloc(1, sizeof *g);
	g->cfg = *c;
	if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
		set_why(why, "cublasCreate failed (no usable GPU?)");
		free(g);
		return NULL;
	}
	size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
	size_t QD = (size_t)c->num_heads * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim;
	int ok = 1;
	g->embed = upload_bf16(g, m->embed, V * C);
	ok &= g->embed != NULL;
	g->norm = upload_f32(g, m->norm, C);
	ok &= g->norm != NULL;
	if (c->critic) {
		g->score_w = upload_bf16(g, m->score_w, C);
		g->score_b = upload_f32(g, m->score_b, 1);
		ok &= g->score_w != NULL;
	} else {
		g->lm_head = m->lm_head == m->embed ? g->embed : upload_bf16(g, m->lm_head, V * C);
		ok &= g->lm_head != NULL;
	}
	g->layers = (struct layer_weights *)calloc((size_t)c->num_layers, sizeof *g->layers);
	for (int l = 0; l < c->num_layers && ok; l++) {
		const struct ca_model_layer *L = &m->layers[l];
		struct layer_weights *W = &g->layers[l];
		W->wq = upload_bf16(g, L->wq, QD * C);
		W->wk = upload_bf16(g, L->wk, KD * C);
		W->wv = upload_bf16(g, L->wv, KD * C);
		W->wo = upload_bf16(g, L->wo, C * QD);
		W->wgate = upload_bf16(g, L->wgate, F * C);
		W->wup = upload_bf16(g, L->wup, F * C);
		W->wdown = upload_bf16(g, L->wdown, C * F);
		W->bq = upload_f32(g, L->bq, QD);
		W->bk = upload_f32(g, L->bk, KD);
		W->bv = upload_f32(g, L->bv, KD);
		W->bo = upload_f32(g, L->bo, C);
		W->ln1 = upload_f32(g, L->ln1, C);
		W->ln2 = upload_f32(g, L->ln2, C);
		ok &= W->wq && W->wk && W->wv && W->wo && W->wgate && W->wup && W->wdown && W->ln1 && W->ln2;
	}
	size_t rope = (size_t)c->max_positions * (size_t)(c->head_dim / 2);
	g->rope_cos = upload_f32(g, m->rope_cos, rope);
	g->rope_sin = upload_f32(g, m->rope_sin, rope);
	ok &= g->rope_cos && g->rope_sin;
	if (!ok) {
		set_why(why, "cannot copy the weights to the GPU (out of memory?)");
		ca_cuda_model_free(g);
		return NULL;
	}
	return g;
}

// ---- kernels ----

__device__ static float warp_sum(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

__device__ static float warp_max(float x)
{
	for (int o = 16; o > 0; o >>= 1)
		x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
	return x;
}

// Sum over a block of up to 1024 threads (blockDim.x a multiple of 32).
__device__ static float block_sum(float x, float *shared)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	x = warp_sum(x);
	__syncthreads();
	if (lane == 0)
		shared[warp] = x;
	__syncthreads();
	x = threadIdx.x < nwarps ? shared[threadIdx.x] : 0.0f;
	if (warp == 0)
		x = warp_sum(x);
	if (threadIdx.x == 0)
		shared[0] = x;
	__syncthreads();
	return shared[0];
}

__device__ static float block_max(float x, float *shared)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	x = warp_max(x);
	__syncthreads();
	if (lane == 0)
		shared[warp] = x;
	__syncthreads();
	x = threadIdx.x < nwarps ? shared[threadIdx.x] : -INFINITY;
	if (warp == 0)
		x = warp_max(x);
	if (threadIdx.x == 0)
		shared[0] = x;
	__syncthreads();
	return shared[0];
}

__global__ static void embed_kernel(float *x, const __nv_bfloat16 *embed, const int *tokens, int C)
{
	int t = blockIdx.x;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		x[(size_t)t * C + i] = __bfloat162float(embed[(size_t)tokens[t] * C + i]);
}

// out (bf16, the next matmul's input) = w * x * rstd, per row (ca_nn_rmsnorm_forward).
__global__ static void rmsnorm_kernel(__nv_bfloat16 *out, const float *x, const float *w, float eps, int C)
{
	__shared__ float shared[32];
	const float *row = x + (size_t)blockIdx.x * C;
	float ss = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		ss += row[i] * row[i];
	ss = block_sum(ss, shared);
	float r = rsqrtf(ss / (float)C + eps);
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		out[(size_t)blockIdx.x * C + i] = __float2bfloat16(w[i] * (row[i] * r));
}

__global__ static void bias_kernel(float *y, const float *bias, int O, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] += bias[i % O];
}

// Rotate pairs (i, i + D/2) of every head by pos * inv_freq[i] (ca_nn_rope_forward).
__global__ static void rope_kernel(float *x, const int *pos, const float *cos_t, const float *sin_t, int H, int D)
{
	int t = blockIdx.x, half = D / 2;
	const float *c = cos_t + (size_t)pos[t] * half, *s = sin_t + (size_t)pos[t] * half;
	for (int k = threadIdx.x; k < H * half; k += blockDim.x) {
		int h = k / half, i = k % half;
		float *v = x + ((size_t)t * H + h) * D;
		float a = v[i], b = v[i + half];
		v[i] = a * c[i] - b * s[i];
		v[i + half] = b * c[i] + a * s[i];
	}
}

// One warp per (token, head): causal attention over the token's sequence
// with an online softmax; each lane holds D/32 output dims (D <= 256).
__global__ static void attention_kernel(__nv_bfloat16 *out, const float *q, const float *k, const float *v,
					const int *seq_start, int T, int NH, int NKV, int D)
{
	int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
	if (warp >= T * NH)
		return;
	int t = warp / NH, h = warp % NH, g = h / (NH / NKV);
	float scale = rsqrtf((float)D);
	float qr[8], acc[8];
	int per = (D + 31) / 32;
	for (int j = 0; j < per; j++) {
		int d = lane + 32 * j;
		qr[j] = d < D ? q[((size_t)t * NH + h) * D + d] : 0.0f;
		acc[j] = 0.0f;
	}
	float mx = -INFINITY, sum = 0.0f;
	for (int s = seq_start[t]; s <= t; s++) {
		const float *ks = k + ((size_t)s * NKV + g) * D, *vs = v + ((size_t)s * NKV + g) * D;
		float dot = 0.0f;
		for (int j = 0; j < per; j++) {
			int d = lane + 32 * j;
			if (d < D)
				dot += qr[j] * ks[d];
		}
		float score = warp_sum(dot) * scale;
		float nmx = fmaxf(mx, score);
		float corr = expf(mx - nmx), p = expf(score - nmx);
		sum = sum * corr + p;
		for (int j = 0; j < per; j++) {
			int d = lane + 32 * j;
			acc[j] = acc[j] * corr + (d < D ? p * vs[d] : 0.0f);
		}
		mx = nmx;
	}
	for (int j = 0; j < per; j++) {
		int d = lane + 32 * j;
		if (d < D)
			out[((size_t)t * NH + h) * D + d] = __float2bfloat16(acc[j] / sum);
	}
}

__global__ static void swiglu_kernel(__nv_bfloat16 *h, const float *gate, const float *up, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float g = gate[i];
		h[i] = __float2bfloat16(g / (1.0f + expf(-g)) * up[i]);
	}
}

__global__ static void add_kernel(float *x, const float *y, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] += y[i];
}

// Per row of logits: log p(target) and the entropy (ca_nn_logprob_row).
__global__ static void logprob_kernel(float *logprob, float *entropy, const float *logits, const int *targets,
				      int V)
{
	__shared__ float shared[32];
	const float *z = logits + (size_t)blockIdx.x * V;
	float mx = -INFINITY;
	for (int j = threadIdx.x; j < V; j += blockDim.x)
		mx = fmaxf(mx, z[j]);
	mx = block_max(mx, shared);
	float se = 0.0f, sez = 0.0f;
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float e = expf(z[j] - mx);
		se += e;
		sez += e * z[j];
	}
	se = block_sum(se, shared);
	sez = block_sum(sez, shared);
	if (threadIdx.x == 0) {
		float lse = mx + logf(se);
		int tg = targets[blockIdx.x];
		if (logprob)
			logprob[blockIdx.x] = tg >= 0 && tg < V ? z[tg] - lse : 0.0f;
		if (entropy)
			entropy[blockIdx.x] = lse - sez / se;
	}
}

__global__ static void value_kernel(float *values, const __nv_bfloat16 *x, const __nv_bfloat16 *w,
				    const float *b, int C)
{
	__shared__ float shared[32];
	float s = 0.0f;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		s += __bfloat162float(x[(size_t)blockIdx.x * C + i]) * __bfloat162float(w[i]);
	s = block_sum(s, shared);
	if (threadIdx.x == 0)
		values[blockIdx.x] = s + (b ? b[0] : 0.0f);
}

// y[T,O] (fp32) = x[T,I] (bf16) W[O,I]^T (bf16), fp32 accumulation.
static int linear(cublasHandle_t h, float *y, const __nv_bfloat16 *x, const __nv_bfloat16 *w, int T, int I,
		  int O, char *why)
{
	const float one = 1.0f, zero = 0.0f;
	cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, O, T, I, &one, w, CUDA_R_16BF, I, x,
					 CUDA_R_16BF, I, &zero, y, CUDA_R_32F, O, CUBLAS_COMPUTE_32F,
					 CUBLAS_GEMM_DEFAULT);
	if (st != CUBLAS_STATUS_SUCCESS) {
		set_why(why, "cublasGemmEx failed (%d)", (int)st);
		return -1;
	}
	return 0;
}

static unsigned blocks_for(size_t n, unsigned threads)
{
	return (unsigned)((n + threads - 1) / threads);
}

extern "C" int ca_cuda_model_forward(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets,
				     float *logprobs, float *entropy, float *values, char *why)
{
	const struct ca_model_config *c = &g->cfg;
	int T = b->T, C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
	int NH = c->num_heads, NKV = c->num_kv_heads, D = c->head_dim;
	int QD = NH * D, KD = NKV * D;
	if (D > 256) {
		set_why(why, "head_dim %d above 256 is not supported by the CUDA attention yet", D);
		return -1;
	}
	long total = 0;
	for (int s = 0; s < b->nseq; s++) {
		if (b->seq_len[s] <= 0 || b->seq_len[s] > c->max_positions) {
			set_why(why, "sequence %d has %d tokens (1 to %d allowed)", s, b->seq_len[s], c->max_positions);
			return -1;
		}
		total += b->seq_len[s];
	}
	if (T <= 0 || total != T) {
		set_why(why, "sequence lengths add up to %ld, not %d tokens", total, T);
		return -1;
	}
	for (int t = 0; t < T; t++)
		if (b->tokens[t] < 0 || b->tokens[t] >= V) {
			set_why(why, "token %d at %d is outside the vocabulary of %d", b->tokens[t], t, V);
			return -1;
		}
	int *hstart = (int *)malloc(sizeof(int) * (size_t)T), *hpos = (int *)malloc(sizeof(int) * (size_t)T);
	int *htarget = (int *)malloc(sizeof(int) * (size_t)T);
	for (int s = 0, t = 0; s < b->nseq; s++)
		for (int j = 0; j < b->seq_len[s] && t < T; j++, t++) {
			hstart[t] = t - j;
			hpos[t] = j;
		}
	for (int t = 0; t < T; t++)
		htarget[t] = targets ? targets[t] : -1;
	size_t TC = (size_t)T * C, TF = (size_t)T * F;
	int chunk = T < 256 ? T : 256;
	// Scratch for the batch (freed at the end; a later stage keeps a pool).
	float *x, *y, *q, *k, *v, *gate, *up, *logits, *dlp = NULL, *dent = NULL, *dval = NULL;
	__nv_bfloat16 *xb, *hb;
	int *dtok, *dstart, *dpos, *dtarget;
	size_t wide = (size_t)T * (QD > F ? QD : F);
	CUDA_TRY(cudaMalloc(&x, sizeof(float) * TC));
	CUDA_TRY(cudaMalloc(&y, sizeof(float) * TC));
	CUDA_TRY(cudaMalloc(&q, sizeof(float) * (size_t)T * QD));
	CUDA_TRY(cudaMalloc(&k, sizeof(float) * (size_t)T * KD));
	CUDA_TRY(cudaMalloc(&v, sizeof(float) * (size_t)T * KD));
	CUDA_TRY(cudaMalloc(&gate, sizeof(float) * TF));
	CUDA_TRY(cudaMalloc(&up, sizeof(float) * TF));
	CUDA_TRY(cudaMalloc(&logits, sizeof(float) * (size_t)chunk * V));
	CUDA_TRY(cudaMalloc(&xb, sizeof(__nv_bfloat16) * TC));
	CUDA_TRY(cudaMalloc(&hb, sizeof(__nv_bfloat16) * wide));
	CUDA_TRY(cudaMalloc(&dtok, sizeof(int) * (size_t)T));
	CUDA_TRY(cudaMalloc(&dstart, sizeof(int) * (size_t)T));
	CUDA_TRY(cudaMalloc(&dpos, sizeof(int) * (size_t)T));
	CUDA_TRY(cudaMalloc(&dtarget, sizeof(int) * (size_t)T));
	CUDA_TRY(cudaMalloc(&dlp, sizeof(float) * (size_t)T));
	CUDA_TRY(cudaMalloc(&dent, sizeof(float) * (size_t)T));
	CUDA_TRY(cudaMalloc(&dval, sizeof(float) * (size_t)T));
	CUDA_TRY(cudaMemcpy(dtok, b->tokens, sizeof(int) * (size_t)T, cudaMemcpyHostToDevice));
	CUDA_TRY(cudaMemcpy(dstart, hstart, sizeof(int) * (size_t)T, cudaMemcpyHostToDevice));
	CUDA_TRY(cudaMemcpy(dpos, hpos, sizeof(int) * (size_t)T, cudaMemcpyHostToDevice));
	CUDA_TRY(cudaMemcpy(dtarget, htarget, sizeof(int) * (size_t)T, cudaMemcpyHostToDevice));
	free(hstart);
	free(hpos);
	free(htarget);

	const unsigned nt = 256;
	embed_kernel<<<T, nt>>>(x, g->embed, dtok, C);
	for (int l = 0; l < c->num_layers; l++) {
		const struct layer_weights *W = &g->layers[l];
		rmsnorm_kernel<<<T, nt>>>(xb, x, W->ln1, c->rms_norm_eps, C);
		if (linear(g->blas, q, xb, W->wq, T, C, QD, why) < 0 || linear(g->blas, k, xb, W->wk, T, C, KD, why) < 0 ||
		    linear(g->blas, v, xb, W->wv, T, C, KD, why) < 0)
			return -1;
		if (W->bq) {
			bias_kernel<<<blocks_for((size_t)T * QD, nt), nt>>>(q, W->bq, QD, (size_t)T * QD);
			bias_kernel<<<blocks_for((size_t)T * KD, nt), nt>>>(k, W->bk, KD, (size_t)T * KD);
			bias_kernel<<<blocks_for((size_t)T * KD, nt), nt>>>(v, W->bv, KD, (size_t)T * KD);
		}
		rope_kernel<<<T, nt>>>(q, dpos, g->rope_cos, g->rope_sin, NH, D);
		rope_kernel<<<T, nt>>>(k, dpos, g->rope_cos, g->rope_sin, NKV, D);
		attention_kernel<<<blocks_for((size_t)T * NH * 32, nt), nt>>>(hb, q, k, v, dstart, T, NH, NKV, D);
		if (linear(g->blas, y, hb, W->wo, T, QD, C, why) < 0)
			return -1;
		if (W->bo)
			bias_kernel<<<blocks_for(TC, nt), nt>>>(y, W->bo, C, TC);
		add_kernel<<<blocks_for(TC, nt), nt>>>(x, y, TC);
		rmsnorm_kernel<<<T, nt>>>(xb, x, W->ln2, c->rms_norm_eps, C);
		if (linear(g->blas, gate, xb, W->wgate, T, C, F, why) < 0 || linear(g->blas, up, xb, W->wup, T, C, F, why) < 0)
			return -1;
		swiglu_kernel<<<blocks_for(TF, nt), nt>>>(hb, gate, up, TF);
		if (linear(g->blas, y, hb, W->wdown, T, F, C, why) < 0)
			return -1;
		add_kernel<<<blocks_for(TC, nt), nt>>>(x, y, TC);
	}
	rmsnorm_kernel<<<T, nt>>>(xb, x, g->norm, c->rms_norm_eps, C);
	if (c->critic) {
		value_kernel<<<T, nt>>>(dval, xb, g->score_w, g->score_b, C);
	} else {
		for (int t0 = 0; t0 < T; t0 += chunk) {
			int n = T - t0 < chunk ? T - t0 : chunk;
			if (linear(g->blas, logits, xb + (size_t)t0 * C, g->lm_head, n, C, V, why) < 0)
				return -1;
			logprob_kernel<<<n, 1024>>>(dlp + t0, dent + t0, logits, dtarget + t0, V);
		}
	}
	CUDA_TRY(cudaGetLastError());
	CUDA_TRY(cudaDeviceSynchronize());
	if (logprobs)
		CUDA_TRY(cudaMemcpy(logprobs, dlp, sizeof(float) * (size_t)T, cudaMemcpyDeviceToHost));
	if (entropy)
		CUDA_TRY(cudaMemcpy(entropy, dent, sizeof(float) * (size_t)T, cudaMemcpyDeviceToHost));
	if (values)
		CUDA_TRY(cudaMemcpy(values, dval, sizeof(float) * (size_t)T, cudaMemcpyDeviceToHost));
	void *scratch[] = {x, y, q, k, v, gate, up, logits, xb, hb, dtok, dstart, dpos, dtarget, dlp, dent, dval};
	for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++)
		cudaFree(scratch[i]);
	return 0;
}
