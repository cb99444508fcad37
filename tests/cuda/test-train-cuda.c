/*
 * test-train-cuda: the CUDA backward and AdamW against the CPU backend on
 * the same checkpoint (built by `make model-cuda` when nvcc is found).
 *
 *   test-train-cuda DIR FWD_TOL GRAD_TOL [critic] < tokens.ndjson
 *
 * Packs every record's "tokens" into one batch (targets: the next token of
 * the same sequence), runs a training forward and the backward of
 *     L = sum_t dlogp[t] logp[t] + dentropy[t] H[t]     (policy)
 *     L = sum_t dvalue[t] V[t]                           (critic: DIR's body
 *         with a fresh value head, as ca_model_to_critic makes it)
 * with fixed per-token weights on both backends, and compares per
 * parameter tensor ||g_gpu - g_cpu|| / ||g_cpu|| (the denominator floored
 * at 1e-4 of the whole gradient's norm, so a tensor whose gradient is
 * nothing but rounding noise does not dominate). Then both backends take
 * two AdamW steps (weight decay, clipping active) from the CPU's gradient,
 * and the updates, first and second moments are compared per tensor the
 * same way. Per-tensor numbers go to stderr, a summary record to stdout;
 * exit 1 when the forward error exceeds FWD_TOL, a gradient's relative
 * error GRAD_TOL, or an AdamW state's 1e-4.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/model_cuda.h"
#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Largest per-tensor relative error of a against b (a - base vs b - base when base is set). */
static double compare(const struct ca_model *m, const char *what, const float *a, const float *b,
		      const float *base, const char **worst)
{
	double total = 0;
	for (size_t i = 0; i < m->nparams; i++) {
		double x = b[i] - (base ? base[i] : 0);
		total += x * x;
	}
	total = sqrt(total);
	double max = 0;
	for (int k = 0; k < m->ntensors; k++) {
		const struct ca_model_tensor *t = &m->tensors[k];
		double d = 0, n = 0;
		for (size_t i = t->offset; i < t->offset + t->numel; i++) {
			double x = (double)a[i] - (base ? base[i] : 0), y = (double)b[i] - (base ? base[i] : 0);
			d += (x - y) * (x - y);
			n += y * y;
		}
		double rel = sqrt(d) / fmax(sqrt(n), 1e-4 * total + 1e-30);
		fprintf(stderr, "test-train-cuda: %s %s rel_err %.3g (norm %.3g)\n", what, t->name, rel, sqrt(n));
		if (rel > max || !isfinite(rel)) {
			max = isfinite(rel) ? rel : INFINITY;
			*worst = t->name;
		}
	}
	return max;
}

