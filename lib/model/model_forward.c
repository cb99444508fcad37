/*
 * model_forward: the CPU fp32 forward and backward passes over a packed
 * batch; see model.h. The language-model head is computed in chunks of
 * tokens and recomputed in the backward pass, so [T, vocab] logits never
 * exist at once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model.h"
#include "model_impl.h"
#include "nn.h"

/*
 * Tokens per chunk of the language-model head: as many as fit in about
 * 64 MB of logits (at least 16), so that the head's weight is streamed,
 * and transposed for the backward, few times per batch.
 */
static int head_chunk(int T, int V)
{
	int n = (int)((16u << 20) / (unsigned)V);
	if (n < 16)
		n = 16;
	return n < T ? n : T;
}

struct layer_acts {
	float *x;          /* [T,C] residual stream entering the layer */
	float *ln1;        /* [T,C] */
	float *rstd1;      /* [T] */
	float *q, *k, *v;  /* after rotary embedding */
	float *q_proj, *k_proj;   /* Qwen3: q and k before their per-head norm */
	float *rstd_q, *rstd_k;   /* Qwen3: [T*NH], [T*NKV] */
	float *att;        /* [T, NH*D] attention output before o_proj */
	float *probs;
	float *xmid;       /* [T,C] residual after attention */
	float *ln2, *rstd2;
	float *gate, *up, *h;  /* [T,F] */
};

struct ca_model_acts {
	int T, cap_T;
	size_t probs_cap;
	int nlayers_kept;      /* num_layers when training without recomputation, else 1 */
	int train, recompute;
	float **layer_in;      /* recompute: [num_layers][T,C], each layer's input */
	int *tokens, *targets, *seq_start, *pos;
	struct layer_acts *layer;
	float *xfinal;         /* [T,C] residual after the last layer */
	float *lnf, *rstdf;
	int chunk;             /* tokens per chunk of the head */
	float *logits;         /* [chunk, V] */
	/* backward scratch */
	float *dx, *dln, *dq, *dk, *dv, *datt, *dgate, *dup, *dh, *dlogits;
	float *dq_proj, *dk_proj;  /* Qwen3: gradients before the q/k norms */
};

void ca_model_acts_free(struct ca_model_acts *a)
{
	if (!a)
		return;
	for (int l = 0; l < a->nlayers_kept; l++) {
		struct layer_acts *L = &a->layer[l];
		free(L->x); free(L->ln1); free(L->rstd1); free(L->q); free(L->k); free(L->v);
		free(L->att); free(L->probs); free(L->xmid); free(L->ln2); free(L->rstd2);
		free(L->gate); free(L->up); free(L->h);
		free(L->q_proj); free(L->k_proj); free(L->rstd_q); free(L->rstd_k);
	}
	free(a->layer);
	if (a->layer_in)
		for (int l = 0; a->layer_in[l]; l++)
			free(a->layer_in[l]);
	free(a->layer_in);
	free(a->tokens); free(a->targets); free(a->seq_start); free(a->pos);
	free(a->xfinal); free(a->lnf); free(a->rstdf); free(a->logits);
	free(a->dx); free(a->dln); free(a->dq); free(a->dk); free(a->dv); free(a->datt);
	free(a->dgate); free(a->dup); free(a->dh); free(a->dlogits);
	free(a->dq_proj); free(a->dk_proj);
	free(a);
}

static float *falloc(size_t n)
{
	return ca_xmalloc(sizeof(float) * (n ? n : 1));
}

