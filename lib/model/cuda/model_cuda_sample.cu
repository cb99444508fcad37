// model_cuda_sample: generation with a key/value cache on the GPU; see model_cuda_sample.h.
// Each kernel's CPU counterpart is named beside it (lib/model/nn.c, lib/model/model_sample.c).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "model.h"
}
#include "cuda/cuda_util.h"
#include "cuda/model_cuda_sample.h"
#include "splitmix.h"

// Matrices and what feeds a matrix product are bf16, or fp32 in exact mode;
// void pointers below point to one or the other.
struct sampler_layer {
	void *wqkv;            // [QD + 2 KD, C]: q, k and v projections stacked, one matrix product
	void *wo;              // [C, QD]
	void *wgu;             // [2 F, C]: gate rows, then up rows
	void *wdown;           // [C, F]
	float *bqkv, *bo;      // NULL without biases
	float *ln1, *ln2;
	float *q_norm, *k_norm;  // Qwen3's per-head norms [head_dim] (else NULL)
	float *kcache, *vcache;  // [slots, max_len, KD], keys after rotary embedding
};

struct ca_cuda_sampler {
	struct ca_model_config cfg;
	cublasHandle_t blas;
	int exact;                 // fp32 matrices and activations
	int debug;                 // CA_CUDA_DEBUG: synchronise and check after every kernel
	cudaStream_t stream;       // everything runs here, so that steps can be captured as graphs
	void *workspace;           // cuBLAS's, fixed so that graphs can hold its matrix products
	cudaGraphExec_t *graphs;   // [n]: the step of n one-token rows, captured on first use
	int use_graphs;
	void *embed, *lm_head;
	float *norm, *rope_cos, *rope_sin;
	struct sampler_layer *layers;
	int slots, max_len, cap;   // cap: tokens one step may run
	// Scratch for one step of up to cap tokens, slots of which want logits.
	float *x, *qkv, *gu, *logits;
	void *xb, *xsel;
	int *dints;                // tok[cap], slot[cap], pos[cap], sel[slots], out_tok[slots]
	float *dfloats;            // temperature[slots], top_p[slots], u[slots], out_lp[slots]
	int *hints;                // pinned mirrors of the above
	float *hfloats;
	long tokens_run, steps;
	void **owned;
	int nowned, capowned;
};

static void *device_alloc(struct ca_cuda_sampler *s, size_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess)
		return NULL;
	if (s->nowned == s->capowned) {
		s->capowned = s->capowned ? 2 * s->capowned : 64;
		s->owned = (void **)realloc(s->owned, sizeof(void *) * (size_t)s->capowned);
	}
	s->owned[s->nowned++] = p;
	return p;
}

// Rows of several fp32 matrices, one after another, as one device matrix
// (bf16, or fp32 in exact mode).
static void *upload_stacked(struct ca_cuda_sampler *s, const float *const *parts, const size_t *sizes, int nparts)
{
	size_t n = 0, elem = s->exact ? sizeof(float) : sizeof(bf16);
	for (int i = 0; i < nparts; i++)
		n += sizes[i];
	char *host = (char *)malloc(elem * (n ? n : 1));
	if (!host)
		return NULL;
	size_t at = 0;
	for (int i = 0; i < nparts; i++)
		for (size_t j = 0; j < sizes[i]; j++, at++)
			if (s->exact)
				((float *)host)[at] = parts[i][j];
			else
				((bf16 *)host)[at] = __float2bfloat16(parts[i][j]);
	void *d = device_alloc(s, elem * n);
	if (d && cudaMemcpy(d, host, elem * n, cudaMemcpyHostToDevice) != cudaSuccess)
		d = NULL;
	free(host);
	return d;
}

static void *upload_matrix(struct ca_cuda_sampler *s, const float *x, size_t n)
{
	return upload_stacked(s, &x, &n, 1);
}

static float *upload_f32(struct ca_cuda_sampler *s, const float *x, size_t n)
{
	float *d = (float *)device_alloc(s, sizeof(float) * n);
	if (d && cudaMemcpy(d, x, sizeof(float) * n, cudaMemcpyHostToDevice) != cudaSuccess)
		d = NULL;
	return d;
}

// The three biases stacked like wqkv; NULL when the model has none.
static float *upload_qkv_bias(struct ca_cuda_sampler *s, const struct ca_model_layer *L, size_t QD, size_t KD)
{
	if (!L->bq)
		return NULL;
	float *host = (float *)malloc(sizeof(float) * (QD + 2 * KD));
	memcpy(host, L->bq, sizeof(float) * QD);
	memcpy(host + QD, L->bk, sizeof(float) * KD);
	memcpy(host + QD + KD, L->bv, sizeof(float) * KD);
	float *d = upload_f32(s, host, QD + 2 * KD);
	free(host);
	return d;
}

