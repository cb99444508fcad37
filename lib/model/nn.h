/*
 * nn: the CPU fp32 layers of the policy engine, forward and backward
 * (owner: policy engine, issue 6). The CUDA backend has one kernel family
 * per layer here and is checked against these functions.
 *
 * Layout follows Hugging Face: activations are row-major [T, C] over the
 * T tokens of a packed batch; a linear layer's weight is [out, in].
 * Every backward function ADDS into its gradient outputs (weights and
 * inputs alike), so the caller zeroes them once per step.
 *
 * Packed sequences: token t belongs to the sequence that starts at
 * seq_start[t]; its position is t - seq_start[t]. Attention never
 * crosses a sequence boundary.
 */
#ifndef CA_NN_H
#define CA_NN_H

#include <stddef.h>

/* out[T,O] = in[T,I] W[O,I]^T (+ bias[O] when not NULL). */
void ca_nn_linear_forward(float *out, const float *in, const float *weight, const float *bias,
			  int T, int I, int O);
/* din += dout W; dweight += dout^T in; dbias += sum_t dout (each may be NULL). */
void ca_nn_linear_backward(float *din, float *dweight, float *dbias, const float *dout,
			   const float *in, const float *weight, int T, int I, int O);

/* out[T,C] = weight * in * rstd, rstd[t] = 1/sqrt(mean(in[t]^2) + eps). */
void ca_nn_rmsnorm_forward(float *out, float *rstd, const float *in, const float *weight,
			   float eps, int T, int C);
void ca_nn_rmsnorm_backward(float *din, float *dweight, const float *dout, const float *in,
			    const float *weight, const float *rstd, int T, int C);

/*
 * Rotary position embedding of the "rotate half" kind, in place on x[T, H*D]
 * (H heads of D dims): pairs (i, i + D/2) are rotated by pos * inv_freq[i].
 * cos_table/sin_table are [maxpos, D/2] from ca_nn_rope_table.
 */
void ca_nn_rope_table(float *cos_table, float *sin_table, int maxpos, int D, double theta);
void ca_nn_rope_forward(float *x, const int *pos, const float *cos_table, const float *sin_table,
			int T, int H, int D);
/* The inverse rotation, which is the backward of the forward (in place on dx). */
void ca_nn_rope_backward(float *dx, const int *pos, const float *cos_table, const float *sin_table,
			 int T, int H, int D);

/*
 * Causal grouped-query attention over packed sequences.
 * q[T, NH*D], k and v [T, NKV*D], out[T, NH*D]; head h reads kv head
 * h / (NH/NKV). probs holds the softmax rows for backward: row (t, h) has
 * t - seq_start[t] + 1 entries at probs + ca_nn_attention_offset(...).
 * Total size: NH * sum_t (t - seq_start[t] + 1), see ca_nn_attention_probs_size.
 * probs may be NULL in both directions: the forward then keeps nothing and
 * the backward recomputes each row from q and k (the same arithmetic, so
 * the same numbers), and memory stays O(T) for long sequences.
 */
size_t ca_nn_attention_probs_size(const int *seq_start, int T, int NH);
void ca_nn_attention_forward(float *out, float *probs, const float *q, const float *k,
			     const float *v, const int *seq_start, int T, int NH, int NKV, int D);
void ca_nn_attention_backward(float *dq, float *dk, float *dv, const float *dout,
			      const float *probs, const float *q, const float *k, const float *v,
			      const int *seq_start, int T, int NH, int NKV, int D);

/* h[T,F] = silu(gate) * up. */
void ca_nn_swiglu_forward(float *h, const float *gate, const float *up, int N);
void ca_nn_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
			   const float *up, int N);

/*
 * Log-softmax statistics of one row of logits: returns log p(target)
 * (target < 0: returns 0) and sets *entropy (may be NULL).
 * The backward writes dlogits[j] = dlogp * (onehot_j - p_j)
 * + dentropy * (-p_j (log p_j + H)).
 */
float ca_nn_logprob_row(const float *logits, int V, int target, float *entropy);
void ca_nn_logprob_row_backward(float *dlogits, const float *logits, int V, int target,
				float dlogp, float dentropy);

/* Dot product and y += a x, vectorised; used by the layers and the sampler. */
float ca_nn_dot(const float *a, const float *b, int n);
void ca_nn_axpy(float *y, float a, const float *x, int n);

#endif
