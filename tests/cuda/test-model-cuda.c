/*
 * test-model-cuda: the CUDA forward against the CPU forward on the same
 * checkpoint (built by `make model-cuda` when nvcc is found).
 *
 *   test-model-cuda DIR TOLERANCE < tokens.ndjson
 *
 * Packs every record's "tokens" into one batch, runs both backends and
 * prints {"max_abs_err_logprob", "max_abs_err_entropy" | "max_abs_err_value",
 * "cpu_s", "gpu_s"}; exits 1 when an error exceeds TOLERANCE.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc != 3)
		ca_err_die(CA_EXIT_USAGE, "usage: test-model-cuda DIR TOLERANCE < tokens.ndjson");
	double tol = ca_opt_double("TOLERANCE", argv[2], 0, 1e9);
	char why[CA_MODEL_WHY];
	struct ca_model *m = ca_model_load(argv[1], why);
	if (!m)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	int cap = 1 << 16, T = 0, nseq = 0;
	int *tokens = ca_xmalloc(sizeof(int) * (size_t)cap), *lens = ca_xmalloc(sizeof(int) * 65536);
	struct ca_ndjson_reader *r = ca_ndjson_open(0, NULL);
	jv rec;
	while (ca_ndjson_next(r, &rec) == CA_NDJSON_RECORD && nseq < 65536) {
		jv toks = ca_json_get(rec, "tokens");
		int n = jv_get_kind(toks) == JV_KIND_ARRAY ? jv_array_length(jv_copy(toks)) : 0;
		for (int j = 0; j < n && T < cap; j++) {
			jv x = jv_array_get(jv_copy(toks), j);
			tokens[T++] = (int)jv_number_value(x);
			jv_free(x);
		}
		if (n > 0)
			lens[nseq++] = n;
		jv_free(toks);
		jv_free(rec);
	}
	ca_ndjson_close(r);
	int *targets = ca_xmalloc(sizeof(int) * (size_t)T);
	for (int s = 0, t = 0; s < nseq; s++)
		for (int j = 0; j < lens[s]; j++, t++)
			targets[t] = j + 1 < lens[s] ? tokens[t + 1] : -1;
	struct ca_batch b = {.T = T, .tokens = tokens, .nseq = nseq, .seq_len = lens};
	float *a1 = ca_xcalloc((size_t)T, sizeof(float)), *a2 = ca_xcalloc((size_t)T, sizeof(float));
	float *g1 = ca_xcalloc((size_t)T, sizeof(float)), *g2 = ca_xcalloc((size_t)T, sizeof(float));
	int critic = m->cfg.critic;
	double t0 = now();
	if (ca_model_forward(m, &b, targets, critic ? NULL : a1, critic ? NULL : a2, critic ? a1 : NULL, 0, why) < 0)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	double cpu_s = now() - t0;
	struct ca_cuda_model *g = ca_cuda_model_upload(m, why);
	if (!g)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	t0 = now();
	if (ca_cuda_model_forward(g, &b, targets, critic ? NULL : g1, critic ? NULL : g2, critic ? g1 : NULL, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	double gpu_s = now() - t0;
	double e1 = 0, e2 = 0;
	for (int t = 0; t < T; t++) {
		if (!critic && targets[t] < 0)
			continue;
		e1 = fmax(e1, fabs((double)a1[t] - g1[t]));
		if (!critic)
			e2 = fmax(e2, fabs((double)a2[t] - g2[t]));
	}
	if (critic)
		printf("{\"tokens\":%d,\"max_abs_err_value\":%.3g,\"cpu_s\":%.3f,\"gpu_s\":%.3f}\n", T, e1, cpu_s, gpu_s);
	else
		printf("{\"tokens\":%d,\"max_abs_err_logprob\":%.3g,\"max_abs_err_entropy\":%.3g,\"cpu_s\":%.3f,\"gpu_s\":%.3f}\n",
		       T, e1, e2, cpu_s, gpu_s);
	ca_cuda_model_free(g);
	ca_model_free(m);
	return e1 <= tol && e2 <= tol ? 0 : 1;
}