static struct ca_model_acts *acts_alloc(const struct ca_model_config *c, int T, size_t probs, int train,
					int recompute)
{
	struct ca_model_acts *a = ca_xcalloc(1, sizeof *a);
	size_t C = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
	size_t QD = (size_t)c->num_heads * c->head_dim, KD = (size_t)c->num_kv_heads * c->head_dim;
	size_t t = (size_t)T;
	a->cap_T = T;
	a->probs_cap = probs;
	a->train = train;
	a->recompute = train && recompute;
	a->nlayers_kept = train && !recompute ? c->num_layers : 1;
	if (a->recompute) {
		a->layer_in = ca_xcalloc((size_t)c->num_layers + 1, sizeof *a->layer_in);
		for (int l = 0; l < c->num_layers; l++)
			a->layer_in[l] = falloc(t * C);
	}
	a->layer = ca_xcalloc((size_t)a->nlayers_kept, sizeof *a->layer);
	for (int l = 0; l < a->nlayers_kept; l++) {
		struct layer_acts *L = &a->layer[l];
		L->x = falloc(t * C); L->ln1 = falloc(t * C); L->rstd1 = falloc(t);
		L->q = falloc(t * QD); L->k = falloc(t * KD); L->v = falloc(t * KD);
		L->att = falloc(t * QD); L->probs = probs ? falloc(probs) : NULL; L->xmid = falloc(t * C);
		L->ln2 = falloc(t * C); L->rstd2 = falloc(t);
		L->gate = falloc(t * F); L->up = falloc(t * F); L->h = falloc(t * F);
		if (c->qk_norm) {
			L->q_proj = falloc(t * QD); L->k_proj = falloc(t * KD);
			L->rstd_q = falloc(t * (size_t)c->num_heads); L->rstd_k = falloc(t * (size_t)c->num_kv_heads);
		}
	}
	a->tokens = ca_xmalloc(sizeof(int) * t);
	a->targets = ca_xmalloc(sizeof(int) * t);
	a->seq_start = ca_xmalloc(sizeof(int) * t);
	a->pos = ca_xmalloc(sizeof(int) * t);
	a->xfinal = falloc(t * C);
	a->lnf = falloc(t * C);
	a->rstdf = falloc(t);
	a->chunk = head_chunk(T, c->vocab_size);
	a->logits = falloc((size_t)a->chunk * c->vocab_size);
	if (train) {
		a->dx = falloc(t * C); a->dln = falloc(t * C);
		a->dq = falloc(t * QD); a->dk = falloc(t * KD); a->dv = falloc(t * KD);
		a->datt = falloc(t * QD);
		a->dgate = falloc(t * F); a->dup = falloc(t * F); a->dh = falloc(t * F);
		a->dlogits = falloc((size_t)a->chunk * c->vocab_size);
		if (c->qk_norm) {
			a->dq_proj = falloc(t * QD);
			a->dk_proj = falloc(t * KD);
		}
	}
	return a;
}

/* One decoder layer: L->x in, next = L->x + attention + MLP out; activations kept in L. */
static void layer_forward(const struct ca_model *m, const struct ca_model_acts *a, struct layer_acts *L,
			  int l, float *next)
{
	const struct ca_model_config *c = &m->cfg;
	int T = a->T, C = c->hidden_size, F = c->intermediate_size;
	int NH = c->num_heads, NKV = c->num_kv_heads, D = c->head_dim;
	int QD = NH * D, KD = NKV * D;
	const struct ca_model_layer *W = &m->layers[l];
	ca_nn_rmsnorm_forward(L->ln1, L->rstd1, L->x, W->ln1, c->rms_norm_eps, T, C);
	float *q_proj = c->qk_norm ? L->q_proj : L->q, *k_proj = c->qk_norm ? L->k_proj : L->k;
	ca_nn_linear_forward(q_proj, L->ln1, W->wq, W->bq, T, C, QD);
	ca_nn_linear_forward(k_proj, L->ln1, W->wk, W->bk, T, C, KD);
	ca_nn_linear_forward(L->v, L->ln1, W->wv, W->bv, T, C, KD);
	if (c->qk_norm) {
		/* Each head's D values are one row of the norm. */
		ca_nn_rmsnorm_forward(L->q, L->rstd_q, q_proj, W->q_norm, c->rms_norm_eps, T * NH, D);
		ca_nn_rmsnorm_forward(L->k, L->rstd_k, k_proj, W->k_norm, c->rms_norm_eps, T * NKV, D);
	}
	ca_nn_rope_forward(L->q, a->pos, m->rope_cos, m->rope_sin, T, NH, D);
	ca_nn_rope_forward(L->k, a->pos, m->rope_cos, m->rope_sin, T, NKV, D);
	ca_nn_attention_forward(L->att, L->probs, L->q, L->k, L->v, a->seq_start, T, NH, NKV, D);
	ca_nn_linear_forward(L->xmid, L->att, W->wo, W->bo, T, QD, C);
	for (size_t i = 0; i < (size_t)T * C; i++)
		L->xmid[i] += L->x[i];
	ca_nn_rmsnorm_forward(L->ln2, L->rstd2, L->xmid, W->ln2, c->rms_norm_eps, T, C);
	ca_nn_linear_forward(L->gate, L->ln2, W->wgate, NULL, T, C, F);
	ca_nn_linear_forward(L->up, L->ln2, W->wup, NULL, T, C, F);
	ca_nn_swiglu_forward(L->h, L->gate, L->up, T * F);
	ca_nn_linear_forward(next, L->h, W->wdown, NULL, T, F, C);
	for (size_t i = 0; i < (size_t)T * C; i++)
		next[i] += L->xmid[i];
}

