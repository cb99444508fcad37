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
#include "safetensors.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);  /* CPU time: the test machines are shared */
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 12345;
static float small_random(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return ((float)(rng >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
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
	char path[4096];
	snprintf(path, sizeof path, "mkdir -p '%s'", dir);
	if (system(path) != 0)
		ca_err_die(CA_EXIT_SYSTEM, "cannot create %s", dir);
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *fp = fopen(path, "w");
	if (!fp)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", path);
	fprintf(fp, "{\"model_type\":\"qwen2\",\"hidden_size\":%d,\"intermediate_size\":%d,"
		"\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
		"\"vocab_size\":%d,\"max_position_embeddings\":%d,\"rms_norm_eps\":1e-6,"
		"\"rope_theta\":1000000.0,\"tie_word_embeddings\":true,\"hidden_act\":\"silu\"}\n",
		C, F, L, NH, NKV, V, T + 64);
	fclose(fp);
	/* Names and shapes as the model expects them. */
	int n = 2 + 12 * L;
	struct ca_st_out *out = ca_xcalloc((size_t)n, sizeof *out);
	char (*names)[96] = ca_xcalloc((size_t)n, sizeof *names);
	int k = 0;
	int D = 64, QD = NH * D, KD = NKV * D;
#define T2(nm, a, b) (snprintf(names[k], 96, "%s", nm), out[k].name = names[k], out[k].ndim = 2, out[k].shape[0] = a, out[k].shape[1] = b, k++)
#define T1(nm, a) (snprintf(names[k], 96, "%s", nm), out[k].name = names[k], out[k].ndim = 1, out[k].shape[0] = a, k++)
	T2("model.embed_tokens.weight", V, C);
	char nm[96];
	for (int l = 0; l < L; l++) {
		snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", l); T1(nm, C);
		snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.weight", l); T2(nm, QD, C);
		snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.bias", l); T1(nm, QD);
		snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_proj.weight", l); T2(nm, KD, C);
		snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_proj.bias", l); T1(nm, KD);
		snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.weight", l); T2(nm, KD, C);
		snprintf(nm, sizeof nm, "model.layers.%d.self_attn.v_proj.bias", l); T1(nm, KD);
		snprintf(nm, sizeof nm, "model.layers.%d.self_attn.o_proj.weight", l); T2(nm, C, QD);
		snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", l); T1(nm, C);
		snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", l); T2(nm, F, C);
		snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", l); T2(nm, F, C);
		snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", l); T2(nm, C, F);
	}
	T1("model.norm.weight", C);
	size_t total = 0;
	for (int i = 0; i < k; i++)
		total += (size_t)out[i].shape[0] * (size_t)(out[i].ndim > 1 ? out[i].shape[1] : 1);
	float *data = ca_xmalloc(sizeof(float) * total), *p = data;
	for (int i = 0; i < k; i++) {
		size_t m = (size_t)out[i].shape[0] * (size_t)(out[i].ndim > 1 ? out[i].shape[1] : 1);
		int is_norm = strstr(out[i].name, "norm") != NULL;
		for (size_t j = 0; j < m; j++)
			p[j] = is_norm ? 1.0f : small_random();
		out[i].data = p;
		p += m;
	}
	char why[CA_MODEL_WHY];
	if (ca_st_write_dir(dir, k, out, CA_ST_BF16, 0, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	free(data);
	free(out);
	free(names);

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