extern "C" void ca_cuda_sampler_free(struct ca_cuda_sampler *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nowned; i++)
		cudaFree(s->owned[i]);
	free(s->owned);
	free(s->layers);
	if (s->graphs) {
		for (int i = 0; i <= s->slots; i++)
			if (s->graphs[i])
				cudaGraphExecDestroy(s->graphs[i]);
		free(s->graphs);
	}
	if (s->stream)
		cudaStreamDestroy(s->stream);
	if (s->hints)
		cudaFreeHost(s->hints);
	if (s->hfloats)
		cudaFreeHost(s->hfloats);
	if (s->blas)
		cublasDestroy(s->blas);
	free(s);
}

extern "C" void ca_cuda_sampler_counts(const struct ca_cuda_sampler *s, long *tokens, long *steps)
{
	*tokens = s->tokens_run;
	*steps = s->steps;
}

extern "C" struct ca_cuda_sampler *ca_cuda_sampler_new(const struct ca_model *m, int slots, int max_len, int exact,
							char *why)
{
	const struct ca_model_config *c = &m->cfg;
	if (c->critic) {
		set_why(why, "a critic checkpoint cannot generate");
		return NULL;
	}
	if (c->head_dim > 256 || c->head_dim % 2) {
		set_why(why, "head_dim %d: the CUDA sampler takes even head sizes up to 256", c->head_dim);
		return NULL;
	}
	if (max_len > c->max_positions)
		max_len = c->max_positions;
	if (slots < 1 || max_len < 2) {
		set_why(why, "the sampler needs at least one slot of two positions");
		return NULL;
	}
	struct ca_cuda_sampler *s = (struct ca_cuda_sampler *)calloc(1, sizeof *s);
	s->cfg = *c;
	s->exact = exact;
	s->debug = getenv("CA_CUDA_DEBUG") && *getenv("CA_CUDA_DEBUG") && strcmp(getenv("CA_CUDA_DEBUG"), "0") != 0;
	s->slots = slots;
	s->max_len = max_len;
	// A step runs every decoding slot's token plus prompts; a prompt alone always fits.
	s->cap = slots + (max_len > 2048 ? max_len : 2048);
	if (cublasCreate(&s->blas) != CUBLAS_STATUS_SUCCESS) {
		set_why(why, "cublasCreate failed (no usable GPU?)");
		free(s);
		return NULL;
	}
	const char *graphs = getenv("CA_CUDA_GRAPHS");
	s->use_graphs = !s->debug && !(graphs && strcmp(graphs, "0") == 0);
	s->graphs = (cudaGraphExec_t *)calloc((size_t)slots + 1, sizeof *s->graphs);
	size_t workspace = 32u << 20;
	if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess ||
	    !(s->workspace = device_alloc(s, workspace)) || cublasSetStream(s->blas, s->stream) != CUBLAS_STATUS_SUCCESS ||
	    cublasSetWorkspace(s->blas, s->workspace, workspace) != CUBLAS_STATUS_SUCCESS) {
		set_why(why, "cannot set up a CUDA stream for the sampler");
		ca_cuda_sampler_free(s);
		return NULL;
	}
	size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
	size_t QD = (size_t)c->num_heads * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim;
	size_t cap = (size_t)s->cap, cache = (size_t)slots * (size_t)max_len * KD;
	int ok = 1;
	s->embed = upload_matrix(s, m->embed, V * C);
	s->lm_head = m->lm_head == m->embed ? s->embed : upload_matrix(s, m->lm_head, V * C);
	s->norm = upload_f32(s, m->norm, C);
	ok &= s->embed && s->lm_head && s->norm;
	s->layers = (struct sampler_layer *)calloc((size_t)c->num_layers, sizeof *s->layers);
	for (int l = 0; l < c->num_layers && ok; l++) {
		const struct ca_model_layer *L = &m->layers[l];
		struct sampler_layer *W = &s->layers[l];
		const float *qkv[3] = {L->wq, L->wk, L->wv}, *gu[2] = {L->wgate, L->wup};
		size_t qkv_n[3] = {QD * C, KD * C, KD * C}, gu_n[2] = {F * C, F * C};
		W->wqkv = upload_stacked(s, qkv, qkv_n, 3);
		W->wo = upload_matrix(s, L->wo, C * QD);
		W->wgu = upload_stacked(s, gu, gu_n, 2);
		W->wdown = upload_matrix(s, L->wdown, C * F);
		W->bqkv = upload_qkv_bias(s, L, QD, KD);
		W->bo = L->bo ? upload_f32(s, L->bo, C) : NULL;
		W->ln1 = upload_f32(s, L->ln1, C);
		W->ln2 = upload_f32(s, L->ln2, C);
		if (c->qk_norm) {
			W->q_norm = L->q_norm ? upload_f32(s, L->q_norm, (size_t)c->head_dim) : NULL;
			W->k_norm = L->k_norm ? upload_f32(s, L->k_norm, (size_t)c->head_dim) : NULL;
			ok &= W->q_norm && W->k_norm;
		}
		W->kcache = (float *)device_alloc(s, sizeof(float) * cache);
		W->vcache = (float *)device_alloc(s, sizeof(float) * cache);
		ok &= W->wqkv && W->wo && W->wgu && W->wdown && W->ln1 && W->ln2 && W->kcache && W->vcache;
		ok &= (W->bqkv != NULL) == (L->bq != NULL) && (W->bo != NULL) == (L->bo != NULL);
	}
	size_t rope = (size_t)c->max_positions * (size_t)(c->head_dim / 2);
	if (ok) {
		s->rope_cos = upload_f32(s, m->rope_cos, rope);
		s->rope_sin = upload_f32(s, m->rope_sin, rope);
		size_t wide = C > QD ? C : QD, elem = exact ? sizeof(float) : sizeof(bf16);
		wide = wide > F ? wide : F;
		s->x = (float *)device_alloc(s, sizeof(float) * cap * C);
		s->qkv = (float *)device_alloc(s, sizeof(float) * cap * (QD + 2 * KD));
		s->gu = (float *)device_alloc(s, sizeof(float) * cap * 2 * F);
		s->logits = (float *)device_alloc(s, sizeof(float) * (size_t)slots * V);
		s->xb = device_alloc(s, elem * cap * wide);
		s->xsel = device_alloc(s, elem * (size_t)slots * C);
		s->dints = (int *)device_alloc(s, sizeof(int) * (3 * cap + 2 * (size_t)slots));
		s->dfloats = (float *)device_alloc(s, sizeof(float) * 4 * (size_t)slots);
		ok &= s->rope_cos && s->rope_sin && s->x && s->qkv && s->gu && s->logits && s->xb && s->xsel &&
		      s->dints && s->dfloats;
		ok &= cudaMallocHost((void **)&s->hints, sizeof(int) * (3 * cap + 2 * (size_t)slots)) == cudaSuccess;
		ok &= cudaMallocHost((void **)&s->hfloats, sizeof(float) * 4 * (size_t)slots) == cudaSuccess;
	}
	if (!ok) {
		set_why(why, "cannot set up the sampler on the GPU (%d slots of %d positions; out of memory?)", slots,
			max_len);
		ca_cuda_sampler_free(s);
		return NULL;
	}
	return s;
}

