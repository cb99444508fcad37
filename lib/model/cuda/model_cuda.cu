// model_cuda: the policy engine's model on the GPU: weights, forward,
// backward and AdamW; see model_cuda.h. The layers' kernels are in
// nn_cuda.cu and attention_cuda.cu; this file is the CUDA twin of
// lib/model/model_forward.c and the optimizer of lib/model/model.c.
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_util.h"
#include "cuda/matmul_lt.h"
#include "cuda/model_cuda_impl.h"

// ---- device memory with a high-water mark ----

struct allocation {
	void *p;
	size_t bytes;
};
static struct allocation *allocations;
static size_t nallocations, capallocations, bytes_now, bytes_peak;

void *ca_cuda_alloc(size_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess)
		return NULL;
	if (nallocations == capallocations) {
		size_t cap = capallocations ? 2 * capallocations : 256;
		struct allocation *a = (struct allocation *)realloc(allocations, sizeof *a * cap);
		if (!a) {
			cudaFree(p);
			return NULL;
		}
		allocations = a;
		capallocations = cap;
	}
	allocations[nallocations++] = (struct allocation){p, bytes};
	bytes_now += bytes;
	if (bytes_now > bytes_peak)
		bytes_peak = bytes_now;
	return p;
}

void ca_cuda_release(void *p)
{
	if (!p)
		return;
	for (size_t i = nallocations; i-- > 0;)
		if (allocations[i].p == p) {
			bytes_now -= allocations[i].bytes;
			allocations[i] = allocations[--nallocations];
			break;
		}
	cudaFree(p);
}

extern "C" size_t ca_cuda_model_peak_bytes(void)
{
	return bytes_peak;
}

// ---- where the time goes (CA_CUDA_PROFILE=1: synchronises between phases, prints at free) ----

enum { PH_NONE, PH_MATMUL_F, PH_ATTN_F, PH_HEAD_F, PH_OTHER_F, PH_MATMUL_B, PH_ATTN_B, PH_HEAD_B, PH_OTHER_B,
       PH_ADAMW, NPHASES };
static const char *const phase_names[NPHASES] = {"none", "matmul_fwd", "attention_fwd", "head_fwd", "other_fwd",
	"matmul_bwd", "attention_bwd", "head_bwd", "other_bwd", "adamw"};
static int profiling = -1, phase_now, phase_dir;  // phase_dir: 0 forward, 4 backward
#define PH(name) phase(PH_##name##_F + phase_dir)
static double phase_seconds[NPHASES], phase_since;
static int profile_steps;  // training forwards seen; the first (warm-up: module loading, cuBLAS heuristics) is left out
static void gemm_report(int steps);

static double wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void phase(int next)
{
	if (profiling < 0) {
		const char *e = getenv("CA_CUDA_PROFILE");
		profiling = e && *e && strcmp(e, "0") != 0 ? (strcmp(e, "2") == 0 ? 2 : 1) : 0;
	}
	if (!profiling || next == phase_now)
		return;
	cudaDeviceSynchronize();
	double t = wall();
	if (phase_now != PH_NONE)
		phase_seconds[phase_now] += t - phase_since;
	phase_since = t;
	phase_now = next;
}

// ---- activations ----

struct layer_acts {
	float *x, *rstd1, *q, *k, *v, *lse, *xmid, *rstd2;
	float *qpre, *kpre, *rstdq, *rstdk;  // Qwen3: q and k before their per-head norms, its statistics
	bf16 *ln1, *att, *ln2, *gu, *h;  // gu: rows of [gate | up], one matmul; h = silu(gate) * up
	bf16 *qkv16;                     // mma attention: q, k, v as bf16 ([T, QD], then [T, KD] twice)
};

struct cuda_acts {
	int cap_T, T, train, nkept, chunk, recompute;
	int keep_logits, logits_ready;  // logits of every chunk kept from the forward for the backward
	int mma;                        // attention on attention_mma.cu's kernels, which read bf16
	struct layer_acts *layer;
	float **xin;   // recompute: each layer's input [T, C]; the rest is rebuilt in the backward
	float *xfinal, *rstdf, *y, *logits;
	bf16 *lnf, *dlogits, *attb;  // attb: bf16 copies of attention's inputs
	int *tokens, *targets, *seq_start, *seq_end, *pos;
	int *tile_order;  // the attention's tiles of 64, most work first (tile_order_fill)
	float *lp, *ent, *hlse, *val, *dlp, *dent, *dval;  // hlse: the head's log-sum-exp per token
	// backward scratch (train only)
	float *dx, *dh, *dln, *datt, *dq, *dk, *dv, *delta, *dkh, *dvh;
	float *dqpre, *dkpre;  // Qwen3: the gradients before the q/k norms
	bf16 *dxb, *dgu, *dqb, *dkb, *dvb;
	void **owned;
	int nowned;
};

static void acts_free(struct cuda_acts *a)
{
	if (!a)
		return;
	for (int i = 0; i < a->nowned; i++)
		ca_cuda_release(a->owned[i]);
	free(a->owned);
	free(a->layer);
	free(a->xin);
	free(a);
}

static void *acts_alloc1(struct cuda_acts *a, size_t bytes, int *ok)
{
	void *p = ca_cuda_alloc(bytes);
	if (!p) {
		*ok = 0;
		return NULL;
	}
	a->owned[a->nowned++] = p;
	return p;
}

// Tokens per chunk of the language-model head: about 512M logits at most.
static int head_chunk(int T, int V)
{
	long n = (1L << 29) / V;
	if (n < 16)
		n = 16;
	return (int)(n < T ? n : T);
}

// Bytes of the activations one layer keeps for the backward.
static size_t layer_bytes(const struct ca_model_config *c, int T)
{
	size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size, NH = (size_t)c->num_heads;
	size_t QD = NH * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim;
	size_t qk_norm = c->qk_norm ? 4 * (QD + KD + NH + (size_t)c->num_kv_heads) : 0;
	return (size_t)T * (4 * (2 * C + QD + 2 * KD + NH + 2) + 2 * (2 * C + 2 * QD + 2 * KD + 3 * F) + qk_norm);
}

/*
 * Activation recomputation: CA_CUDA_RECOMPUTE=1 always, 0 never; unset,
 * when the model asks for it (m->recompute) or when keeping every layer
 * would take more than 70% of the free device memory.
 */
