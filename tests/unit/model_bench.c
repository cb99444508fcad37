/*
 * model_bench: CPU throughput of the policy engine on a random Qwen2-shaped
 * checkpoint it writes itself (no torch needed).
 *
 *   test-model_bench DIR HIDDEN LAYERS VOCAB TOKENS
 *
 * Writes DIR/config.json and DIR/model.safetensors (heads of 64 dims, 4
 * query heads per key/value head, intermediate = 8/3 hidden rounded to 64),
 * then times a forward pass with log-probs, a forward+backward pass and an
 * AdamW step over TOKENS tokens packed as 4 sequences, and greedy sampling
 * of 32 tokens after a 32-token prompt (TOKENS if fewer). One JSON line of results.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "model.h"
#include "opt.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);  /* CPU time: the test machines are shared */
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc != 6)
		ca_err_die(CA_EXIT_USAGE, "usage: test-model_bench DIR HIDDEN LAYERS VOCAB TOKENS");
	const char *dir = argv[1];
	int C = (int)ca_opt_long("HIDDEN", argv[2], 64, 8192);
	int L = (int)ca_opt_long("LAYERS", argv[3], 1, 128);
	int V = (int)ca_opt_long("VOCAB", argv[4], 16, 1 << 20);
	int T = (int)ca_opt_long("TOKENS", argv[5], 4, 1 << 20);
	int NH = C / 64, NKV = NH >= 4 ? NH / 4 : 1;
	int F = (C * 8 / 3 + 63) / 64 * 64;
	struct ca_model_config shape = {.hidden_size = C, .intermediate_size = F, .num_layers = L, .num_heads = NH,
					.num_kv_heads = NKV, .vocab_size = V, .max_positions = T + 64};
	char why[CA_MODEL_WHY];
	if (ca_model_write_random(dir, &shape, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	struct ca_model *m = ca_model_load(dir, why);
	if (!m)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	int *tokens = ca_xmalloc(sizeof(int) * (size_t)T), *targets = ca_xmalloc(sizeof(int) * (size_t)T);
	for (int t = 0; t < T; t++)
		tokens[t] = (int)((t * 2654435761u) % (unsigned)V);
	int lens[4] = {T / 4, T / 4, T / 4, T - 3 * (T / 4)};
	for (int t = 0; t < T; t++)
		targets[t] = t + 1 < T ? tokens[t + 1] : -1;
	struct ca_batch b = {.T = T, .tokens = tokens, .nseq = 4, .seq_len = lens};
	float *logp = ca_xmalloc(sizeof(float) * (size_t)T), *dlogp = ca_xmalloc(sizeof(float) * (size_t)T);
	for (int t = 0; t < T; t++)
		dlogp[t] = -1.0f / (float)T;

	double t0 = now();
	if (ca_model_forward(m, &b, targets, logp, NULL, NULL, 0, why) < 0)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	double forward_s = now() - t0;
	t0 = now();
	ca_model_forward(m, &b, targets, logp, NULL, NULL, 1, why);
	ca_model_zero_grad(m);
	ca_model_backward(m, dlogp, NULL, NULL);
	double train_s = now() - t0;
	struct ca_adamw opt = {.lr = 1e-5, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .max_grad_norm = 1};
	t0 = now();
	ca_model_adamw_step(m, &opt);
	double adam_s = now() - t0;
	int gen[32];
	struct ca_sample_params sp = {.temperature = 0, .top_p = 1, .max_tokens = 32};
	t0 = now();
	int got = ca_model_generate(m, tokens, T < 32 ? T : 32, &sp, NULL, NULL, gen, NULL, why);
	double gen_s = now() - t0;
	/* Matmul flops: 2 per weight per token, attention ignored; backward twice that. */
	double weights = (double)m->nparams;  /* the tied head's matmul counted once, the embedding lookup not */
	double gflop_fwd = 2.0 * weights * T / 1e9;
	printf("{\"params\":%zu,\"hidden\":%d,\"layers\":%d,\"vocab\":%d,\"tokens\":%d,"
	       "\"forward_tokens_per_s\":%.1f,\"forward_gflops\":%.2f,"
	       "\"train_tokens_per_s\":%.1f,\"train_gflops\":%.2f,\"adamw_s\":%.3f,"
	       "\"sample_tokens_per_s\":%.2f}\n",
	       m->nparams, C, L, V, T, T / forward_s, gflop_fwd / forward_s, T / train_s,
	       3 * gflop_fwd / train_s, adam_s, got / gen_s);
	free(tokens); free(targets); free(logp); free(dlogp);
	ca_model_free(m);
	return 0;
}
