/*
 * bench-train-cuda: forward+backward (+AdamW) throughput of the CUDA
 * backend on a Qwen2-shaped checkpoint (built by `make model-cuda`).
 *
 *   bench-train-cuda DIR TOKENS SEQ_LEN STEPS
 *
 * When DIR has no config.json, writes there a random Qwen2-0.5B-shaped
 * checkpoint (hidden 896, 24 layers, 14 heads, 2 key/value heads,
 * intermediate 4864, vocabulary 151936, tied, q/k/v biases; bf16), which
 * transformers loads too (lib/py/ca_bench_train.py times the same step).
 * Packs TOKENS tokens as sequences of SEQ_LEN (the last one shorter), runs
 * one untimed step and STEPS timed ones of: zero gradient, training
 * forward with log-probs, backward of the mean negative log-likelihood,
 * AdamW. One JSON line: tokens/s of forward+backward and of the whole
 * step, model FLOPs per step (matmuls 6 N T, causal attention 12 D NH
 * layers sum L(L+1)/2, no recomputation), MFU against the H200's 989
 * dense bf16 TFLOP/s, peak device memory held by the backend.
 *
 * With CA_CUPTI_LIB naming $(BIN)/libca-cupti.so, the timed steps run
 * under CUPTI kernel tracing and stderr gets one line per kernel, most
 * time first: "kernel MS_PER_STEP CALLS_PER_STEP NAME".
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cuda/model_cuda.h"
#include "err.h"
#include "opt.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// lib/eval/cupti.h's functions, looked up in the library CA_CUPTI_LIB names.
struct tracer {
	int (*init)(void), (*start)(void), (*stop)(void), (*count)(void);
	const char *(*name)(int);
	unsigned long long (*calls)(int), (*total_ns)(int);
};

static int tracer_open(struct tracer *t)
{
	const char *path = getenv("CA_CUPTI_LIB");
	if (!path || !*path)
		return -1;
	void *h = dlopen(path, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "bench-train-cuda: %s\n", dlerror());
		return -1;
	}
	*(void **)&t->init = dlsym(h, "ca_cupti_init");
	*(void **)&t->start = dlsym(h, "ca_cupti_start");
	*(void **)&t->stop = dlsym(h, "ca_cupti_stop");
	*(void **)&t->count = dlsym(h, "ca_cupti_count");
	*(void **)&t->name = dlsym(h, "ca_cupti_name");
	*(void **)&t->calls = dlsym(h, "ca_cupti_calls");
	*(void **)&t->total_ns = dlsym(h, "ca_cupti_total_ns");
	if (!t->init || !t->start || !t->stop || !t->count || !t->name || !t->calls || !t->total_ns || t->init() < 0) {
		fprintf(stderr, "bench-train-cuda: %s: no kernel tracing\n", path);
		return -1;
	}
	return 0;
}

static void tracer_report(struct tracer *t, int steps)
{
	int n = t->count();
	int *order = ca_xmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = 1; i < n; i++)  // insertion sort, most time first
		for (int j = i; j > 0 && t->total_ns(order[j]) > t->total_ns(order[j - 1]); j--) {
			int x = order[j];
			order[j] = order[j - 1];
			order[j - 1] = x;
		}
	for (int i = 0; i < n; i++)
		fprintf(stderr, "kernel %.3f %.0f %.150s\n", 1e-6 * (double)t->total_ns(order[i]) / steps,
			(double)t->calls(order[i]) / steps, t->name(order[i]));
	free(order);
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc != 5)
		ca_err_die(CA_EXIT_USAGE, "usage: bench-train-cuda DIR TOKENS SEQ_LEN STEPS");
	const char *dir = argv[1];
	int T = (int)ca_opt_long("TOKENS", argv[2], 2, 1 << 22);
	int S = (int)ca_opt_long("SEQ_LEN", argv[3], 2, 1 << 22);
	int steps = (int)ca_opt_long("STEPS", argv[4], 1, 1000);
	char path[4096], why[CA_MODEL_WHY];
	snprintf(path, sizeof path, "%s/config.json", dir);
	struct stat st;
	double t0 = now();
	if (stat(path, &st) < 0) {
		struct ca_model_config qwen2_05b = {.hidden_size = 896, .intermediate_size = 4864, .num_layers = 24,
						    .num_heads = 14, .num_kv_heads = 2, .vocab_size = 151936,
						    .max_positions = 32768};
		if (ca_model_write_random(dir, &qwen2_05b, why) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	}
	struct ca_model *m = ca_model_load(dir, why);
	if (!m)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	double load_s = now() - t0;
	const struct ca_model_config *c = &m->cfg;
	int nseq = (T + S - 1) / S;
	int *lens = ca_xmalloc(sizeof(int) * (size_t)nseq), *tokens = ca_xmalloc(sizeof(int) * (size_t)T);
	int *targets = ca_xmalloc(sizeof(int) * (size_t)T);
	double attn_pairs = 0;
	for (int s = 0; s < nseq; s++) {
		lens[s] = s + 1 < nseq ? S : T - S * (nseq - 1);
		attn_pairs += 0.5 * (double)lens[s] * (lens[s] + 1);
	}
	for (int t = 0; t < T; t++)
		tokens[t] = (int)((t * 2654435761u) % (unsigned)c->vocab_size);
	for (int s = 0, t = 0; s < nseq; s++)
		for (int j = 0; j < lens[s]; j++, t++)
			targets[t] = j + 1 < lens[s] ? tokens[t + 1] : -1;
	float *logp = ca_xmalloc(sizeof(float) * (size_t)T), *dlogp = ca_xmalloc(sizeof(float) * (size_t)T);
	for (int t = 0; t < T; t++)
		dlogp[t] = targets[t] >= 0 ? -1.0f / (float)T : 0.0f;
	struct ca_batch b = {.T = T, .tokens = tokens, .nseq = nseq, .seq_len = lens};
	struct ca_cuda_model *g = ca_cuda_model_upload(m, why);
	if (!g)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	struct ca_adamw opt = {.lr = 1e-6, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
			       .max_grad_norm = 1};
	double fb_s = 0, fwd_s = 0, step_s = 0, gn = 0, loss = 0;
	struct tracer tr = {0};
	int tracing = tracer_open(&tr) == 0;
	for (int i = 0; i <= steps; i++) {
		if (i == 1 && tracing)
			tracing = tr.start() == 0;
		double a = now();
		if (ca_cuda_model_zero_grad(g, why) < 0 ||
		    ca_cuda_model_forward_train(g, &b, targets, logp, NULL, NULL, why) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
		double f = now();
		if (ca_cuda_model_backward(g, dlogp, NULL, NULL, why) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
		double mid = now();
		if (ca_cuda_model_adamw_step(g, &opt, &gn, why) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
		double e = now();
		if (i > 0) {
			fb_s += mid - a;
			fwd_s += f - a;
			step_s += e - a;
		}
		loss = 0;
		for (int t = 0; t < T; t++)
			loss += dlogp[t] * logp[t];
	}
	if (tracing && tr.stop() == 0)
		tracer_report(&tr, steps);
	fb_s /= steps;
	fwd_s /= steps;
	step_s /= steps;
	double matmul_params = (double)c->vocab_size * c->hidden_size;
	double C = c->hidden_size, QD = (double)c->num_heads * c->head_dim, KD = (double)c->num_kv_heads * c->head_dim;
	matmul_params += c->num_layers * (C * QD * 2 + 2 * C * KD + 3 * C * c->intermediate_size);
	double flops = 6 * matmul_params * T + 12.0 * c->head_dim * c->num_heads * c->num_layers * attn_pairs;
	printf("{\"backend\":\"ca-cuda\",\"tokens\":%d,\"seq_len\":%d,\"sequences\":%d,\"params\":%zu,\"steps\":%d,"
	       "\"fwd_s\":%.4f,\"fwd_bwd_s\":%.4f,\"step_s\":%.4f,\"fwd_bwd_tokens_per_s\":%.0f,\"step_tokens_per_s\":%.0f,"
	       "\"flops_per_step\":%.4g,\"mfu\":%.4f,\"peak_bytes\":%zu,\"loss\":%.6g,\"grad_norm\":%.6g,\"load_s\":%.2f}\n",
	       T, S, nseq, m->nparams, steps, fwd_s, fb_s, step_s, T / fb_s, T / step_s, flops, flops / fb_s / 989e12,
	       ca_cuda_model_peak_bytes(), loss, gn, load_s);
	ca_cuda_model_free(g);
	ca_model_free(m);
	return 0;
}