// ---- kernels ----

template <typename W>
__global__ static void embed_kernel(float *x, const W *embed, const int *tokens, int C)
{
	int t = blockIdx.x;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		x[(size_t)t * C + i] = to_float(embed[(size_t)tokens[t] * C + i]);
}

// out row r = w * x[rows ? rows[r] : r] * rstd (ca_nn_rmsnorm_forward).
template <typename W>
__global__ static void rmsnorm_kernel(W *out, const float *x, const int *rows, const float *w, float eps, int C)
{
	__shared__ float shared[32];
	int r = blockIdx.x;
	const float *row = x + (size_t)(rows ? rows[r] : r) * C;
	float ss = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		ss += row[i] * row[i];
	ss = block_sum(ss, shared);
	float rstd = rsqrtf(ss / (float)C + eps);
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		out[(size_t)r * C + i] = from_float<W>(w[i] * (row[i] * rstd));
}

__global__ static void bias_kernel(float *y, const float *bias, int O, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] += bias[i % O];
}

// Qwen3: each head of q and of k (the k heads follow the q heads in a row of
// qkv) through its RMSNorm before the rotation; a warp per head.
__global__ static void qk_norm_kernel(float *qkv, const float *q_norm, const float *k_norm, float eps, int n, int NH,
				      int NKV, int D)
{
	int warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), heads = NH + NKV;
	if (warp >= n * heads)
		return;
	int t = warp / heads, h = warp % heads;
	float *x = qkv + (size_t)t * (NH + 2 * NKV) * D + (size_t)h * D;
	warp_head_rmsnorm(x, NULL, NULL, h < NH ? q_norm : k_norm, eps, D);
}

