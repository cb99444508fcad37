/*
 * sample_bench: the GPU sampler's throughput (lib/model/cuda/model_cuda_sample.cu,
 * opened through lib/model/device.c), for bench/bench-policy.sh and the device runs.
 *
 *   test-sample_bench DIR BATCH PROMPT NEW
 *
 * BATCH prompts of PROMPT pseudo-random tokens, each continued by exactly
 * NEW tokens (no end token), all decoded together; greedy, then sampled at
 * temperature 1 with top-p 0.9. Prints one JSON line: load and upload
 * seconds, the prompt-only time (NEW = 1), and for each mode the generated
 * tokens, the seconds, tokens per second and a checksum of the tokens (to
 * compare runs, e.g. with and without CA_CUDA_GRAPHS). Exit 4 without a GPU
 * backend.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "device.h"
#include "err.h"
#include "opt.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Generate for all requests; returns the seconds taken, the tokens made and their checksum. */
static double timed(const struct ca_cuda_api *api, struct ca_cuda_sampler *s, struct ca_sample_request *r,
		    int n, int max_new, double temperature, double top_p, long *tokens, uint64_t *sum)
{
	char why[CA_MODEL_WHY];
	for (int i = 0; i < n; i++) {
		r[i].params.max_tokens = max_new;
		r[i].params.temperature = temperature;
		r[i].params.top_p = top_p;
		r[i].params.seed = (uint64_t)i + 1;
	}
	double t0 = now();
	if (api->sampler_generate(s, r, n, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	double t = now() - t0;
	*tokens = 0;
	*sum = 0;
	for (int i = 0; i < n; i++) {
		if (r[i].produced < 0)
			ca_err_die(CA_EXIT_SYSTEM, "request %d: %s", i, r[i].why);
		*tokens += r[i].produced;
		for (int j = 0; j < r[i].produced; j++)
			*sum = *sum * 1000003u + (uint64_t)r[i].out_tokens[j];
	}
	return t;
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc != 5)
		ca_err_die(CA_EXIT_USAGE, "usage: test-sample_bench DIR BATCH PROMPT NEW");
	int batch = (int)ca_opt_long("BATCH", argv[2], 1, 4096);
	int prompt = (int)ca_opt_long("PROMPT", argv[3], 1, 1 << 20);
	int max_new = (int)ca_opt_long("NEW", argv[4], 1, 1 << 20);
	char why[CA_MODEL_WHY];
	const struct ca_cuda_api *api = ca_device_cuda(why);
	if (!api || !api->sampler_new)
		ca_err_die(CA_EXIT_SYSTEM, "%s", api ? "the CUDA backend has no sampler" : why);
	double t0 = now();
	struct ca_model *m = ca_model_load(argv[1], why);
	if (!m)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	double load_s = now() - t0;
	t0 = now();
	struct ca_cuda_sampler *s = api->sampler_new(m, batch, prompt + max_new, 0, why);
	if (!s)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	double upload_s = now() - t0;
	int V = m->cfg.vocab_size;
	int *prompts = ca_xmalloc(sizeof(int) * (size_t)batch * (size_t)prompt);
	uint64_t x = 12345;
	for (size_t i = 0; i < (size_t)batch * (size_t)prompt; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		prompts[i] = (int)((x >> 33) % (uint64_t)V);
	}
	struct ca_sample_request *r = ca_xcalloc((size_t)batch, sizeof *r);
	for (int i = 0; i < batch; i++) {
		r[i].prompt = prompts + (size_t)i * prompt;
		r[i].n = prompt;
		r[i].out_tokens = ca_xmalloc(sizeof(int) * (size_t)max_new);
		r[i].out_logprobs = ca_xmalloc(sizeof(float) * (size_t)max_new);
	}
	long tokens;
	uint64_t sum, greedy_sum, sampled_sum;
	/* Warm-up: cuBLAS heuristics, lazy loading, and every decoding batch size's graph. */
	timed(api, s, r, batch, 2, 0, 1, &tokens, &sum);
	double prefill_s = timed(api, s, r, batch, 1, 0, 1, &tokens, &sum);
	long greedy_tokens, sampled_tokens;
	double greedy_s = timed(api, s, r, batch, max_new, 0, 1, &greedy_tokens, &greedy_sum);
	double sampled_s = timed(api, s, r, batch, max_new, 1, 0.9, &sampled_tokens, &sampled_sum);
	printf("{\"batch\":%d,\"prompt\":%d,\"new\":%d,\"load_s\":%.3f,\"upload_s\":%.3f,\"prefill_s\":%.4f,"
	       "\"greedy\":{\"tokens\":%ld,\"seconds\":%.4f,\"tokens_per_s\":%.1f,\"checksum\":\"%016llx\"},"
	       "\"top_p\":{\"tokens\":%ld,\"seconds\":%.4f,\"tokens_per_s\":%.1f,\"checksum\":\"%016llx\"}}\n",
	       batch, prompt, max_new, load_s, upload_s, prefill_s, greedy_tokens, greedy_s,
	       (double)greedy_tokens / greedy_s, (unsigned long long)greedy_sum, sampled_tokens, sampled_s,
	       (double)sampled_tokens / sampled_s, (unsigned long long)sampled_sum);
	for (int i = 0; i < batch; i++) {
		free(r[i].out_tokens);
		free(r[i].out_logprobs);
	}
	free(r);
	free(prompts);
	api->sampler_free(s);
	ca_model_free(m);
	return ca_err_finish(CA_EXIT_OK);
}