int ca_model_forward(struct ca_model *m, const struct ca_batch *b, const int *targets,
		     float *logprobs, float *entropy, float *values, int train,
		     char why[CA_MODEL_WHY])
{
	const struct ca_model_config *c = &m->cfg;
	int T = b->T, C = c->hidden_size, V = c->vocab_size, NH = c->num_heads;
	if (T <= 0) {
		ca_err_why(why, CA_MODEL_WHY, "empty batch");
		return -1;
	}
	long total = 0;
	for (int s = 0; s < b->nseq; s++) {
		if (b->seq_len[s] <= 0) {
			ca_err_why(why, CA_MODEL_WHY, "sequence %d is empty", s);
			return -1;
		}
		if (b->seq_len[s] > c->max_positions) {
			ca_err_why(why, CA_MODEL_WHY, "sequence of %d tokens exceeds max_position_embeddings %d", b->seq_len[s],
				c->max_positions);
			return -1;
		}
		total += b->seq_len[s];
	}
	if (total != T) {
		ca_err_why(why, CA_MODEL_WHY, "sequence lengths add up to %ld, not %d tokens", total, T);
		return -1;
	}
	for (int t = 0; t < T; t++)
		if (b->tokens[t] < 0 || b->tokens[t] >= V) {
			ca_err_why(why, CA_MODEL_WHY, "token %d at %d is outside the vocabulary of %d", b->tokens[t], t, V);
			return -1;
		}
	if (c->critic && (logprobs || entropy)) {
		ca_err_why(why, CA_MODEL_WHY, "a critic checkpoint has no language-model head");
		return -1;
	}
	if (!c->critic && values) {
		ca_err_why(why, CA_MODEL_WHY, "a policy checkpoint has no value head");
		return -1;
	}

	/* Reuse the activations when they fit. */
	int *starts = ca_xmalloc(sizeof(int) * (size_t)T);
	for (int s = 0, t = 0; s < b->nseq; s++)
		for (int j = 0; j < b->seq_len[s]; j++, t++)
			starts[t] = t - j;
	/*
	 * Attention probabilities are kept for the backward when they are small
	 * (up to 16M floats a layer); otherwise, and without training, each
	 * row is recomputed where it is needed and no [T, T] array exists.
	 */
	size_t probs = train ? ca_nn_attention_probs_size(starts, T, NH) : 0;
	if (probs > ((size_t)16 << 20))
		probs = 0;
	struct ca_model_acts *a = m->acts;
	int recompute = train && m->recompute;
	if (!a || a->cap_T < T || a->probs_cap < probs || (a->probs_cap > 0) != (probs > 0) ||
	    a->train != train || a->recompute != recompute) {
		ca_model_acts_free(a);
		a = m->acts = acts_alloc(c, T, probs, train, recompute);
	}
	a->T = T;
	memcpy(a->seq_start, starts, sizeof(int) * (size_t)T);
	free(starts);
	for (int t = 0; t < T; t++) {
		a->pos[t] = t - a->seq_start[t];
		a->tokens[t] = b->tokens[t];
		a->targets[t] = targets ? targets[t] : -1;
	}

	float *x = a->layer[0].x;
	for (int t = 0; t < T; t++)
		memcpy(x + (size_t)t * C, m->embed + (size_t)b->tokens[t] * C, sizeof(float) * (size_t)C);
	for (int l = 0; l < c->num_layers; l++) {
		int keep = train && !a->recompute;
		struct layer_acts *L = &a->layer[keep ? l : 0];
		/* With one buffer set for all layers, x is carried in L->x. */
		if (a->recompute)
			memcpy(a->layer_in[l], L->x, sizeof(float) * (size_t)T * C);
		float *next = l + 1 < c->num_layers && keep ? a->layer[l + 1].x : a->xfinal;
		layer_forward(m, a, L, l, next);
		if (!keep && l + 1 < c->num_layers)
			memcpy(L->x, a->xfinal, sizeof(float) * (size_t)T * C);
	}
	ca_nn_rmsnorm_forward(a->lnf, a->rstdf, a->xfinal, m->norm, c->rms_norm_eps, T, C);
	if (c->critic) {
		if (values)
			for (int t = 0; t < T; t++)
				values[t] = ca_nn_dot(a->lnf + (size_t)t * C, m->score_w, C) +
					    (m->score_b ? m->score_b[0] : 0.0f);
		return 0;
	}
	if (!logprobs && !entropy)
		return 0;
	for (int t0 = 0; t0 < T; t0 += a->chunk) {
		int n = T - t0 < a->chunk ? T - t0 : a->chunk;
		/* Skip chunks nobody asked about (no target and no entropy wanted). */
		int needed = entropy != NULL;
		for (int i = 0; i < n && !needed; i++)
			needed = a->targets[t0 + i] >= 0;
		if (!needed) {
			for (int i = 0; i < n; i++)
				if (logprobs)
					logprobs[t0 + i] = 0;
			continue;
		}
		ca_nn_linear_forward(a->logits, a->lnf + (size_t)t0 * C, m->lm_head, NULL, n, C, V);
		for (int i = 0; i < n; i++) {
			float h;
			float lp = ca_nn_logprob_row(a->logits + (size_t)i * V, V, a->targets[t0 + i],
						     entropy ? &h : NULL);
			if (logprobs)
				logprobs[t0 + i] = lp;
			if (entropy)
				entropy[t0 + i] = h;
		}
	}
	return 0;
}