static int want_recompute(const struct ca_model_config *c, int T, int model_asks)
{
	const char *e = getenv("CA_CUDA_RECOMPUTE");
	if (e && *e)
		return strcmp(e, "0") != 0;
	if (model_asks)
		return 1;
	size_t free_bytes = 0, total = 0;
	if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess)
		return 0;
	return (double)layer_bytes(c, T) * c->num_layers > 0.7 * (double)free_bytes;
}

/*
 * Keeping the forward's logits spares the backward one head matmul per
 * chunk: CA_CUDA_KEEP_LOGITS=1 always when training, 0 never; unset, when
 * they take less than a quarter of the free device memory.
 */
static int want_kept_logits(size_t bytes)
{
	const char *e = getenv("CA_CUDA_KEEP_LOGITS");
	if (e && *e)
		return strcmp(e, "0") != 0;
	size_t free_bytes = 0, total = 0;
	if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess)
		return 0;
	return (double)bytes < 0.25 * (double)free_bytes;
}

static struct cuda_acts *acts_new(const struct ca_model_config *c, int T, int train, int recompute)
{
	struct cuda_acts *a = (struct cuda_acts *)calloc(1, sizeof *a);
	if (!a)
		return NULL;
	size_t t = (size_t)T, C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size, V = (size_t)c->vocab_size;
	size_t NH = (size_t)c->num_heads, QD = NH * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim;
	a->cap_T = T;
	a->mma = strcmp(nn_cuda_attention_kind(c->head_dim), "mma") == 0;
	a->train = train;
	a->recompute = train && recompute;
	a->nkept = train && !a->recompute ? c->num_layers : 1;
	a->chunk = head_chunk(T, c->vocab_size);
	a->layer = (struct layer_acts *)calloc((size_t)a->nkept, sizeof *a->layer);
	a->owned = (void **)calloc((size_t)(20 * a->nkept + 64 + c->num_layers), sizeof(void *));
	a->xin = (float **)calloc((size_t)c->num_layers, sizeof(float *));
	if (!a->layer || !a->owned || !a->xin) {
		acts_free(a);
		return NULL;
	}
	int ok = 1;
#define F32(n) (float *)acts_alloc1(a, sizeof(float) * (n), &ok)
#define B16(n) (bf16 *)acts_alloc1(a, sizeof(bf16) * (n), &ok)
#define I32(n) (int *)acts_alloc1(a, sizeof(int) * (n), &ok)
	for (int l = 0; l < a->nkept && ok; l++) {
		struct layer_acts *L = &a->layer[l];
		L->x = F32(t * C); L->rstd1 = F32(t); L->q = F32(t * QD); L->k = F32(t * KD); L->v = F32(t * KD);
		L->lse = F32(t * NH); L->xmid = F32(t * C); L->rstd2 = F32(t);
		L->ln1 = B16(t * C); L->att = B16(t * QD); L->ln2 = B16(t * C); L->gu = B16(t * 2 * F);
		L->h = B16(t * F);
		L->qkv16 = a->mma ? B16(t * (QD + 2 * KD)) : NULL;
		if (c->qk_norm) {
			L->qpre = F32(t * QD); L->kpre = F32(t * KD);
			L->rstdq = F32(t * NH); L->rstdk = F32(t * (size_t)c->num_kv_heads);
		}
	}
	for (int l = 0; a->recompute && l < c->num_layers && ok; l++)
		a->xin[l] = F32(t * C);
	a->xfinal = F32(t * C); a->rstdf = F32(t); a->y = F32(t * C); a->lnf = B16(t * C);
	a->keep_logits = train && !a->recompute && !c->critic && want_kept_logits(t * V * sizeof(float));
	a->logits = F32(a->keep_logits ? t * V : (size_t)a->chunk * V);
	a->attb = B16(t * (2 * QD + 2 * KD));
	a->tile_order = I32(2 * ((t + 63) / 64));
	a->tokens = I32(t); a->targets = I32(t); a->seq_start = I32(t); a->seq_end = I32(t); a->pos = I32(t);
	a->lp = F32(t); a->ent = F32(t); a->hlse = F32(t); a->val = F32(t); a->dlp = F32(t); a->dent = F32(t); a->dval = F32(t);
	if (train && ok) {
		a->dlogits = B16((size_t)a->chunk * V);
		a->dx = F32(t * C); a->dh = F32(t * F); a->dln = F32(t * C); a->datt = F32(t * QD);
		size_t tpad = (t + 63) / 64 * 64;  // the tensor-core attention writes whole tiles
		a->dq = F32(tpad * QD); a->dk = F32(t * KD); a->dv = F32(t * KD); a->delta = F32(t * NH);
		if (strcmp(nn_cuda_attention_kind(c->head_dim), "wmma") == 0) {
			a->dkh = F32(tpad * QD);
			a->dvh = F32(tpad * QD);
		}
		a->dxb = B16(t * (C > QD ? C : QD)); a->dgu = B16(t * 2 * F);
		a->dqb = B16(t * QD); a->dkb = B16(t * KD); a->dvb = B16(t * KD);
		if (c->qk_norm) {
			a->dqpre = F32(t * QD);
			a->dkpre = F32(t * KD);
		}
	}
#undef F32
#undef B16
#undef I32
	if (!ok) {
		acts_free(a);
		return NULL;
	}
	return a;
}

// ---- weights ----

extern "C" void ca_cuda_model_free(struct ca_cuda_model *g)
{
	if (!g)
		return;
	if (profiling > 0) {
		int n = profile_steps > 1 ? profile_steps - 1 : 1;
		fprintf(stderr, "model_cuda: seconds per step by phase (mean of %d step%s%s):", n, n > 1 ? "s" : "",
			profile_steps > 1 ? " after the first" : "");
		for (int i = 1; i < NPHASES; i++)
			fprintf(stderr, " %s %.4f", phase_names[i], phase_seconds[i] / n);
		fprintf(stderr, "\n");
		gemm_report(n);
	}
	acts_free(g->acts);
	void *bufs[] = {g->params, g->params16, g->grad, g->adam_m, g->adam_v, g->rope_cos, g->rope_sin, g->partial};
	for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
		ca_cuda_release(bufs[i]);
	free(g->layers);
	matmul_lt_free(g->lt);
	if (g->blas)
		cublasDestroy(g->blas);
	ca_cuda_release(g->blas_workspace);
	free(g);
}

static size_t offset_of(const struct ca_model *m, const float *p)
{
	return p ? (size_t)(p - m->params) : SIZE_MAX;
}