// Per token: rotate q and k (ca_nn_rope_forward, pairs (i, i + D/2)) and
// store k and v in the token's cache slot at its position.
__global__ static void rope_store_kernel(float *qkv, const int *slot, const int *pos, const float *cos_t,
					 const float *sin_t, float *kcache, float *vcache, int NH, int NKV, int D,
					 int max_len)
{
	int t = blockIdx.x, half = D / 2, QD = NH * D, KD = NKV * D;
	float *row = qkv + (size_t)t * (QD + 2 * KD);
	const float *c = cos_t + (size_t)pos[t] * half, *s = sin_t + (size_t)pos[t] * half;
	size_t at = ((size_t)slot[t] * max_len + pos[t]) * KD;
	for (int k = threadIdx.x; k < (NH + NKV) * half; k += blockDim.x) {
		int h = k / half, i = k % half;
		float *v = row + (size_t)h * D;   // k heads follow the q heads in the row
		float a = v[i], b = v[i + half];
		float ra = a * c[i] - b * s[i], rb = b * c[i] + a * s[i];
		if (h < NH) {
			v[i] = ra;
			v[i + half] = rb;
		} else {
			kcache[at + (size_t)(h - NH) * D + i] = ra;
			kcache[at + (size_t)(h - NH) * D + i + half] = rb;
		}
	}
	for (int k = threadIdx.x; k < KD; k += blockDim.x)
		vcache[at + k] = row[QD + KD + k];
}

// One warp per (token, head) over the cache of the token's slot, positions
// 0..pos: each lane scores its own key of a block of 32, then the block is
// folded into an online softmax; each lane keeps D/32 output dimensions.
#define ATTENTION_WARPS 4
template <typename W>
__global__ static void attention_kernel(W *out, const float *qkv, const float *kcache, const float *vcache,
					const int *slot, const int *pos, int n, int NH, int NKV, int D, int max_len)
{
	__shared__ __align__(16) float qs[ATTENTION_WARPS][256];
	int wib = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int warp = blockIdx.x * ATTENTION_WARPS + wib;
	if (warp >= n * NH)
		return;
	int t = warp / NH, h = warp % NH, g = h / (NH / NKV);
	int QD = NH * D, KD = NKV * D, per = D / 32 + (D % 32 != 0);
	float scale = rsqrtf((float)D);
	const float *q = qkv + (size_t)t * (QD + 2 * KD) + (size_t)h * D;
	for (int d = lane; d < D; d += 32)
		qs[wib][d] = q[d] * scale;
	__syncwarp();
	const float *K = kcache + (size_t)slot[t] * max_len * KD + (size_t)g * D;
	const float *Vc = vcache + (size_t)slot[t] * max_len * KD + (size_t)g * D;
	int len = pos[t] + 1;
	float acc[8];
	for (int j = 0; j < 8; j++)
		acc[j] = 0.0f;
	float mx = -INFINITY, sum = 0.0f;
	for (int base = 0; base < len; base += 32) {
		int key = base + lane;
		float score = -INFINITY;
		if (key < len) {
			const float *kr = K + (size_t)key * KD;
			float dot = 0.0f;
			if (D % 4 == 0) {
				const float4 *k4 = (const float4 *)kr, *q4 = (const float4 *)qs[wib];
				for (int d = 0; d < D / 4; d++) {
					float4 a = q4[d], b = k4[d];
					dot += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
				}
			} else {
				for (int d = 0; d < D; d++)
					dot += qs[wib][d] * kr[d];
			}
			score = dot;
		}
		float nmx = fmaxf(mx, warp_max(score));
		float corr = expf(mx - nmx);
		float p = key < len ? expf(score - nmx) : 0.0f;
		sum = sum * corr + warp_sum(p);
		for (int j = 0; j < per; j++)
			acc[j] *= corr;
		int keys = len - base < 32 ? len - base : 32;
		for (int k = 0; k < keys; k++) {
			float pk = __shfl_sync(0xffffffffu, p, k);
			const float *vr = Vc + (size_t)(base + k) * KD;
			for (int j = 0; j < per; j++) {
				int d = lane + 32 * j;
				if (d < D)
					acc[j] += pk * vr[d];
			}
		}
		mx = nmx;
	}
	for (int j = 0; j < per; j++) {
		int d = lane + 32 * j;
		if (d < D)
			out[((size_t)t * NH + h) * D + d] = from_float<W>(acc[j] / sum);
	}
}

// h = silu(gate) * up over rows of [gate | up] (ca_nn_swiglu_forward).
template <typename W>
__global__ static void swiglu_kernel(W *h, const float *gu, int F, size_t n)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		size_t r = i / F, j = i % F;
		float g = gu[r * 2 * F + j], u = gu[r * 2 * F + F + j];
		h[i] = from_float<W>(g / (1.0f + expf(-g)) * u);
	}
}

