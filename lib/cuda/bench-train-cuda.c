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
 */
#include <errno.h>
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
#include "safetensors.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 12345;
static float small_random(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return ((float)(rng >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
}

static void write_qwen2_05b(const char *dir)
{
	enum { C = 896, L = 24, NH = 14, NKV = 2, F = 4864, V = 151936, D = 64, QD = NH * D, KD = NKV * D };
	if (mkdir(dir, 0777) < 0 && errno != EEXIST)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", dir);
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *fp = fopen(path, "w");
	if (!fp)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", path);
	fprintf(fp, "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"hidden_size\":%d,"
		"\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
		"\"num_key_value_heads\":%d,\"vocab_size\":%d,\"max_position_embeddings\":32768,"
		"\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,\"tie_word_embeddings\":true,\"hidden_act\":\"silu\","
		"\"torch_dtype\":\"bfloat16\",\"initializer_range\":0.02}\n", C, F, L, NH, NKV, V);
	fclose(fp);
	int n = 2 + 12 * L, k = 0;
	struct ca_st_out *out = ca_xcalloc((size_t)n, sizeof *out);
	char (*names)[96] = ca_xcalloc((size_t)n, sizeof *names);
#define T2(a, b) (out[k].name = names[k], out[k].ndim = 2, out[k].shape[0] = a, out[k].shape[1] = b, k++)
#define T1(a) (out[k].name = names[k], out[k].ndim = 1, out[k].shape[0] = a, k++)
	snprintf(names[k], 96, "model.embed_tokens.weight");
	T2(V, C);
	static const char *const sub[12] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
		"self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias",
		"self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
		"mlp.up_proj.weight", "mlp.down_proj.weight"};
	for (int l = 0; l < L; l++)
		for (int i = 0; i < 12; i++) {
			snprintf(names[k], 96, "model.layers.%d.%s", l, sub[i]);
			switch (i) {
			case 0: case 8: T1(C); break;
			case 1: T2(QD, C); break;
			case 2: T1(QD); break;
			case 3: case 5: T2(KD, C); break;
			case 4: case 6: T1(KD); break;
			case 7: T2(C, QD); break;
			case 9: case 10: T2(F, C); break;
			case 11: T2(C, F); break;
			}
		}
	snprintf(names[k], 96, "model.norm.weight");
	T1(C);
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
	if (stat(path, &st) < 0)
		write_qwen2_05b(dir);
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
	for (int i = 0; i <= steps; i++) {
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
