/*
 * nn_cuda: the CUDA kernels of the policy engine, one family per layer,
 * each the counterpart of a function in lib/model/nn.c (owner: policy engine,
 * issue 6). Host-side launchers on the default stream; no synchronisation.
 * Private to lib/model/cuda (C++ linkage).
 *
 * Types: the residual stream, attention inputs, norms' statistics and all
 * gradients are fp32; what feeds a cuBLAS matmul is bf16.
 */
#ifndef CA_NN_CUDA_H
#define CA_NN_CUDA_H

#include <stddef.h>

#include "cuda/cuda_util.h"  /* bf16 */

/* x[T,C] = embed[tokens[t]] (fp32 copy of bf16 rows); backward scatter-adds dx into dembed. */
void nn_cuda_embed_forward(float *x, const bf16 *embed, const int *tokens, int T, int C);
void nn_cuda_embed_backward(float *dembed, const float *dx, const int *tokens, int T, int C);

/* out = w * x * rstd (bf16), rstd kept when not NULL (ca_nn_rmsnorm_forward). */
void nn_cuda_rmsnorm_forward(bf16 *out, float *rstd, const float *x, const float *w, float eps, int T, int C);
/* sum = a + (b + bias) (bias [C] or NULL), then out, rstd = the norm of sum: a residual add and a norm. */
void nn_cuda_add_rmsnorm(float *sum, bf16 *out, float *rstd, const float *a, const float *b, const float *bias,
			 const float *w, float eps, int T, int C);
/*
 * dx += d(norm)/dx dout, and dxb (when not NULL) = the new dx as bf16 for
 * the matmuls before; dw += sum_t dout * x * rstd (ca_nn_rmsnorm_backward).
 */
void nn_cuda_rmsnorm_backward(float *dx, bf16 *dxb, float *dw, const float *dout, const float *x, const float *w,
			      const float *rstd, int T, int C);

/*
 * Qwen3's q/k norm, in place on x[T, H*D]: each head's D values become
 * w * ((x + bias) * rstd), w [D] shared by the heads, bias [H*D] or NULL;
 * pre (may be NULL) keeps x + bias and rstd (may be NULL) [T*H] for the
 * backward, which is nn_cuda_rmsnorm_backward over T*H rows of D.
 */
void nn_cuda_head_rmsnorm(float *x, float *pre, float *rstd, const float *bias, const float *w, float eps, int T,
			  int H, int D);

/* y[T,O] += bias[O]. */
void nn_cuda_bias_forward(float *y, const float *bias, int T, int O);
/* out[c] += sum_t a[t,c] * (rowscale ? rowscale[t] : 1): bias gradients, value head. */
void nn_cuda_colsum(float *out, const float *a, const float *rowscale, int T, int C);
void nn_cuda_colsum_bf16(float *out, const bf16 *a, const float *rowscale, int T, int C);

/*
 * Rotary embedding in place on x[T, H*D], of x + bias when bias ([H*D])
 * is not NULL; inverse set: the backward. copy, when not NULL, gets the
 * result as bf16 too.
 */
void nn_cuda_rope(float *x, bf16 *copy, const float *bias, const int *pos, const float *cos_t, const float *sin_t,
		  int T, int H, int D, int inverse);
/*
 * The backward of x = rope(y + bias) for the matmul that made y: out =
 * rope^-1(dx) as bf16 (dx as is when pos is NULL), dbias (when not NULL)
 * += its sum over tokens. dx is left alone, except when H*D is too wide
 * for one pass (then rotated in place).
 */
void nn_cuda_rope_backward(bf16 *out, float *dbias, const float *dx, const int *pos, const float *cos_t,
			   const float *sin_t, int T, int H, int D);

/*
 * h[T, F] = silu(gate) * up where gu[T, 2F] holds rows of [gate | up] (one
 * matmul makes both); the backward writes dgu (not added) the same way.
 */
void nn_cuda_swiglu_forward(bf16 *h, const bf16 *gu, int T, int F);
void nn_cuda_swiglu_backward(bf16 *dgu, const float *dh, const bf16 *gu, int T, int F);

/* out = a + b; out may be a. */
void nn_cuda_add(float *out, const float *a, const float *b, size_t n);
void nn_cuda_to_bf16(bf16 *out, const float *x, size_t n);

/*
 * Per row of logits[n, V], in one pass over it: log p(target) (0 when
 * target < 0), entropy and log-sum-exp (each may be NULL).
 */
void nn_cuda_logprob_forward(float *logprob, float *entropy, float *row_lse, const float *logits, const int *targets,
			     int n, int V);