// Inclusive prefix sum over the block; every thread gets its own.
__device__ static float block_scan(float x, float *shared)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
	for (int o = 1; o < 32; o <<= 1) {
		float y = __shfl_up_sync(0xffffffffu, x, o);
		if (lane >= o)
			x += y;
	}
	__syncthreads();
	if (lane == 31)
		shared[warp] = x;
	__syncthreads();
	if (warp == 0) {
		float w = lane < nwarps ? shared[lane] : 0.0f;
		for (int o = 1; o < 32; o <<= 1) {
			float y = __shfl_up_sync(0xffffffffu, w, o);
			if (lane >= o)
				w += y;
		}
		if (lane < nwarps)
			shared[lane] = w;
	}
	__syncthreads();
	return x + (warp > 0 ? shared[warp - 1] : 0.0f);
}

// One block per row of logits: pick the next token (lib/model/model_sample.c pick()).
// The row is overwritten with unnormalised probabilities.
__global__ static void sample_kernel(float *logits, int V, const float *temperature, const float *top_p,
				     const float *uniform, int *out_token, float *out_logprob)
{
	__shared__ float shared[32];
	__shared__ int chosen, last_kept;
	float *z = logits + (size_t)blockIdx.x * V;
	float temp = temperature[blockIdx.x];
	float mx = -INFINITY;
	for (int j = threadIdx.x; j < V; j += blockDim.x)
		mx = fmaxf(mx, z[j]);
	mx = block_max(mx, shared);
	if (threadIdx.x == 0) {
		chosen = INT_MAX;
		last_kept = -1;
	}
	if (temp <= 0.0f) {
		// Greedy: the lowest id holding the maximum; its log-prob unscaled.
		float se = 0.0f;
		int best = INT_MAX;
		for (int j = threadIdx.x; j < V; j += blockDim.x) {
			se += expf(z[j] - mx);
			if (z[j] == mx && j < best)
				best = j;
		}
		se = block_sum(se, shared);
		atomicMin(&chosen, best);
		__syncthreads();
		if (threadIdx.x == 0) {
			out_token[blockIdx.x] = chosen != INT_MAX ? chosen : 0;   // NaN logits
			out_logprob[blockIdx.x] = -logf(se);
		}
		return;
	}
	float zmax = mx / temp, sum = 0.0f;
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float p = expf(z[j] / temp - zmax);
		z[j] = p;
		sum += p;
	}
	sum = block_sum(sum, shared);
	// top-p: the largest threshold tau whose tokens (p >= tau) hold top_p of the mass,
	// found by bisection on the bits of tau (positive floats order as their bits).
	float tau = 0.0f, kept = sum;
	if (top_p[blockIdx.x] < 1.0f) {
		float want = top_p[blockIdx.x] * sum;
		unsigned lo = 0, hi = __float_as_uint(1.0f) + 1;
		while (hi - lo > 1) {
			unsigned mid = lo + (hi - lo) / 2;
			float t = __uint_as_float(mid), m = 0.0f;
			for (int j = threadIdx.x; j < V; j += blockDim.x)
				m += z[j] >= t ? z[j] : 0.0f;
			m = block_sum(m, shared);
			if (m >= want)
				lo = mid;
			else
				hi = mid;
		}
		tau = __uint_as_float(lo);
		float m = 0.0f;
		for (int j = threadIdx.x; j < V; j += blockDim.x)
			m += z[j] >= tau ? z[j] : 0.0f;
		kept = block_sum(m, shared);
	}
	// Draw: the first token, in id order, where the running mass passes u * kept.
	int chunk = (V + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * chunk;
	int hi = lo + chunk < V ? lo + chunk : V;
	float part = 0.0f;
	int mine = -1;
	for (int j = lo; j < hi; j++)
		if (z[j] >= tau) {
			part += z[j];
			mine = j;
		}
	float after = block_scan(part, shared), before = after - part;
	float target = uniform[blockIdx.x] * kept;
	if (mine >= 0)
		atomicMax(&last_kept, mine);
	if (part > 0.0f && target >= before && target < after) {
		float acc = before;
		for (int j = lo; j < hi; j++)
			if (z[j] >= tau) {
				acc += z[j];
				if (target < acc) {
					atomicMin(&chosen, j);
					break;
				}
			}
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int tok = chosen != INT_MAX ? chosen : last_kept;   // rounding at the very end
		out_token[blockIdx.x] = tok;
		out_logprob[blockIdx.x] = logf(z[tok] / kept);
	}
}