static float *view32(struct ca_cuda_model *g, size_t off)
{
	return off == SIZE_MAX ? NULL : g->params + off;
}

static bf16 *view16(struct ca_cuda_model *g, size_t off)
{
	return off == SIZE_MAX ? NULL : g->params16 + off;
}

static float *G(struct ca_cuda_model *g, size_t off)
{
	return off == SIZE_MAX ? NULL : g->grad + off;
}

static int upload_state(struct ca_cuda_model *g, const struct ca_model *m, char *why)
{
	size_t n = g->nparams;
	CUDA_TRY(cudaMemcpy(g->params, m->params, sizeof(float) * n, cudaMemcpyHostToDevice));
	nn_cuda_to_bf16(g->params16, g->params, n);
	if (m->adam_m && m->adam_v) {
		if (!g->adam_m && !(g->adam_m = (float *)ca_cuda_alloc(sizeof(float) * n)))
			return set_why(why, "no GPU memory for the AdamW state"), -1;
		if (!g->adam_v && !(g->adam_v = (float *)ca_cuda_alloc(sizeof(float) * n)))
			return set_why(why, "no GPU memory for the AdamW state"), -1;
		CUDA_TRY(cudaMemcpy(g->adam_m, m->adam_m, sizeof(float) * n, cudaMemcpyHostToDevice));
		CUDA_TRY(cudaMemcpy(g->adam_v, m->adam_v, sizeof(float) * n, cudaMemcpyHostToDevice));
		g->adam_step = m->adam_step;
	}
	CUDA_TRY(cudaGetLastError());
	CUDA_TRY(cudaDeviceSynchronize());
	return 0;
}

extern "C" struct ca_cuda_model *ca_cuda_model_upload(const struct ca_model *m, char *why)
{
	const struct ca_model_config *c = &m->cfg;
	int d = c->head_dim;
	if (d != 16 && d != 32 && d != 64 && d != 128 && d != 256) {
		set_why(why, "head_dim %d: the CUDA attention is built for 16, 32, 64, 128 and 256", c->head_dim);
		return NULL;
	}
	struct ca_cuda_model *g = (struct ca_cuda_model *)calloc(1, sizeof *g);
	if (!g) {
		set_why(why, "out of memory");
		return NULL;
	}
	g->cfg = *c;
	if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
		set_why(why, "cublasCreate failed (no usable GPU?)");
		free(g);
		return NULL;
	}
	// cuBLAS's own default workspace is smaller than what its best Hopper kernels use.
	const size_t workspace = (size_t)32 << 20;
	if ((g->blas_workspace = ca_cuda_alloc(workspace)) &&
	    cublasSetWorkspace(g->blas, g->blas_workspace, workspace) != CUBLAS_STATUS_SUCCESS) {
		ca_cuda_release(g->blas_workspace);
		g->blas_workspace = NULL;
	}
	const char *tune = getenv("CA_CUDA_GEMM_TUNE");
	if (tune && strcmp(tune, "1") == 0)
		g->lt = matmul_lt_new(g->blas_workspace, g->blas_workspace ? workspace : 0);
	g->nparams = m->nparams;
	g->recompute = m->recompute;
	size_t rope = (size_t)c->max_positions * (size_t)(c->head_dim / 2);
	g->params = (float *)ca_cuda_alloc(sizeof(float) * g->nparams);
	g->params16 = (bf16 *)ca_cuda_alloc(sizeof(bf16) * g->nparams);
	g->rope_cos = (float *)ca_cuda_alloc(sizeof(float) * rope);
	g->rope_sin = (float *)ca_cuda_alloc(sizeof(float) * rope);
	g->partial = (double *)ca_cuda_alloc(sizeof(double) * NN_CUDA_SUMSQ_BLOCKS);
	g->layers = (struct layer_weights *)calloc((size_t)c->num_layers, sizeof *g->layers);
	if (!g->params || !g->params16 || !g->rope_cos || !g->rope_sin || !g->partial || !g->layers) {
		set_why(why, "cannot copy the weights to the GPU (out of memory?)");
		ca_cuda_model_free(g);
		return NULL;
	}
	g->off_embed = offset_of(m, m->embed);
	g->off_lm_head = offset_of(m, m->lm_head);
	g->off_norm = offset_of(m, m->norm);
	g->off_score_w = offset_of(m, m->score_w);
	g->off_score_b = offset_of(m, m->score_b);
	g->embed = view16(g, g->off_embed);
	g->lm_head = c->critic ? NULL : view16(g, g->off_lm_head);
	g->score_w = view16(g, g->off_score_w);
	g->score_w32 = view32(g, g->off_score_w);
	g->norm = view32(g, g->off_norm);
	g->score_b = view32(g, g->off_score_b);
	for (int l = 0; l < c->num_layers; l++) {
		const struct ca_model_layer *L = &m->layers[l];
		struct layer_weights *W = &g->layers[l];
		const float *p[15] = {L->wq, L->wk, L->wv, L->wo, L->wgate, L->wup, L->wdown,
				      L->bq, L->bk, L->bv, L->bo, L->ln1, L->ln2, L->q_norm, L->k_norm};
		for (int i = 0; i < 15; i++)
			W->off[i] = offset_of(m, p[i]);
		if (W->off[5] != W->off[4] + (size_t)c->intermediate_size * c->hidden_size) {
			set_why(why, "layer %d: up_proj does not follow gate_proj in the parameters", l);
			ca_cuda_model_free(g);
			return NULL;
		}
		W->wq = view16(g, W->off[0]); W->wk = view16(g, W->off[1]); W->wv = view16(g, W->off[2]);
		W->wo = view16(g, W->off[3]); W->wgate = view16(g, W->off[4]); W->wup = view16(g, W->off[5]);
		W->wdown = view16(g, W->off[6]);
		W->bq = view32(g, W->off[7]); W->bk = view32(g, W->off[8]); W->bv = view32(g, W->off[9]);
		W->bo = view32(g, W->off[10]); W->ln1 = view32(g, W->off[11]); W->ln2 = view32(g, W->off[12]);
		W->q_norm = view32(g, W->off[13]); W->k_norm = view32(g, W->off[14]);
		if (c->qk_norm && (!W->q_norm || !W->k_norm)) {
			set_why(why, "layer %d: a %s model without q_norm and k_norm weights", l, c->model_type);
			ca_cuda_model_free(g);
			return NULL;
		}
	}
	if (cudaMemcpy(g->rope_cos, m->rope_cos, sizeof(float) * rope, cudaMemcpyHostToDevice) != cudaSuccess ||
	    cudaMemcpy(g->rope_sin, m->rope_sin, sizeof(float) * rope, cudaMemcpyHostToDevice) != cudaSuccess) {
		set_why(why, "cannot copy the rotary tables to the GPU");
		ca_cuda_model_free(g);
		return NULL;
	}
	if (upload_state(g, m, why) < 0) {
		ca_cuda_model_free(g);
		return NULL;
	}
	return g;
}

