/*
 * model_sample: token generation with a key/value cache (CPU fp32); see
 * ca_model_generate in model.h. The prompt is run in one pass that fills
 * the cache, then each new token costs one pass over a single position.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model.h"
#include "nn.h"
#include "splitmix.h"

struct kv_cache {
	int cap;
	float **k, **v;   /* per layer [cap, NKV*D], keys after rotary embedding */
};

/*
 * Run tokens[0..n) at positions start..start+n-1 through the model,
 * appending to the cache; write the logits of the last token to logits[V].
 */
static void cached_forward(struct ca_model *m, struct kv_cache *kv, const int *tokens, int n, int start,
			   float *logits)
{
	const struct ca_model_config *c = &m->cfg;
	int C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
	int NH = c->num_heads, NKV = c->num_kv_heads, D = c->head_dim, group = NH / NKV;
	int QD = NH * D, KD = NKV * D;
	size_t nC = (size_t)n * C;
	float *x = ca_xmalloc(sizeof(float) * nC), *ln = ca_xmalloc(sizeof(float) * nC);
	float *rstd = ca_xmalloc(sizeof(float) * (size_t)n);
	float *head_rstd = ca_xmalloc(sizeof(float) * (size_t)n * NH);
	float *q = ca_xmalloc(sizeof(float) * (size_t)n * QD), *att = ca_xmalloc(sizeof(float) * (size_t)n * QD);
	float *tmp = ca_xmalloc(sizeof(float) * nC);
	float *gate = ca_xmalloc(sizeof(float) * (size_t)n * F), *up = ca_xmalloc(sizeof(float) * (size_t)n * F);
	float *scores = ca_xmalloc(sizeof(float) * (size_t)(start + n));
	int *pos = ca_xmalloc(sizeof(int) * (size_t)n);
	for (int i = 0; i < n; i++) {
		pos[i] = start + i;
		memcpy(x + (size_t)i * C, m->embed + (size_t)tokens[i] * C, sizeof(float) * (size_t)C);
	}
	float scale = 1.0f / sqrtf((float)D);
	for (int l = 0; l < c->num_layers; l++) {
		const struct ca_model_layer *W = &m->layers[l];
		float *kc = kv->k[l] + (size_t)start * KD, *vc = kv->v[l] + (size_t)start * KD;
		ca_nn_rmsnorm_forward(ln, rstd, x, W->ln1, c->rms_norm_eps, n, C);
		ca_nn_linear_forward(q, ln, W->wq, W->bq, n, C, QD);
		ca_nn_linear_forward(kc, ln, W->wk, W->bk, n, C, KD);
		ca_nn_linear_forward(vc, ln, W->wv, W->bv, n, C, KD);
		if (c->qk_norm) {
			/* In place: the norm reads each head's row before writing it. */
			ca_nn_rmsnorm_forward(q, head_rstd, q, W->q_norm, c->rms_norm_eps, n * NH, D);
			ca_nn_rmsnorm_forward(kc, head_rstd, kc, W->k_norm, c->rms_norm_eps, n * NKV, D);
		}
		ca_nn_rope_forward(q, pos, m->rope_cos, m->rope_sin, n, NH, D);
		ca_nn_rope_forward(kc, pos, m->rope_cos, m->rope_sin, n, NKV, D);
		for (int i = 0; i < n; i++) {
			int len = start + i + 1;
			for (int h = 0; h < NH; h++) {
				int g = h / group;
				const float *qh = q + ((size_t)i * NH + h) * D;
				float mx = -INFINITY;
				for (int j = 0; j < len; j++) {
					scores[j] = ca_nn_dot(qh, kv->k[l] + (size_t)j * KD + (size_t)g * D, D) * scale;
					if (scores[j] > mx)
						mx = scores[j];
				}
				double sum = 0;
				for (int j = 0; j < len; j++)
					sum += scores[j] = expf(scores[j] - mx);
				float inv = (float)(1.0 / sum);
				float *o = att + ((size_t)i * NH + h) * D;
				memset(o, 0, sizeof(float) * (size_t)D);
				for (int j = 0; j < len; j++)
					ca_nn_axpy(o, scores[j] * inv, kv->v[l] + (size_t)j * KD + (size_t)g * D, D);
			}
		}
		ca_nn_linear_forward(tmp, att, W->wo, W->bo, n, QD, C);
		for (size_t i = 0; i < nC; i++)
			x[i] += tmp[i];
		ca_nn_rmsnorm_forward(ln, rstd, x, W->ln2, c->rms_norm_eps, n, C);
		ca_nn_linear_forward(gate, ln, W->wgate, NULL, n, C, F);
		ca_nn_linear_forward(up, ln, W->wup, NULL, n, C, F);
		ca_nn_swiglu_forward(gate, gate, up, n * F);
		ca_nn_linear_forward(tmp, gate, W->wdown, NULL, n, F, C);
		for (size_t i = 0; i < nC; i++)
			x[i] += tmp[i];
	}
	const float *last = x + (size_t)(n - 1) * C;
	ca_nn_rmsnorm_forward(ln, rstd, last, m->norm, c->rms_norm_eps, 1, C);
	ca_nn_linear_forward(logits, ln, m->lm_head, NULL, 1, C, V);
	free(x); free(ln); free(rstd); free(head_rstd); free(q); free(att); free(tmp); free(gate); free(up);
	free(scores); free(pos);
}