// y[n, O] (fp32) = beta * y + x[n, I] W[O, I]^T, x and W bf16 (fp32 in exact
// mode, without TF32), fp32 accumulation.
static int linear(const struct ca_cuda_sampler *s, float *y, const void *x, const void *w, int n, int I, int O,
		  float beta, char *why)
{
	const float one = 1.0f;
	cudaDataType type = s->exact ? CUDA_R_32F : CUDA_R_16BF;
	cublasStatus_t st = cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, O, n, I, &one, w, type, I, x, type, I,
					 &beta, y, CUDA_R_32F, O,
					 s->exact ? CUBLAS_COMPUTE_32F_PEDANTIC : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (st != CUBLAS_STATUS_SUCCESS) {
		set_why(why, "cublasGemmEx failed (%d)", (int)st);
		return -1;
	}
	return 0;
}

// With CA_CUDA_DEBUG set, name the kernel that failed (at the cost of a synchronisation each).
#define CHECK(name, layer)                                                                              \
	do {                                                                                            \
		cudaError_t e_ = s->debug ? cudaStreamSynchronize(s->stream) : cudaSuccess;            \
		if (e_ == cudaSuccess && s->debug)                                                      \
			e_ = cudaGetLastError();                                                        \
		if (e_ != cudaSuccess) {                                                                \
			set_why(why, "%s (layer %d, %d tokens): %s", name, layer, n, cudaGetErrorString(e_)); \
			return -1;                                                                      \
		}                                                                                       \
	} while (0)

// One step: n tokens (tok, slot, pos already on the device) through the
// model, their keys and values into the cache; then the next token for the
// nsel rows sel.
template <typename W>
static int run_step_as(struct ca_cuda_sampler *s, int n, int nsel, char *why)
{
	const struct ca_model_config *c = &s->cfg;
	int C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
	int NH = c->num_heads, NKV = c->num_kv_heads, D = c->head_dim;
	int QD = NH * D, KD = NKV * D, QKV = QD + 2 * KD;
	int *tok = s->dints, *slot = tok + s->cap, *pos = slot + s->cap, *sel = pos + s->cap, *out_tok = sel + s->slots;
	float *temp = s->dfloats, *top_p = temp + s->slots, *u = top_p + s->slots, *out_lp = u + s->slots;
	size_t nC = (size_t)n * C;
	const unsigned nt = 256;
	W *xb = (W *)s->xb, *xsel = (W *)s->xsel;
	cudaStream_t st = s->stream;
	embed_kernel<W><<<n, nt, 0, st>>>(s->x, (const W *)s->embed, tok, C);
	CHECK("embed", -1);
	for (int l = 0; l < c->num_layers; l++) {
		const struct sampler_layer *L = &s->layers[l];
		rmsnorm_kernel<W><<<n, nt, 0, st>>>(xb, s->x, NULL, L->ln1, c->rms_norm_eps, C);
		CHECK("rmsnorm", l);
		if (linear(s, s->qkv, xb, L->wqkv, n, C, QKV, 0.0f, why) < 0)
			return -1;
		CHECK("qkv matmul", l);
		if (L->bqkv)
			bias_kernel<<<blocks_for((size_t)n * QKV, nt), nt, 0, st>>>(s->qkv, L->bqkv, QKV, (size_t)n * QKV);
		if (L->q_norm) {
			qk_norm_kernel<<<blocks_for((size_t)n * (NH + NKV), nt / 32), nt, 0, st>>>(
				s->qkv, L->q_norm, L->k_norm, c->rms_norm_eps, n, NH, NKV, D);
			CHECK("q/k norm", l);
		}
		rope_store_kernel<<<n, nt, 0, st>>>(s->qkv, slot, pos, s->rope_cos, s->rope_sin, L->kcache, L->vcache, NH, NKV,
					     D, s->max_len);
		CHECK("rope and cache store", l);
		attention_kernel<W><<<blocks_for((size_t)n * NH, ATTENTION_WARPS), 32 * ATTENTION_WARPS, 0, st>>>(
			xb, s->qkv, L->kcache, L->vcache, slot, pos, n, NH, NKV, D, s->max_len);
		CHECK("attention", l);
		if (linear(s, s->x, xb, L->wo, n, QD, C, 1.0f, why) < 0)
			return -1;
		if (L->bo)
			bias_kernel<<<blocks_for(nC, nt), nt, 0, st>>>(s->x, L->bo, C, nC);
		rmsnorm_kernel<W><<<n, nt, 0, st>>>(xb, s->x, NULL, L->ln2, c->rms_norm_eps, C);
		CHECK("output matmul and rmsnorm", l);
		if (linear(s, s->gu, xb, L->wgu, n, C, 2 * F, 0.0f, why) < 0)
			return -1;
		swiglu_kernel<W><<<blocks_for((size_t)n * F, nt), nt, 0, st>>>(xb, s->gu, F, (size_t)n * F);
		CHECK("gate/up matmul and swiglu", l);
		if (linear(s, s->x, xb, L->wdown, n, F, C, 1.0f, why) < 0)
			return -1;
		CHECK("down matmul", l);
	}
	rmsnorm_kernel<W><<<nsel, nt, 0, st>>>(xsel, s->x, sel, s->norm, c->rms_norm_eps, C);
	if (linear(s, s->logits, xsel, s->lm_head, nsel, C, V, 0.0f, why) < 0)
		return -1;
	CHECK("final norm and lm head", -1);
	sample_kernel<<<nsel, 1024, 0, st>>>(s->logits, V, temp, top_p, u, out_tok, out_lp);
	CHECK("sample", -1);
	CUDA_TRY(cudaGetLastError());
	s->tokens_run += n;
	s->steps++;
	return 0;
}