extern "C" int ca_cuda_model_download(struct ca_cuda_model *g, struct ca_model *m, int grad, char *why)
{
	size_t n = g->nparams, bytes = sizeof(float) * n;
	if (m->nparams != n)
		return set_why(why, "the model has %zu parameters, the GPU copy %zu", m->nparams, n), -1;
	CUDA_TRY(cudaDeviceSynchronize());
	CUDA_TRY(cudaMemcpy(m->params, g->params, bytes, cudaMemcpyDeviceToHost));
	if (g->adam_m) {
		if (!m->adam_m)
			m->adam_m = (float *)malloc(bytes);
		if (!m->adam_v)
			m->adam_v = (float *)malloc(bytes);
		if (!m->adam_m || !m->adam_v)
			return set_why(why, "out of memory"), -1;
		CUDA_TRY(cudaMemcpy(m->adam_m, g->adam_m, bytes, cudaMemcpyDeviceToHost));
		CUDA_TRY(cudaMemcpy(m->adam_v, g->adam_v, bytes, cudaMemcpyDeviceToHost));
		m->adam_step = g->adam_step;
	}
	if (grad && g->grad) {
		if (!m->grad && !(m->grad = (float *)malloc(bytes)))
			return set_why(why, "out of memory"), -1;
		CUDA_TRY(cudaMemcpy(m->grad, g->grad, bytes, cudaMemcpyDeviceToHost));
	}
	return 0;
}

// ---- matrix products (row-major [T, features] activations, [out, in] weights) ----

// CA_CUDA_PROFILE=2: every matmul timed with events, by shape (m, n, k, transposes, output type, beta).
struct gemm_shape {
	int m, n, k, ta, tb, ct, beta, calls;
	double ms;
};
static struct gemm_shape gemm_shapes[64];
static int ngemm_shapes;
static cudaEvent_t gemm_events[2];

static void gemm_timed(int m, int n, int k, int ta, int tb, int ct, float beta, double ms)
{
	struct gemm_shape key = {m, n, k, ta, tb, ct, beta != 0.0f, 0, 0.0};
	int i = 0;
	while (i < ngemm_shapes && memcmp(&gemm_shapes[i], &key, offsetof(struct gemm_shape, calls)) != 0)
		i++;
	if (i == ngemm_shapes) {
		if (ngemm_shapes == 64)
			return;
		gemm_shapes[ngemm_shapes++] = key;
	}
	gemm_shapes[i].calls++;
	gemm_shapes[i].ms += ms;
}

static void gemm_report(int steps)
{
	for (int i = 0; i < ngemm_shapes; i++) {
		const struct gemm_shape *s = &gemm_shapes[i];
		double flops = 2.0 * s->m * s->n * s->k * s->calls;
		fprintf(stderr, "model_cuda: matmul m %d n %d k %d %c%c %s%s: %.1f calls, %.3f ms per step, %.0f TFLOP/s\n",
			s->m, s->n, s->k, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->ct == CUDA_R_32F ? "fp32" : "bf16",
			s->beta ? " +=" : "", (double)s->calls / steps, s->ms / steps, flops / (s->ms * 1e-3) / 1e12);
	}
}

static int gemm(struct ca_cuda_model *g, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
		const bf16 *A, int lda, const bf16 *B, int ldb, void *Cm, cudaDataType ct, int ldc, float beta,
		char *why)
{
	const float one = 1.0f;
	int timed = profiling == 2 && (gemm_events[0] || (cudaEventCreate(&gemm_events[0]) == cudaSuccess &&
							   cudaEventCreate(&gemm_events[1]) == cudaSuccess));
	if (timed)
		cudaEventRecord(gemm_events[0]);
	cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
	if (!g->lt || matmul_lt(g->lt, ta, tb, m, n, k, A, lda, B, ldb, Cm, ct, ldc, beta) < 0)
		st = cublasGemmEx(g->blas, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, &beta, Cm,
				  ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (timed) {
		float ms = 0;
		cudaEventRecord(gemm_events[1]);
		if (cudaEventSynchronize(gemm_events[1]) == cudaSuccess &&
		    cudaEventElapsedTime(&ms, gemm_events[0], gemm_events[1]) == cudaSuccess)
			gemm_timed(m, n, k, ta != CUBLAS_OP_N, tb != CUBLAS_OP_N, ct, beta, ms);
	}
	if (st != CUBLAS_STATUS_SUCCESS) {
		set_why(why, "cublasGemmEx failed (status %d)", (int)st);
		return -1;
	}
	return 0;
}

// y[T,O] = x[T,I] W[O,I]^T, y fp32 or bf16.
static int linear(struct ca_cuda_model *g, void *y, cudaDataType yt, const bf16 *x, const bf16 *w, int T, int I,
		  int O, char *why)
{
	return gemm(g, CUBLAS_OP_T, CUBLAS_OP_N, O, T, I, w, I, x, I, y, yt, O, 0.0f, why);
}

// dx[T,I] (fp32) = beta dx + dy[T,O] W[O,I].
static int linear_dx(struct ca_cuda_model *g, float *dx, const bf16 *dy, const bf16 *w, int T, int I, int O,
		     float beta, char *why)
{
	return gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, I, T, O, w, I, dy, O, dx, CUDA_R_32F, I, beta, why);
}

// dx[T,I] (bf16) = dy[T,O] W[O,I].
static int linear_dx_bf16(struct ca_cuda_model *g, bf16 *dx, const bf16 *dy, const bf16 *w, int T, int I, int O,
			  char *why)
{
	return gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, I, T, O, w, I, dy, O, dx, CUDA_R_16BF, I, 0.0f, why);
}

// dW[O,I] (fp32) += dy[T,O]^T x[T,I].
static int linear_dw(struct ca_cuda_model *g, float *dw, const bf16 *dy, const bf16 *x, int T, int I, int O,
		     char *why)
{
	return gemm(g, CUBLAS_OP_N, CUBLAS_OP_T, I, O, T, x, I, dy, O, dw, CUDA_R_32F, I, 1.0f, why);
}