struct prob_index {
	float p;
	int i;
};

static int by_prob_desc(const void *a, const void *b)
{
	const struct prob_index *x = a, *y = b;
	if (x->p != y->p)
		return x->p < y->p ? 1 : -1;
	return x->i - y->i;
}

/* Pick the next token; *logprob gets its log-probability under the distribution sampled. */
static int pick(float *logits, int V, const struct ca_sample_params *p, uint64_t *rng,
		struct prob_index *scratch, float *logprob)
{
	if (p->temperature <= 0) {
		int best = 0;
		for (int j = 1; j < V; j++)
			if (logits[j] > logits[best])
				best = j;
		*logprob = ca_nn_logprob_row(logits, V, best, NULL);
		return best;
	}
	float mx = -INFINITY;
	for (int j = 0; j < V; j++) {
		logits[j] /= (float)p->temperature;
		if (logits[j] > mx)
			mx = logits[j];
	}
	double sum = 0;
	for (int j = 0; j < V; j++) {
		scratch[j].p = expf(logits[j] - mx);
		scratch[j].i = j;
		sum += scratch[j].p;
	}
	int keep = V;
	double kept = sum;
	if (p->top_p < 1.0) {
		qsort(scratch, (size_t)V, sizeof *scratch, by_prob_desc);
		double cum = 0;
		for (keep = 0; keep < V;) {
			cum += scratch[keep].p / sum;
			keep++;
			if (cum >= p->top_p)
				break;
		}
		kept = 0;
		for (int j = 0; j < keep; j++)
			kept += scratch[j].p;
	}
	double u = ca_splitmix_unit(rng) * kept, acc = 0;
	int chosen = scratch[keep - 1].i;
	float chosen_p = scratch[keep - 1].p;
	for (int j = 0; j < keep; j++) {
		acc += scratch[j].p;
		if (u < acc) {
			chosen = scratch[j].i;
			chosen_p = scratch[j].p;
			break;
		}
	}
	*logprob = (float)log(chosen_p / kept);
	return chosen;
}

int ca_model_generate(struct ca_model *m, const int *prompt, int n, const struct ca_sample_params *p,
		      ca_stop_fn stop_fn, void *stop_ctx, int *out_tokens, float *out_logprobs,
		      char why[CA_MODEL_WHY])
{
	const struct ca_model_config *c = &m->cfg;
	int V = c->vocab_size, KD = c->num_kv_heads * c->head_dim;
	if (c->critic) {
		ca_err_why(why, CA_MODEL_WHY, "a critic checkpoint cannot generate");
		return -1;
	}
	if (n <= 0) {
		ca_err_why(why, CA_MODEL_WHY, "empty prompt");
		return -1;
	}
	for (int i = 0; i < n; i++)
		if (prompt[i] < 0 || prompt[i] >= V) {
			ca_err_why(why, CA_MODEL_WHY, "prompt token %d is outside the vocabulary of %d", prompt[i], V);
			return -1;
		}
	int max_new = p->max_tokens;
	if (n + max_new > c->max_positions)
		max_new = c->max_positions - n;
	if (max_new < 0) {
		ca_err_why(why, CA_MODEL_WHY, "prompt of %d tokens exceeds max_position_embeddings %d", n, c->max_positions);
		return -1;
	}
	struct kv_cache kv = {.cap = n + max_new};
	kv.k = ca_xcalloc((size_t)c->num_layers, sizeof *kv.k);
	kv.v = ca_xcalloc((size_t)c->num_layers, sizeof *kv.v);
	for (int l = 0; l < c->num_layers; l++) {
		kv.k[l] = ca_xmalloc(sizeof(float) * (size_t)kv.cap * KD + 1);
		kv.v[l] = ca_xmalloc(sizeof(float) * (size_t)kv.cap * KD + 1);
	}
	float *logits = ca_xmalloc(sizeof(float) * (size_t)V);
	struct prob_index *scratch = ca_xmalloc(sizeof *scratch * (size_t)V);
	uint64_t rng = p->seed;
	int produced = 0;
	if (max_new > 0)
		cached_forward(m, &kv, prompt, n, 0, logits);
	while (produced < max_new) {
		float lp;
		int tok = pick(logits, V, p, &rng, scratch, &lp);
		out_tokens[produced] = tok;
		if (out_logprobs)
			out_logprobs[produced] = lp;
		produced++;
		int stop = 0;
		for (int s = 0; s < p->nstop_tokens; s++)
			stop |= tok == p->stop_tokens[s];
		if (!stop && stop_fn)
			stop = stop_fn(out_tokens, produced, stop_ctx);
		if (stop || produced == max_new)
			break;
		cached_forward(m, &kv, &tok, 1, n + produced - 1, logits);
	}
	for (int l = 0; l < c->num_layers; l++) {
		free(kv.k[l]);
		free(kv.v[l]);
	}
	free(kv.k);
	free(kv.v);
	free(logits);
	free(scratch);
	return produced;
}