static int launch_step(struct ca_cuda_sampler *s, int n, int nsel, char *why)
{
	return s->exact ? run_step_as<float>(s, n, nsel, why) : run_step_as<bf16>(s, n, nsel, why);
}

// A step of n one-token rows (decoding) is the same launches every time but
// for what the index arrays hold, so it is captured once as a CUDA graph and
// replayed: one launch instead of a few hundred. CA_CUDA_GRAPHS=0 (or
// CA_CUDA_DEBUG) launches them one by one instead.
static int run_step(struct ca_cuda_sampler *s, int n, int nsel, int one_token_rows, char *why)
{
	if (!s->use_graphs || !one_token_rows)
		return launch_step(s, n, nsel, why);
	if (!s->graphs[n]) {
		// A capture that fails (a cuBLAS without graph support, say) turns graphs off for good.
		cudaGraph_t graph = NULL;
		why[0] = 0;
		int rc = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess ? 0 : -1;
		if (rc == 0) {
			rc = launch_step(s, n, nsel, why);
			if (cudaStreamEndCapture(s->stream, &graph) != cudaSuccess)
				rc = -1;
		}
		if (rc == 0 && cudaGraphInstantiate(&s->graphs[n], graph, 0) != cudaSuccess) {
			s->graphs[n] = NULL;
			rc = -1;
		}
		if (graph)
			cudaGraphDestroy(graph);
		if (rc < 0) {
			cudaGetLastError();   // clear the capture's error
			s->use_graphs = 0;
			fprintf(stderr, "model_cuda_sample: CUDA graph capture failed (%s); launching kernels one by one\n",
				why[0] ? why : "no reason given");
			return launch_step(s, n, nsel, why);
		}
		s->tokens_run -= n;   // counted again below, when it runs
		s->steps--;
	}
	CUDA_TRY(cudaGraphLaunch(s->graphs[n], s->stream));
	s->tokens_run += n;
	s->steps++;
	return 0;
}

struct slot_state {
	int req;        // request index, -1 when free
	int cached;     // positions already in the cache
	int prefill;    // the prompt is still to run
	int max_new;
	uint64_t rng;
};

// Checks a request; returns how many tokens it may generate, or -1 with its why set.
static int request_budget(const struct ca_cuda_sampler *s, struct ca_sample_request *r)
{
	int V = s->cfg.vocab_size;
	if (r->n <= 0) {
		set_why(r->why, "empty prompt");
		return -1;
	}
	for (int i = 0; i < r->n; i++)
		if (r->prompt[i] < 0 || r->prompt[i] >= V) {
			set_why(r->why, "prompt token %d is outside the vocabulary of %d", r->prompt[i], V);
			return -1;
		}
	int room = s->max_len - r->n;
	if (room < 0 || (room == 0 && r->params.max_tokens > 0)) {
		set_why(r->why, "prompt of %d tokens leaves no room in the sampler's %d positions", r->n, s->max_len);
		return -1;
	}
	return r->params.max_tokens < room ? r->params.max_tokens : room;
}

