/*
 * model_random: a random Qwen2-shaped checkpoint for the benchmarks and
 * tests that need a model but not a trained one (tests/unit/model_bench.c,
 * bench/bench-train-cuda.c); see ca_model_write_random in model.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model.h"
#include "paths.h"
#include "safetensors.h"

/* The weights need only be small and the same on every machine: an LCG's top 24 bits. */
static float small_random(uint64_t *state)
{
	*state = *state * 6364136223846793005ull + 1442695040888963407ull;
	return ((float)(*state >> 40) / (float)(1 << 24) - 0.5f) * 0.04f;
}

static int write_config(const char *dir, const struct ca_model_config *c, char why[CA_MODEL_WHY])
{
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *fp = fopen(path, "w");
	if (!fp) {
		snprintf(why, CA_MODEL_WHY, "%s: %s", path, strerror(errno));
		return -1;
	}
	fprintf(fp, "{\"architectures\":[\"Qwen2ForCausalLM\"],\"model_type\":\"qwen2\",\"hidden_size\":%d,"
		"\"intermediate_size\":%d,\"num_hidden_layers\":%d,\"num_attention_heads\":%d,"
		"\"num_key_value_heads\":%d,\"vocab_size\":%d,\"max_position_embeddings\":%d,"
		"\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,\"tie_word_embeddings\":true,\"hidden_act\":\"silu\","
		"\"torch_dtype\":\"bfloat16\",\"initializer_range\":0.02}\n",
		c->hidden_size, c->intermediate_size, c->num_layers, c->num_heads, c->num_kv_heads, c->vocab_size,
		c->max_positions);
	if (ferror(fp) | fclose(fp)) {
		snprintf(why, CA_MODEL_WHY, "%s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

int ca_model_write_random(const char *dir, const struct ca_model_config *c, char why[CA_MODEL_WHY])
{
	const int C = c->hidden_size, F = c->intermediate_size, L = c->num_layers, V = c->vocab_size;
	const int NH = c->num_heads, NKV = c->num_kv_heads;
	if (C <= 0 || F <= 0 || L <= 0 || V <= 0 || NH <= 0 || NKV <= 0 || C % NH || NH % NKV ||
	    c->max_positions <= 0) {
		snprintf(why, CA_MODEL_WHY, "no Qwen2 shape: hidden %d, intermediate %d, layers %d, vocabulary %d, "
			 "heads %d, key/value heads %d", C, F, L, V, NH, NKV);
		return -1;
	}
	const int QD = C, KD = NKV * (C / NH);
	if (ca_paths_mkdirs(dir, 0777) < 0) {
		snprintf(why, CA_MODEL_WHY, "%s: %s", dir, strerror(errno));
		return -1;
	}
	if (write_config(dir, c, why) < 0)
		return -1;

	/* Names, order and shapes as transformers writes a tied Qwen2 policy. */
	static const char *const sub[12] = {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.q_proj.bias",
		"self_attn.k_proj.weight", "self_attn.k_proj.bias", "self_attn.v_proj.weight", "self_attn.v_proj.bias",
		"self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
		"mlp.up_proj.weight", "mlp.down_proj.weight"};
	const int rows[12] = {C, QD, QD, KD, KD, KD, KD, C, C, F, F, C};
	const int cols[12] = {0, C, 0, C, 0, C, 0, QD, 0, C, C, F};  /* 0: a vector */
	int n = 2 + 12 * L, k = 0;
	struct ca_st_out *out = ca_xcalloc((size_t)n, sizeof *out);
	char (*names)[96] = ca_xcalloc((size_t)n, sizeof *names);
	snprintf(names[k], sizeof names[k], "model.embed_tokens.weight");
	out[k] = (struct ca_st_out){.name = names[k], .ndim = 2, .shape = {V, C}};
	k++;
	for (int l = 0; l < L; l++)
		for (int i = 0; i < 12; i++, k++) {
			snprintf(names[k], sizeof names[k], "model.layers.%d.%s", l, sub[i]);
			out[k] = (struct ca_st_out){.name = names[k], .ndim = cols[i] ? 2 : 1, .shape = {rows[i], cols[i]}};
		}
	snprintf(names[k], sizeof names[k], "model.norm.weight");
	out[k] = (struct ca_st_out){.name = names[k], .ndim = 1, .shape = {C}};
	k++;

	size_t total = 0;
	for (int i = 0; i < k; i++)
		total += (size_t)out[i].shape[0] * (size_t)(out[i].ndim > 1 ? out[i].shape[1] : 1);
	float *data = ca_xmalloc(sizeof(float) * total), *p = data;
	uint64_t state = 12345;
	for (int i = 0; i < k; i++) {
		size_t m = (size_t)out[i].shape[0] * (size_t)(out[i].ndim > 1 ? out[i].shape[1] : 1);
		int is_norm = strstr(out[i].name, "norm") != NULL;
		for (size_t j = 0; j < m; j++)
			p[j] = is_norm ? 1.0f : small_random(&state);
		out[i].data = p;
		p += m;
	}
	int rc = ca_st_write_dir(dir, k, out, CA_ST_BF16, 0, why);
	free(data);
	free(out);
	free(names);
	return rc;
}