// ---- forward ----

/*
 * One layer: L->x in, next = its output. With normed set, L->ln1 and
 * L->rstd1 are already made (the layer before fused them into its end);
 * with next_w set, the output's norm is made too (into next_ln, next_rstd)
 * in the same pass as the last residual add.
 */
static int layer_forward(struct ca_cuda_model *g, struct cuda_acts *a, struct layer_acts *L,
			 const struct layer_weights *W, float *next, int normed, const float *next_w, bf16 *next_ln,
			 float *next_rstd, char *why)
{
	const struct ca_model_config *c = &g->cfg;
	int T = a->T, C = c->hidden_size, F = c->intermediate_size;
	int NH = c->num_heads, NKV = c->num_kv_heads, D = c->head_dim, QD = NH * D, KD = NKV * D;
	size_t TC = (size_t)T * C;
	PH(OTHER);
	if (!normed)
		nn_cuda_rmsnorm_forward(L->ln1, L->rstd1, L->x, W->ln1, c->rms_norm_eps, T, C);
	PH(MATMUL);
	if (linear(g, L->q, CUDA_R_32F, L->ln1, W->wq, T, C, QD, why) < 0 ||
	    linear(g, L->k, CUDA_R_32F, L->ln1, W->wk, T, C, KD, why) < 0 ||
	    linear(g, L->v, CUDA_R_32F, L->ln1, W->wv, T, C, KD, why) < 0)
		return -1;
	PH(OTHER);
	// The tensor cores' bf16 copies of q, k, v are made here, once, and kept for the backward.
	bf16 *q16 = L->qkv16, *k16 = q16 ? q16 + (size_t)T * QD : NULL, *v16 = k16 ? k16 + (size_t)T * KD : NULL;
	if (c->qk_norm) {
		// Qwen3: the biases (if any) and each head's norm, then the rotation, as model_forward.c does.
		nn_cuda_head_rmsnorm(L->q, L->qpre, L->rstdq, W->bq, W->q_norm, c->rms_norm_eps, T, NH, D);
		nn_cuda_head_rmsnorm(L->k, L->kpre, L->rstdk, W->bk, W->k_norm, c->rms_norm_eps, T, NKV, D);
		nn_cuda_rope(L->q, q16, NULL, a->pos, g->rope_cos, g->rope_sin, T, NH, D, 0);
		nn_cuda_rope(L->k, k16, NULL, a->pos, g->rope_cos, g->rope_sin, T, NKV, D, 0);
	} else {
		nn_cuda_rope(L->q, q16, W->bq, a->pos, g->rope_cos, g->rope_sin, T, NH, D, 0);
		nn_cuda_rope(L->k, k16, W->bk, a->pos, g->rope_cos, g->rope_sin, T, NKV, D, 0);
	}
	if (W->bv)
		nn_cuda_bias_forward(L->v, W->bv, T, KD);
	if (v16)
		nn_cuda_to_bf16(v16, L->v, (size_t)T * KD);
	PH(ATTN);
	int r = a->mma ? nn_cuda_attention_forward_mma(L->att, L->lse, q16, k16, v16, a->seq_start, a->tile_order, T, NH,
							NKV, D)
		       : nn_cuda_attention_forward(L->att, L->lse, L->q, L->k, L->v, a->attb, a->seq_start, a->tile_order, T,
						   NH, NKV, D);
	if (r < 0)
		return set_why(why, "head_dim %d is not supported by the CUDA attention", D), -1;
	PH(MATMUL);
	if (linear(g, a->y, CUDA_R_32F, L->att, W->wo, T, QD, C, why) < 0)
		return -1;
	PH(OTHER);
	nn_cuda_add_rmsnorm(L->xmid, L->ln2, L->rstd2, L->x, a->y, W->bo, W->ln2, c->rms_norm_eps, T, C);
	PH(MATMUL);
	// up_proj's weight follows gate_proj's (lib/model/model.c's layout, checked at upload): one [2F, C] matrix.
	if (linear(g, L->gu, CUDA_R_16BF, L->ln2, W->wgate, T, C, 2 * F, why) < 0)
		return -1;
	PH(OTHER);
	nn_cuda_swiglu_forward(L->h, L->gu, T, F);
	PH(MATMUL);
	if (linear(g, a->y, CUDA_R_32F, L->h, W->wdown, T, F, C, why) < 0)
		return -1;
	PH(OTHER);
	if (next_w)
		nn_cuda_add_rmsnorm(next, next_ln, next_rstd, L->xmid, a->y, NULL, next_w, c->rms_norm_eps, T, C);
	else
		nn_cuda_add(next, L->xmid, a->y, TC);
	return 0;
}

struct tile_work {
	long work;
	int tile;
};

static int by_work(const void *x, const void *y)
{
	const struct tile_work *a = (const struct tile_work *)x, *b = (const struct tile_work *)y;
	if (a->work != b->work)
		return a->work > b->work ? -1 : 1;
	return a->tile - b->tile;
}

/*
 * The order in which the attention starts its tiles of 64 (attention_mma.cu):
 * query tiles (forward, dq) by the keys they see, then key tiles (dk, dv) by
 * the queries that see them, most first, so that no long tile starts last.
 */
static int tile_order_fill(int *order, const int *start, const int *end, int T)
{
	int n = (T + 63) / 64;
	struct tile_work *w = (struct tile_work *)malloc(sizeof *w * (size_t)n);
	if (!w)
		return -1;
	for (int pass = 0; pass < 2; pass++) {
		for (int j = 0; j < n; j++) {
			int first = 64 * j, last = (T < first + 64 ? T : first + 64) - 1;
			w[j].work = pass == 0 ? (long)last - start[first] + 1 : (long)end[last] - first;
			w[j].tile = j;
		}
		qsort(w, (size_t)n, sizeof *w, by_work);
		for (int j = 0; j < n; j++)
			order[pass * n + j] = w[j].tile;
	}
	free(w);
	return 0;
}