/*
 * dlogits (bf16) = dlogp (onehot - p) - dentropy p (log p + H) per row
 * (ca_nn_logprob_row_backward); with row_lse and row_entropy from the
 * forward on the same logits one pass over them, else two.
 */
void nn_cuda_logprob_backward(bf16 *dlogits, const float *logits, const int *targets, const float *dlogp,
			      const float *dentropy, const float *row_lse, const float *row_entropy, int n, int V);

/* values[t] = x[t] . w + b; backward: dx[t] = dvalue[t] w (written). */
void nn_cuda_value_forward(float *values, const bf16 *x, const bf16 *w, const float *b, int T, int C);
void nn_cuda_value_backward(float *dx, const float *dvalue, const float *w, int T, int C);

/* partial[0..nblocks) = sums of squares of x over a grid of nblocks (returned). */
int nn_cuda_sumsq(double *partial, const float *x, size_t n);
#define NN_CUDA_SUMSQ_BLOCKS 1024
/*
 * One AdamW step over n parameters as ca_model_adamw_step: g = grad * clip,
 * decoupled decay, bias correction folded into step_size and bc2_sqrt;
 * the bf16 copy of every parameter is refreshed.
 */
void nn_cuda_adamw(float *params, bf16 *params16, const float *grad, float *m, float *v, size_t n, float clip,
		   float beta1, float beta2, float step_size, float bc2_sqrt, float eps, float decay);

/*
 * Causal grouped-query attention over packed sequences, flash-style: no
 * [T, T] matrix; the forward keeps only lse[T, NH] (log-sum-exp of the
 * scaled scores) for the backward. q [T, NH*D], k, v [T, NKV*D] fp32;
 * out bf16. seq_end[t] is one past the last token of t's sequence.
 * scratch holds bf16 copies of the inputs: T*(NH + 2*NKV)*D entries for
 * the forward, T*(2*NH + 2*NKV)*D for the backward. tile_order (device,
 * may be NULL): the order in which the tensor-core kernels start their
 * tiles of 64 (attention_mma.cu).
 * Returns -1 for a head_dim it was not built for (16, 32, 64, 128, 256).
 */
int nn_cuda_attention_forward(bf16 *out, float *lse, const float *q, const float *k, const float *v, bf16 *scratch,
			      const int *seq_start, const int *tile_order, int T, int NH, int NKV, int D);
/*
 * dq, dk, dv written; delta is [T, NH] scratch. Tensor cores by default:
 * attention_mma.cu (mma.sync, FlashAttention-2's tiling) for head_dim 16,
 * 32, 64 and 128; CA_CUDA_ATTENTION=wmma the older WMMA kernels of
 * attention_wmma.cu (64 and 128; they need dkh and dvh [Tpad, NH*D] and
 * dq [Tpad, NH*D], Tpad: T rounded up to 64); CA_CUDA_ATTENTION=fp32, or
 * another head_dim, the fp32 kernels of attention_cuda.cu. With
 * CA_CUDA_ATTENTION_DQ=atomic the mma backward adds dQ up inside its dK/dV
 * pass (atomics) instead of running a dQ pass; with 128 its dQ pass takes
 * 128 queries a block (attention_mma.cu).
 */
int nn_cuda_attention_backward(float *dq, float *dk, float *dv, float *dkh, float *dvh, float *delta, bf16 *scratch,
			       const float *dout, const bf16 *out, const float *lse, const float *q, const float *k,
			       const float *v, const int *seq_start, const int *seq_end, const int *tile_order, int T,
			       int NH, int NKV, int D);

int nn_cuda_attention_forward_mma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
				  const int *seq_start, const int *tile_order, int T, int NH, int NKV, int D);
int nn_cuda_attention_backward_mma(float *dq, float *dk, float *dv, const float *delta, const bf16 *dout,
				   const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *seq_start,
				   const int *seq_end, const int *tile_order, int T, int NH, int NKV, int D);
int nn_cuda_attention_forward_wmma(bf16 *out, float *lse, const float *q, const float *k, const float *v,
				   const int *seq_start, int T, int NH, int NKV, int D);
int nn_cuda_attention_backward_wmma(float *dq, float *dk, float *dv, float *dkh, float *dvh, const float *delta,
				    const float *dout, const float *lse, const float *q, const float *k, const float *v,
				    const int *seq_start, const int *seq_end, int T, int NH, int NKV, int D);
/* delta[r] = dout[r] . out[r] over rows of D (the backward's first step; bf16 dout: attention_mma's). */
void nn_cuda_attention_delta_bf16(float *delta, const bf16 *dout, const bf16 *out, int rows, int D);
/* Which attention kernels run: "mma", "wmma" or "fp32" (for logs and benchmarks). */
const char *nn_cuda_attention_kind(int D);

#endif