static float *copy(const float *x, size_t n)
{
	float *y = ca_xmalloc(sizeof(float) * n);
	memcpy(y, x, sizeof(float) * n);
	return y;
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc != 4 && argc != 5)
		ca_err_die(CA_EXIT_USAGE, "usage: test-train-cuda DIR FWD_TOL GRAD_TOL [critic] < tokens.ndjson");
	double fwd_tol = ca_opt_double("FWD_TOL", argv[2], 0, 1e9);
	double grad_tol = ca_opt_double("GRAD_TOL", argv[3], 0, 1e9);
	int critic = argc == 5 && !strcmp(argv[4], "critic");
	char why[CA_MODEL_WHY];
	struct ca_model *m = ca_model_load(argv[1], why);
	if (!m)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	if (critic)
		ca_model_to_critic(m, 7);
	int cap = 1 << 16, T = 0, nseq = 0;
	int *tokens = ca_xmalloc(sizeof(int) * (size_t)cap), *lens = ca_xmalloc(sizeof(int) * 65536);
	struct ca_ndjson_reader *r = ca_ndjson_open(0, NULL);
	jv rec;
	while (ca_ndjson_next(r, &rec) == CA_NDJSON_RECORD && nseq < 65536) {
		jv toks = ca_json_get(rec, "tokens");
		int n = jv_get_kind(toks) == JV_KIND_ARRAY ? jv_array_length(jv_copy(toks)) : 0, got = 0;
		for (int j = 0; j < n && T < cap; j++, got++) {
			jv x = jv_array_get(jv_copy(toks), j);
			tokens[T++] = (int)jv_number_value(x) % m->cfg.vocab_size;
			jv_free(x);
		}
		if (got > 0)
			lens[nseq++] = got;
		jv_free(toks);
		jv_free(rec);
	}
	ca_ndjson_close(r);
	if (T == 0)
		ca_err_die(CA_EXIT_DATA, "no tokens on stdin");
	int *targets = ca_xmalloc(sizeof(int) * (size_t)T);
	for (int s = 0, t = 0; s < nseq; s++)
		for (int j = 0; j < lens[s]; j++, t++)
			targets[t] = j + 1 < lens[s] ? tokens[t + 1] : -1;
	struct ca_batch b = {.T = T, .tokens = tokens, .nseq = nseq, .seq_len = lens};
	size_t fb = sizeof(float) * (size_t)T;
	float *dlogp = ca_xcalloc((size_t)T, sizeof(float)), *dent = ca_xcalloc((size_t)T, sizeof(float));
	float *dval = ca_xcalloc((size_t)T, sizeof(float));
	for (int t = 0; t < T; t++) {
		if (targets[t] >= 0)
			dlogp[t] = -(1.0f + 0.5f * sinf((float)t)) / (float)T;
		dent[t] = 0.1f * cosf(0.3f * (float)t) / (float)T;
		dval[t] = sinf(0.37f * (float)t + 1) / (float)T;
	}
	float *c1 = ca_xmalloc(fb), *c2 = ca_xmalloc(fb), *g1 = ca_xmalloc(fb), *g2 = ca_xmalloc(fb);

	/* CPU: forward and backward. */
	double t0 = now();
	ca_model_zero_grad(m);
	if (ca_model_forward(m, &b, targets, critic ? NULL : c1, critic ? NULL : c2, critic ? c1 : NULL, 1, why) < 0)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	ca_model_backward(m, critic ? NULL : dlogp, critic ? NULL : dent, critic ? dval : NULL);
	double cpu_s = now() - t0;
	size_t n = m->nparams;
	float *cpu_grad = copy(m->grad, n), *p0 = copy(m->params, n);

	/* GPU: the same. */
	struct ca_cuda_model *g = ca_cuda_model_upload(m, why);
	if (!g)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	t0 = now();
	if (ca_cuda_model_zero_grad(g, why) < 0 ||
	    ca_cuda_model_forward_train(g, &b, targets, critic ? NULL : g1, critic ? NULL : g2, critic ? g1 : NULL, why) < 0 ||
	    ca_cuda_model_backward(g, critic ? NULL : dlogp, critic ? NULL : dent, critic ? dval : NULL, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	double gpu_s = now() - t0;
	if (ca_cuda_model_download(g, m, 1, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	double e1 = 0, e2 = 0;
	for (int t = 0; t < T; t++) {
		if (!critic && targets[t] < 0)
			continue;
		e1 = fmax(e1, fabs((double)c1[t] - g1[t]));
		if (!critic)
			e2 = fmax(e2, fabs((double)c2[t] - g2[t]));
	}
	const char *grad_worst = "", *adam_worst = "";
	double grad_err = compare(m, "grad", m->grad, cpu_grad, NULL, &grad_worst);
	double norm_cpu = 0, norm_gpu = 0;
	for (size_t i = 0; i < n; i++) {
		norm_cpu += (double)cpu_grad[i] * cpu_grad[i];
		norm_gpu += (double)m->grad[i] * m->grad[i];
	}
	norm_cpu = sqrt(norm_cpu);
	norm_gpu = sqrt(norm_gpu);

	/* Two AdamW steps from the CPU's gradient on both backends. */
	struct ca_adamw opt = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
			       .max_grad_norm = 0.5 * norm_cpu};
	memcpy(m->grad, cpu_grad, sizeof(float) * n);
	memcpy(m->params, p0, sizeof(float) * n);
	double gn_cpu = 0, gn_gpu = 0;
	for (int step = 0; step < 2; step++) {
		gn_cpu = ca_model_adamw_step(m, &opt);
		if (ca_cuda_model_set_grad(g, cpu_grad, why) < 0 || ca_cuda_model_adamw_step(g, &opt, &gn_gpu, why) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	}
	float *pc = copy(m->params, n), *mc = copy(m->adam_m, n), *vc = copy(m->adam_v, n);
	if (ca_cuda_model_download(g, m, 0, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	double adam_err = compare(m, "adamw_update", m->params, pc, p0, &adam_worst);
	const char *w2 = "", *w3 = "";
	double e_m = compare(m, "adamw_m", m->adam_m, mc, NULL, &w2);
	double e_v = compare(m, "adamw_v", m->adam_v, vc, NULL, &w3);
	if (e_m > adam_err) {
		adam_err = e_m;
		adam_worst = w2;
	}
	if (e_v > adam_err) {
		adam_err = e_v;
		adam_worst = w3;
	}
	printf("{\"tokens\":%d,\"sequences\":%d,\"critic\":%s,\"max_abs_err_%s\":%.3g,", T, nseq,
	       critic ? "true" : "false", critic ? "value" : "logprob", e1);
	if (!critic)
		printf("\"max_abs_err_entropy\":%.3g,", e2);
	printf("\"grad_max_rel_err\":%.3g,\"grad_worst\":\"%s\",\"grad_norm_cpu\":%.6g,\"grad_norm_gpu\":%.6g,"
	       "\"adamw_max_rel_err\":%.3g,\"adamw_worst\":\"%s\",\"adamw_grad_norm_cpu\":%.6g,\"adamw_grad_norm_gpu\":%.6g,"
	       "\"cpu_s\":%.3f,\"gpu_s\":%.3f}\n",
	       grad_err, grad_worst, norm_cpu, norm_gpu, adam_err, adam_worst, gn_cpu, gn_gpu, cpu_s, gpu_s);
	int ok = e1 <= fwd_tol && e2 <= fwd_tol && grad_err <= grad_tol && adam_err <= 1e-4 &&
		 fabs(gn_cpu - gn_gpu) <= 1e-4 * gn_cpu;
	ca_cuda_model_free(g);
	ca_model_free(m);
	return ok ? 0 : 1;
}