/* Gradient buffer view of a parameter pointer. */
static float *G(const struct ca_model *m, const float *param)
{
	return param ? m->grad + (param - m->params) : NULL;
}

void ca_model_backward(struct ca_model *m, const float *dlogp, const float *dentropy,
		       const float *dvalue)
{
	struct ca_model_acts *a = m->acts;
	if (!a || !a->train)
		ca_err_die(CA_EXIT_SYSTEM, "ca_model_backward without a training forward");
	if (!m->grad)
		ca_model_zero_grad(m);
	const struct ca_model_config *c = &m->cfg;
	int T = a->T, C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
	int NH = c->num_heads, NKV = c->num_kv_heads, D = c->head_dim;
	int QD = NH * D, KD = NKV * D;
	size_t TC = (size_t)T * C;

	/* Head: dlnf accumulates in a->dln. */
	memset(a->dln, 0, sizeof(float) * TC);
	if (c->critic) {
		for (int t = 0; dvalue && t < T; t++) {
			float g = dvalue[t];
			if (g == 0.0f)
				continue;
			ca_nn_axpy(a->dln + (size_t)t * C, g, m->score_w, C);
			ca_nn_axpy(G(m, m->score_w), g, a->lnf + (size_t)t * C, C);
			if (m->score_b)
				G(m, m->score_b)[0] += g;
		}
	} else {
		for (int t0 = 0; t0 < T; t0 += a->chunk) {
			int n = T - t0 < a->chunk ? T - t0 : a->chunk;
			int needed = 0;
			for (int i = 0; i < n && !needed; i++)
				needed = (dlogp && dlogp[t0 + i] != 0.0f && a->targets[t0 + i] >= 0) ||
					 (dentropy && dentropy[t0 + i] != 0.0f);
			if (!needed)
				continue;
			ca_nn_linear_forward(a->logits, a->lnf + (size_t)t0 * C, m->lm_head, NULL, n, C, V);
			for (int i = 0; i < n; i++)
				ca_nn_logprob_row_backward(a->dlogits + (size_t)i * V, a->logits + (size_t)i * V, V,
							   a->targets[t0 + i], dlogp ? dlogp[t0 + i] : 0.0f,
							   dentropy ? dentropy[t0 + i] : 0.0f);
			ca_nn_linear_backward(a->dln + (size_t)t0 * C, G(m, m->lm_head), NULL, a->dlogits,
					      a->lnf + (size_t)t0 * C, m->lm_head, n, C, V);
		}
	}
	/* Final norm: dx = d(residual stream). */
	memset(a->dx, 0, sizeof(float) * TC);
	ca_nn_rmsnorm_backward(a->dx, G(m, m->norm), a->dln, a->xfinal, m->norm, a->rstdf, T, C);

	for (int l = c->num_layers - 1; l >= 0; l--) {
		struct layer_acts *L = &a->layer[a->recompute ? 0 : l];
		const struct ca_model_layer *W = &m->layers[l];
		if (a->recompute) {
			/* Rebuild this layer's activations from its saved input. */
			memcpy(L->x, a->layer_in[l], sizeof(float) * TC);
			layer_forward(m, a, L, l, a->dln);
		}
		/* MLP: out = xmid + down(h); dx flows to xmid unchanged. */
		memset(a->dh, 0, sizeof(float) * (size_t)T * F);
		ca_nn_linear_backward(a->dh, G(m, W->wdown), NULL, a->dx, L->h, W->wdown, T, F, C);
		memset(a->dgate, 0, sizeof(float) * (size_t)T * F);
		memset(a->dup, 0, sizeof(float) * (size_t)T * F);
		ca_nn_swiglu_backward(a->dgate, a->dup, a->dh, L->gate, L->up, T * F);
		memset(a->dln, 0, sizeof(float) * TC);
		ca_nn_linear_backward(a->dln, G(m, W->wgate), NULL, a->dgate, L->ln2, W->wgate, T, C, F);
		ca_nn_linear_backward(a->dln, G(m, W->wup), NULL, a->dup, L->ln2, W->wup, T, C, F);
		ca_nn_rmsnorm_backward(a->dx, G(m, W->ln2), a->dln, L->xmid, W->ln2, L->rstd2, T, C);
		/* Attention: xmid = x + o(att). */
		memset(a->datt, 0, sizeof(float) * (size_t)T * QD);
		ca_nn_linear_backward(a->datt, G(m, W->wo), G(m, W->bo), a->dx, L->att, W->wo, T, QD, C);
		memset(a->dq, 0, sizeof(float) * (size_t)T * QD);
		memset(a->dk, 0, sizeof(float) * (size_t)T * KD);
		memset(a->dv, 0, sizeof(float) * (size_t)T * KD);
		ca_nn_attention_backward(a->dq, a->dk, a->dv, a->datt, L->probs, L->q, L->k, L->v,
					 a->seq_start, T, NH, NKV, D);
		ca_nn_rope_backward(a->dq, a->pos, m->rope_cos, m->rope_sin, T, NH, D);
		ca_nn_rope_backward(a->dk, a->pos, m->rope_cos, m->rope_sin, T, NKV, D);
		float *dq_proj = a->dq, *dk_proj = a->dk;
		if (c->qk_norm) {
			dq_proj = a->dq_proj;
			dk_proj = a->dk_proj;
			memset(dq_proj, 0, sizeof(float) * (size_t)T * QD);
			memset(dk_proj, 0, sizeof(float) * (size_t)T * KD);
			ca_nn_rmsnorm_backward(dq_proj, G(m, W->q_norm), a->dq, L->q_proj, W->q_norm, L->rstd_q,
					       T * NH, D);
			ca_nn_rmsnorm_backward(dk_proj, G(m, W->k_norm), a->dk, L->k_proj, W->k_norm, L->rstd_k,
					       T * NKV, D);
		}
		memset(a->dln, 0, sizeof(float) * TC);
		ca_nn_linear_backward(a->dln, G(m, W->wq), G(m, W->bq), dq_proj, L->ln1, W->wq, T, C, QD);
		ca_nn_linear_backward(a->dln, G(m, W->wk), G(m, W->bk), dk_proj, L->ln1, W->wk, T, C, KD);
		ca_nn_linear_backward(a->dln, G(m, W->wv), G(m, W->bv), a->dv, L->ln1, W->wv, T, C, KD);
		ca_nn_rmsnorm_backward(a->dx, G(m, W->ln1), a->dln, L->x, W->ln1, L->rstd1, T, C);
	}
	/* Embedding: scatter-add rows. */
	float *demb = G(m, m->embed);
	for (int t = 0; t < T; t++)
		ca_nn_axpy(demb + (size_t)a->tokens[t] * C, 1.0f, a->dx + (size_t)t * C, C);
}