extern "C" int ca_cuda_sampler_generate(struct ca_cuda_sampler *s, struct ca_sample_request *reqs, int nreq,
					char *why)
{
	struct slot_state *st = (struct slot_state *)calloc((size_t)s->slots, sizeof *st);
	int *order = (int *)malloc(sizeof(int) * (size_t)s->slots);
	for (int i = 0; i < s->slots; i++)
		st[i].req = -1;
	int next = 0, rc = 0;
	for (;;) {
		// Admit requests into free slots while their prompts fit in this step.
		int ntok = 0;
		for (int i = 0; i < s->slots; i++)
			if (st[i].req >= 0)
				ntok += st[i].prefill ? reqs[st[i].req].n : 1;
		for (int i = 0; i < s->slots && next < nreq; i++) {
			if (st[i].req >= 0)
				continue;
			struct ca_sample_request *r = &reqs[next];
			r->why[0] = 0;
			int budget = request_budget(s, r);
			if (budget <= 0) {
				r->produced = budget;   // -1: refused; 0: nothing wanted
				next++;
				i--;
				continue;
			}
			if (ntok + r->n > s->cap)
				break;
			st[i] = (struct slot_state){.req = next, .cached = 0, .prefill = 1, .max_new = budget,
						    .rng = r->params.seed};
			r->produced = 0;
			ntok += r->n;
			next++;
		}
		// The step: prompts whole, one token for each decoding slot.
		int *tok = s->hints, *slot = tok + s->cap, *pos = slot + s->cap, *sel = pos + s->cap;
		float *temp = s->hfloats, *top_p = temp + s->slots, *u = top_p + s->slots;
		int n = 0, nsel = 0;
		for (int i = 0; i < s->slots; i++) {
			struct slot_state *q = &st[i];
			if (q->req < 0)
				continue;
			struct ca_sample_request *r = &reqs[q->req];
			if (q->prefill) {
				for (int j = 0; j < r->n; j++, n++) {
					tok[n] = r->prompt[j];
					slot[n] = i;
					pos[n] = j;
				}
				q->cached = r->n;
				q->prefill = 0;
			} else {
				tok[n] = r->out_tokens[r->produced - 1];
				slot[n] = i;
				pos[n++] = q->cached++;
			}
			sel[nsel] = n - 1;
			temp[nsel] = (float)r->params.temperature;
			top_p[nsel] = (float)r->params.top_p;
			u[nsel] = r->params.temperature > 0 ? (float)ca_splitmix_unit(&q->rng) : 0.0f;
			order[nsel++] = i;
		}
		if (nsel == 0)
			break;
		// Upload the index arrays (from pinned memory, on the sampler's stream).
		int *dtok = s->dints, *dslot = dtok + s->cap, *dpos = dslot + s->cap, *dsel = dpos + s->cap;
		cudaStream_t stream = s->stream;
		if (cudaMemcpyAsync(dtok, tok, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice, stream) != cudaSuccess ||
		    cudaMemcpyAsync(dslot, slot, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice, stream) != cudaSuccess ||
		    cudaMemcpyAsync(dpos, pos, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice, stream) != cudaSuccess ||
		    cudaMemcpyAsync(dsel, sel, sizeof(int) * (size_t)nsel, cudaMemcpyHostToDevice, stream) != cudaSuccess ||
		    cudaMemcpyAsync(s->dfloats, s->hfloats, sizeof(float) * 3 * (size_t)s->slots, cudaMemcpyHostToDevice,
				    stream) != cudaSuccess) {
			set_why(why, "copying a step to the GPU failed: %s", cudaGetErrorString(cudaGetLastError()));
			rc = -1;
			break;
		}
		if (run_step(s, n, nsel, n == nsel, why) < 0) {
			rc = -1;
			break;
		}
		int *got_tok = sel + s->slots;
		float *got_lp = s->hfloats + 3 * s->slots;
		if (cudaMemcpyAsync(got_tok, dsel + s->slots, sizeof(int) * (size_t)nsel, cudaMemcpyDeviceToHost, stream) !=
			    cudaSuccess ||
		    cudaMemcpyAsync(got_lp, s->dfloats + 3 * s->slots, sizeof(float) * (size_t)nsel, cudaMemcpyDeviceToHost,
				    stream) != cudaSuccess ||
		    cudaStreamSynchronize(stream) != cudaSuccess) {
			set_why(why, "a sampling step failed on the GPU: %s", cudaGetErrorString(cudaGetLastError()));
			rc = -1;
			break;
		}
		for (int k = 0; k < nsel; k++) {
			struct slot_state *q = &st[order[k]];
			struct ca_sample_request *r = &reqs[q->req];
			int t = got_tok[k];
			r->out_tokens[r->produced] = t;
			if (r->out_logprobs)
				r->out_logprobs[r->produced] = got_lp[k];
			r->produced++;
			int stop = r->produced >= q->max_new;
			for (int j = 0; j < r->params.nstop_tokens && !stop; j++)
				stop = t == r->params.stop_tokens[j];
			if (!stop && r->stop_fn)
				stop = r->stop_fn(r->out_tokens, r->produced, r->stop_ctx);
			if (stop)
				q->req = -1;
		}
	}
	if (rc < 0)
		for (int i = 0; i < nreq; i++)
			reqs[i].produced = -1;
	free(st);
	free(order);
	return rc;
}