static int forward(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets, float *logprobs,
		   float *entropy, float *values, int train, char *why)
{
	const struct ca_model_config *c = &g->cfg;
	int T = b->T, C = c->hidden_size, V = c->vocab_size;
	if (T <= 0)
		return set_why(why, "empty batch"), -1;
	long total = 0;
	for (int s = 0; s < b->nseq; s++) {
		if (b->seq_len[s] <= 0)
			return set_why(why, "sequence %d is empty", s), -1;
		if (b->seq_len[s] > c->max_positions)
			return set_why(why, "sequence of %d tokens exceeds max_position_embeddings %d", b->seq_len[s],
				       c->max_positions), -1;
		total += b->seq_len[s];
	}
	if (total != T)
		return set_why(why, "sequence lengths add up to %ld, not %d tokens", total, T), -1;
	for (int t = 0; t < T; t++)
		if (b->tokens[t] < 0 || b->tokens[t] >= V)
			return set_why(why, "token %d at %d is outside the vocabulary of %d", b->tokens[t], t, V), -1;
	if (c->critic && (logprobs || entropy))
		return set_why(why, "a critic checkpoint has no language-model head"), -1;
	if (!c->critic && values)
		return set_why(why, "a policy checkpoint has no value head"), -1;

	struct cuda_acts *a = g->acts;
	int recompute = train && want_recompute(c, T, g->recompute);
	if (!a || a->cap_T < T || (train && (!a->train || a->recompute != recompute))) {
		acts_free(a);
		g->acts = NULL;
		a = g->acts = acts_new(c, T, train, recompute);
		if (!a)
			return set_why(why, "no GPU memory for the activations of %d tokens", T), -1;
	}
	a->T = T;
	a->logits_ready = 0;
	int ntiles = (T + 63) / 64;
	int *host = (int *)malloc(sizeof(int) * (4 * (size_t)T + 2 * (size_t)ntiles));
	if (!host)
		return set_why(why, "out of memory"), -1;
	int *hstart = host, *hend = host + T, *hpos = host + 2 * T, *htarget = host + 3 * T;
	for (int s = 0, t = 0; s < b->nseq; s++)
		for (int j = 0; j < b->seq_len[s]; j++, t++) {
			hstart[t] = t - j;
			hend[t] = t - j + b->seq_len[s];
			hpos[t] = j;
		}
	for (int t = 0; t < T; t++)
		htarget[t] = targets ? targets[t] : -1;
	int *horder = host + 4 * T;
	if (tile_order_fill(horder, hstart, hend, T) < 0) {
		free(host);
		return set_why(why, "out of memory"), -1;
	}
	size_t nb = sizeof(int) * (size_t)T;
	cudaError_t e = cudaMemcpy(a->tokens, b->tokens, nb, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(a->seq_start, hstart, nb, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(a->seq_end, hend, nb, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(a->pos, hpos, nb, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(a->targets, htarget, nb, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(a->tile_order, horder, sizeof(int) * 2 * (size_t)ntiles, cudaMemcpyHostToDevice);
	free(host);
	CUDA_TRY(e);

	phase_dir = 0;
	int keep = a->nkept > 1;
	if (a->recompute)
		a->layer[0].x = a->xin[0];
	nn_cuda_embed_forward(a->layer[0].x, g->embed, a->tokens, T, C);
	for (int l = 0; l < c->num_layers; l++) {
		struct layer_acts *L = &a->layer[keep ? l : 0];
		float *next = keep && l + 1 < c->num_layers ? a->layer[l + 1].x : a->xfinal;
		if (a->recompute) {
			L->x = a->xin[l];
			next = l + 1 < c->num_layers ? a->xin[l + 1] : a->xfinal;
		}
		// The norm after the layer (the next layer's first, or the final one) fused into its end.
		int last = l + 1 == c->num_layers;
		struct layer_acts *N = last ? NULL : &a->layer[keep ? l + 1 : 0];
		if (layer_forward(g, a, L, &g->layers[l], next, l > 0, last ? g->norm : g->layers[l + 1].ln1,
				  last ? a->lnf : N->ln1, last ? a->rstdf : N->rstd1, why) < 0)
			return -1;
		if (!keep && !a->recompute && !last)
			CUDA_TRY(cudaMemcpyAsync(L->x, a->xfinal, sizeof(float) * (size_t)T * C, cudaMemcpyDeviceToDevice));
	}
	PH(HEAD);
	if (c->critic) {
		nn_cuda_value_forward(a->val, a->lnf, g->score_w, g->score_b, T, C);
	} else if (logprobs || entropy) {
		for (int t0 = 0; t0 < T; t0 += a->chunk) {
			int n = T - t0 < a->chunk ? T - t0 : a->chunk;
			float *z = a->logits + (a->keep_logits ? (size_t)t0 * V : 0);
			if (linear(g, z, CUDA_R_32F, a->lnf + (size_t)t0 * C, g->lm_head, n, C, V, why) < 0)
				return -1;
			nn_cuda_logprob_forward(a->lp + t0, a->ent + t0, a->hlse + t0, z, a->targets + t0, n, V);
		}
		a->logits_ready = a->keep_logits;
	}
	phase(PH_NONE);
	CUDA_TRY(cudaGetLastError());
	size_t fb = sizeof(float) * (size_t)T;
	if (logprobs)
		CUDA_TRY(cudaMemcpy(logprobs, a->lp, fb, cudaMemcpyDeviceToHost));
	if (entropy)
		CUDA_TRY(cudaMemcpy(entropy, a->ent, fb, cudaMemcpyDeviceToHost));
	if (values)
		CUDA_TRY(cudaMemcpy(values, a->val, fb, cudaMemcpyDeviceToHost));
	CUDA_TRY(cudaDeviceSynchronize());
	return 0;
}

extern "C" int ca_cuda_model_forward(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets,
				     float *logprobs, float *entropy, float *values, char *why)
{
	if (g->acts && g->acts->train == 2)
		g->acts->train = 1;  // its activations are about to be overwritten
	return forward(g, b, targets, logprobs, entropy, values, 0, why);
}

extern "C" int ca_cuda_model_forward_train(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets,
					   float *logprobs, float *entropy, float *values, char *why)
{
	phase(PH_NONE);
	if (profiling > 0 && ++profile_steps == 2) {
		memset(phase_seconds, 0, sizeof phase_seconds);
		ngemm_shapes = 0;
	}
	int r = forward(g, b, targets, logprobs, entropy, values, 1, why);
	if (g->acts)
		g->acts->train = r == 0 ? 2 : 1;  // 2: a training forward is waiting for its backward
	return r;
}

// ---- backward ----

static int ensure_grad(struct ca_cuda_model *g, char *why)
{
	if (g->grad)
		return 0;
	if (!(g->grad = (float *)ca_cuda_alloc(sizeof(float) * g->nparams)))
		return set_why(why, "no GPU memory for the gradient"), -1;
	CUDA_TRY(cudaMemset(g->grad, 0, sizeof(float) * g->nparams));
	return 0;
}

extern "C" int ca_cuda_model_zero_grad(struct ca_cuda_model *g, char *why)
{
	if (ensure_grad(g, why) < 0)
		return -1;
	CUDA_TRY(cudaMemset(g->grad, 0, sizeof(float) * g->nparams));
	return 0;
}

extern "C" int ca_cuda_model_set_grad(struct ca_cuda_model *g, const float *grad, char *why)
{
	if (ensure_grad(g, why) < 0)
		return -1;
	CUDA_TRY(cudaMemcpy(g->grad, grad, sizeof(float) * g->nparams, cudaMemcpyHostToDevice));
	return 0;
}

static int layer_backward(struct ca_cuda_model *g, struct cuda_acts *a, struct layer_acts *L,
			  const struct layer_weights *W, char *why)
{
	const struct ca_model_config *c = &g->cfg;
	int T = a->T, C = c->hidden_size, F = c->intermediate_size;
	int NH = c->num_heads, NKV = c->num_kv_heads, D = c->head_dim, QD = NH * D, KD = NKV * D;
	const size_t *o = W->off;
	// MLP: out = xmid + down(silu(gate) * up); dx flows on to xmid.
	// a->dxb holds dx as bf16 (the rmsnorm backward after this layer wrote both).
	PH(MATMUL);
	if (linear_dw(g, G(g, o[6]), a->dxb, L->h, T, F, C, why) < 0 ||
	    linear_dx(g, a->dh, a->dxb, W->wdown, T, F, C, 0.0f, why) < 0)
		return -1;
	PH(OTHER);
	nn_cuda_swiglu_backward(a->dgu, a->dh, L->gu, T, F);
	PH(MATMUL);
	if (linear_dw(g, G(g, o[4]), a->dgu, L->ln2, T, C, 2 * F, why) < 0 ||
	    linear_dx(g, a->dln, a->dgu, W->wgate, T, C, 2 * F, 0.0f, why) < 0)
		return -1;
	PH(OTHER);
	nn_cuda_rmsnorm_backward(a->dx, a->dxb, G(g, o[12]), a->dln, L->xmid, W->ln2, L->rstd2, T, C);
	// Attention: xmid = x + o_proj(att).
	// The mma attention reads the output's gradient as bf16: the matmul writes it so.
	bf16 *dout16 = a->attb;
	PH(MATMUL);
	if (linear_dw(g, G(g, o[3]), a->dxb, L->att, T, QD, C, why) < 0 ||
	    (a->mma ? linear_dx_bf16(g, dout16, a->dxb, W->wo, T, QD, C, why)
		    : linear_dx(g, a->datt, a->dxb, W->wo, T, QD, C, 0.0f, why)) < 0)
		return -1;
	PH(OTHER);
	if (W->bo)
		nn_cuda_colsum(G(g, o[10]), a->dx, NULL, T, C);
	PH(ATTN);
	int r;
	if (a->mma) {
		const bf16 *q16 = L->qkv16, *k16 = q16 + (size_t)T * QD, *v16 = k16 + (size_t)T * KD;
		nn_cuda_attention_delta_bf16(a->delta, dout16, L->att, T * NH, D);
		r = nn_cuda_attention_backward_mma(a->dq, a->dk, a->dv, a->delta, dout16, L->lse, q16, k16, v16,
						   a->seq_start, a->seq_end, a->tile_order, T, NH, NKV, D);
	} else {
		r = nn_cuda_attention_backward(a->dq, a->dk, a->dv, a->dkh, a->dvh, a->delta, a->attb, a->datt, L->att,
					       L->lse, L->q, L->k, L->v, a->seq_start, a->seq_end, a->tile_order, T, NH,
					       NKV, D);
	}
	if (r < 0)
		return set_why(why, "head_dim %d is not supported by the CUDA attention", D), -1;
	PH(OTHER);
	if (c->qk_norm) {
		// Qwen3: rotated back in place, then through each head's norm (its weights' gradients
		// too) into bf16 for the matmuls; the biases' gradients are the sums of what comes out.
		nn_cuda_rope(a->dq, NULL, NULL, a->pos, g->rope_cos, g->rope_sin, T, NH, D, 1);
		nn_cuda_rope(a->dk, NULL, NULL, a->pos, g->rope_cos, g->rope_sin, T, NKV, D, 1);
		CUDA_TRY(cudaMemsetAsync(a->dqpre, 0, sizeof(float) * (size_t)T * QD));
		CUDA_TRY(cudaMemsetAsync(a->dkpre, 0, sizeof(float) * (size_t)T * KD));
		nn_cuda_rmsnorm_backward(a->dqpre, a->dqb, G(g, o[13]), a->dq, L->qpre, W->q_norm, L->rstdq, T * NH, D);
		nn_cuda_rmsnorm_backward(a->dkpre, a->dkb, G(g, o[14]), a->dk, L->kpre, W->k_norm, L->rstdk, T * NKV, D);
		if (W->bq)
			nn_cuda_colsum(G(g, o[7]), a->dqpre, NULL, T, QD);
		if (W->bk)
			nn_cuda_colsum(G(g, o[8]), a->dkpre, NULL, T, KD);
	} else {
		// Rotated back, as bf16 for the matmuls, with the biases' gradients: one pass each.
		nn_cuda_rope_backward(a->dqb, G(g, o[7]), a->dq, a->pos, g->rope_cos, g->rope_sin, T, NH, D);
		nn_cuda_rope_backward(a->dkb, G(g, o[8]), a->dk, a->pos, g->rope_cos, g->rope_sin, T, NKV, D);
	}
	nn_cuda_rope_backward(a->dvb, G(g, o[9]), a->dv, NULL, NULL, NULL, T, NKV, D);
	PH(MATMUL);
	if (linear_dw(g, G(g, o[0]), a->dqb, L->ln1, T, C, QD, why) < 0 ||
	    linear_dw(g, G(g, o[1]), a->dkb, L->ln1, T, C, KD, why) < 0 ||
	    linear_dw(g, G(g, o[2]), a->dvb, L->ln1, T, C, KD, why) < 0 ||
	    linear_dx(g, a->dln, a->dqb, W->wq, T, C, QD, 0.0f, why) < 0 ||
	    linear_dx(g, a->dln, a->dkb, W->wk, T, C, KD, 1.0f, why) < 0 ||
	    linear_dx(g, a->dln, a->dvb, W->wv, T, C, KD, 1.0f, why) < 0)
		return -1;
	PH(OTHER);
	nn_cuda_rmsnorm_backward(a->dx, a->dxb, G(g, o[11]), a->dln, L->x, W->ln1, L->rstd1, T, C);
	return 0;
}

static int any_nonzero(const float *x, int n)
{
	for (int i = 0; x && i < n; i++)
		if (x[i] != 0.0f)
			return 1;
	return 0;
}

extern "C" int ca_cuda_model_backward(struct ca_cuda_model *g, const float *dlogp, const float *dentropy,
				      const float *dvalue, char *why)
{
	struct cuda_acts *a = g->acts;
	if (!a || a->train != 2)
		return set_why(why, "backward without a training forward"), -1;
	a->train = 1;
	if (ensure_grad(g, why) < 0)
		return -1;
	const struct ca_model_config *c = &g->cfg;
	int T = a->T, C = c->hidden_size, V = c->vocab_size;
	size_t TC = (size_t)T * C, fb = sizeof(float) * (size_t)T;
	if (dlogp)
		CUDA_TRY(cudaMemcpy(a->dlp, dlogp, fb, cudaMemcpyHostToDevice));
	if (dentropy)
		CUDA_TRY(cudaMemcpy(a->dent, dentropy, fb, cudaMemcpyHostToDevice));
	if (dvalue)
		CUDA_TRY(cudaMemcpy(a->dval, dvalue, fb, cudaMemcpyHostToDevice));
	// Head: the gradient of the final norm's output gathers in dln.
	phase_dir = 4;
	PH(HEAD);
	CUDA_TRY(cudaMemset(a->dln, 0, sizeof(float) * TC));
	if (c->critic) {
		if (dvalue) {
			nn_cuda_value_backward(a->dln, a->dval, g->score_w32, T, C);
			nn_cuda_colsum_bf16(G(g, g->off_score_w), a->lnf, a->dval, T, C);
			if (g->score_b)
				nn_cuda_colsum(G(g, g->off_score_b), a->dval, NULL, T, 1);
		}
	} else {
		for (int t0 = 0; t0 < T; t0 += a->chunk) {
			int n = T - t0 < a->chunk ? T - t0 : a->chunk;
			int need_lp = any_nonzero(dlogp ? dlogp + t0 : NULL, n);
			int need_ent = any_nonzero(dentropy ? dentropy + t0 : NULL, n);
			if (!need_lp && !need_ent)
				continue;
			const bf16 *x = a->lnf + (size_t)t0 * C;
			const float *z = a->logits + (a->logits_ready ? (size_t)t0 * V : 0);
			if (!a->logits_ready && linear(g, a->logits, CUDA_R_32F, x, g->lm_head, n, C, V, why) < 0)
				return -1;
			// Kept logits come with their log-sum-exp and entropy: one pass over them.
			nn_cuda_logprob_backward(a->dlogits, z, a->targets + t0, need_lp ? a->dlp + t0 : NULL,
						 need_ent ? a->dent + t0 : NULL, a->logits_ready ? a->hlse + t0 : NULL,
						 a->logits_ready ? a->ent + t0 : NULL, n, V);
			if (linear_dx(g, a->dln + (size_t)t0 * C, a->dlogits, g->lm_head, n, C, V, 0.0f, why) < 0 ||
			    linear_dw(g, G(g, g->off_lm_head), a->dlogits, x, n, C, V, why) < 0)
				return -1;
		}
	}
	PH(OTHER);
	CUDA_TRY(cudaMemset(a->dx, 0, sizeof(float) * TC));
	nn_cuda_rmsnorm_backward(a->dx, a->dxb, G(g, g->off_norm), a->dln, a->xfinal, g->norm, a->rstdf, T, C);
	for (int l = c->num_layers - 1; l >= 0; l--) {
		struct layer_acts *L = &a->layer[a->recompute ? 0 : l];
		if (a->recompute) {
			// Rebuild the layer's activations from its input; its output goes to scratch.
			L->x = a->xin[l];
			phase_dir = 0;
			if (layer_forward(g, a, L, &g->layers[l], a->y, 0, NULL, NULL, NULL, why) < 0)
				return -1;
			phase_dir = 4;
		}
		if (layer_backward(g, a, L, &g->layers[l], why) < 0)
			return -1;
	}
	PH(OTHER);
	nn_cuda_embed_backward(G(g, g->off_embed), a->dx, a->tokens, T, C);
	phase(PH_NONE);
	CUDA_TRY(cudaGetLastError());
	CUDA_TRY(cudaDeviceSynchronize());
	return 0;
}

// ---- AdamW (ca_model_adamw_step) ----

extern "C" int ca_cuda_model_adamw_step(struct ca_cuda_model *g, const struct ca_adamw *o, double *grad_norm,
					char *why)
{
	size_t n = g->nparams;
	if (ensure_grad(g, why) < 0)
		return -1;
	if (!g->adam_m) {
		g->adam_m = (float *)ca_cuda_alloc(sizeof(float) * n);
		g->adam_v = (float *)ca_cuda_alloc(sizeof(float) * n);
		if (!g->adam_m || !g->adam_v)
			return set_why(why, "no GPU memory for the AdamW state"), -1;
		CUDA_TRY(cudaMemset(g->adam_m, 0, sizeof(float) * n));
		CUDA_TRY(cudaMemset(g->adam_v, 0, sizeof(float) * n));
	}
	phase(PH_ADAMW);
	double partial[NN_CUDA_SUMSQ_BLOCKS];
	int nb = nn_cuda_sumsq(g->partial, g->grad, n);
	CUDA_TRY(cudaMemcpy(partial, g->partial, sizeof(double) * (size_t)nb, cudaMemcpyDeviceToHost));
	double s = 0;
	for (int i = 0; i < nb; i++)
		s += partial[i];
	double norm = sqrt(s);
	struct ca_adamw_scalars a = ca_adamw_scalars(o, norm, ++g->adam_step);
	nn_cuda_adamw(g->params, g->params16, g->grad, g->adam_m, g->adam_v, n, a.clip, a.beta1, a.beta2, a.step_size,
		      a.bc2_sqrt, a.eps, a.decay);
	phase(PH_NONE);
	CUDA_TRY(cudaGetLastError());
	CUDA_TRY(cudaDeviceSynchronize());
	if (grad_norm)
		*grad_norm = norm;
	return 0;
}
