/*
 * ca-toy: a toy environment for the training loop, scorable without a GPU,
 * so the RL steps can be shown to learn on a CPU in seconds.
 *
 *   ca-toy init [--critic] [--hidden N] [--layers N] [--seed N] DIR
 *       write a tiny random Qwen2-shaped checkpoint over the toy vocabulary
 *   ca-toy prompts [-n N] [--seed N]
 *       N prompt records
 *   ca-toy score [file ...]
 *       add "reward" (and "tokens"/"mask" when only prompt and completion
 *       are given) to sampled records
 *
 * The task: a prompt is BOS followed by a start symbol s; the policy should
 * count up from s, one symbol per token (s, s+1, s+2, ... wrapping among
 * the symbols). The reward is the share of completion positions that hold
 * the right symbol, so a uniformly random policy earns about 1/16.
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "paths.h"
#include "safetensors.h"
#include "splitmix.h"

static const char usage_text[] =
	"usage: ca-toy init [--critic] [--hidden N] [--layers N] [--seed N] DIR\n"
	"       ca-toy prompts [-n N] [--seed N]\n"
	"       ca-toy score [-u] [file ...]\n";

/* Token 1 is reserved; no end token is declared, so completions run to --max-tokens. */
enum { TOY_BOS = 0, TOY_FIRST_SYMBOL = 2, TOY_VOCAB = 16, TOY_STARTS = 4 };
#define TOY_SYMBOLS (TOY_VOCAB - TOY_FIRST_SYMBOL)

static uint64_t rng;  /* splitmix64 state: the same numbers everywhere */
static double normal(void)
{
	double u = ca_splitmix_unit(&rng), v = ca_splitmix_unit(&rng);
	return sqrt(-2 * log(u + 1e-300)) * cos(2 * M_PI * v);
}

/* The symbol expected at completion position k after start symbol s. */
static int expected(int s, int k)
{
	return TOY_FIRST_SYMBOL + (s - TOY_FIRST_SYMBOL + k) % TOY_SYMBOLS;
}

struct init_opts {
	int critic, hidden, layers;
	uint64_t seed;
};

static float *random_tensor(size_t n, double std)
{
	float *x = ca_xmalloc(sizeof(float) * n);
	for (size_t i = 0; i < n; i++)
		x[i] = std > 0 ? (float)(std * normal()) : std == 0 ? 0.0f : 1.0f;
	return x;
}

static int cmd_init(const struct init_opts *o, const char *dir)
{
	const int C = o->hidden, F = 2 * o->hidden, V = TOY_VOCAB, NH = 4, NKV = 2;
	const int D = C / NH;
	rng = o->seed;
	if (ca_paths_mkdirs(dir, 0777) < 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", dir);
	struct ca_st_out t[16 * 64 + 8];
	float *owned[16 * 64 + 8];
	int n = 0;
	char names[16 * 64 + 8][96];
	/* One tensor: std > 0 normal, 0 zeros, < 0 ones (norm weights). */
#define TENSOR(rows, cols, std, ...) do { \
		int r_ = (rows), c_ = (cols); \
		snprintf(names[n], sizeof names[n], __VA_ARGS__); \
		t[n] = (struct ca_st_out){.name = names[n], .ndim = c_ != 0 ? 2 : 1, .shape = {r_, c_}}; \
		owned[n] = random_tensor((size_t)r_ * (size_t)(c_ != 0 ? c_ : 1), (std)); \
		t[n].data = owned[n]; \
		n++; \
	} while (0)
	TENSOR(V, C, 0.02, "model.embed_tokens.weight");
	for (int l = 0; l < o->layers; l++) {
		TENSOR(C, 0, -1, "model.layers.%d.input_layernorm.weight", l);
		TENSOR(NH * D, C, 0.02, "model.layers.%d.self_attn.q_proj.weight", l);
		TENSOR(NH * D, 0, 0, "model.layers.%d.self_attn.q_proj.bias", l);
		TENSOR(NKV * D, C, 0.02, "model.layers.%d.self_attn.k_proj.weight", l);
		TENSOR(NKV * D, 0, 0, "model.layers.%d.self_attn.k_proj.bias", l);
		TENSOR(NKV * D, C, 0.02, "model.layers.%d.self_attn.v_proj.weight", l);
		TENSOR(NKV * D, 0, 0, "model.layers.%d.self_attn.v_proj.bias", l);
		TENSOR(C, NH * D, 0.02, "model.layers.%d.self_attn.o_proj.weight", l);
		TENSOR(C, 0, -1, "model.layers.%d.post_attention_layernorm.weight", l);
		TENSOR(F, C, 0.02, "model.layers.%d.mlp.gate_proj.weight", l);
		TENSOR(F, C, 0.02, "model.layers.%d.mlp.up_proj.weight", l);
		TENSOR(C, F, 0.02, "model.layers.%d.mlp.down_proj.weight", l);
	}
	TENSOR(C, 0, -1, "model.norm.weight");
	if (o->critic) {
		TENSOR(1, C, 0.02, "score.weight");
		TENSOR(1, 0, 0, "score.bias");
	} else {
		TENSOR(V, C, 0.02, "lm_head.weight");
	}
#undef TENSOR
	char why[CA_ST_WHY];
	int rc = ca_st_write_dir(dir, n, t, CA_ST_F32, 0, why);
	for (int i = 0; i < n; i++)
		free(owned[i]);
	if (rc < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	char path[4096];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *fp = fopen(path, "w");
	if (!fp)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", path);
	fprintf(fp,
		"{\n"
		"  \"architectures\": [\"%s\"],\n"
		"  \"model_type\": \"qwen2\",\n"
		"  \"vocab_size\": %d,\n"
		"  \"hidden_size\": %d,\n"
		"  \"intermediate_size\": %d,\n"
		"  \"num_hidden_layers\": %d,\n"
		"  \"num_attention_heads\": %d,\n"
		"  \"num_key_value_heads\": %d,\n"
		"  \"max_position_embeddings\": 64,\n"
		"  \"rms_norm_eps\": 1e-06,\n"
		"  \"rope_theta\": 10000.0,\n"
		"  \"hidden_act\": \"silu\",\n"
		"  \"tie_word_embeddings\": false,\n"
		"  \"torch_dtype\": \"float32\",\n"
		"  \"bos_token_id\": %d%s\n"
		"}\n",
		o->critic ? "Qwen2ForTokenClassification" : "Qwen2ForCausalLM", V, C, F, o->layers, NH, NKV,
		TOY_BOS, o->critic ? ",\n  \"num_labels\": 1" : "");
	if (fclose(fp) != 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", path);
	return CA_EXIT_OK;
}

static int cmd_prompts(long n, uint64_t seed)
{
	rng = seed;
	for (long i = 0; i < n; i++) {
		int s = TOY_FIRST_SYMBOL + (int)(ca_splitmix_next(&rng) % TOY_STARTS);
		printf("{\"id\":\"toy-%ld\",\"prompt_tokens\":[%d,%d]}\n", i, TOY_BOS, s);
	}
	return ca_err_finish(CA_EXIT_OK);
}

/* Integer array at key into a new array (NULL if absent or not all integers). */
static int *int_array(jv record, const char *key, int *n)
{
	jv a = ca_json_get(record, key);
	int *x;
	int len = ca_json_int_array(a, 1e9, &x);
	jv_free(a);
	if (len >= 0)
		*n = len;
	return x;
}

static jv int_json(const int *x, int n)
{
	jv a = jv_array();
	for (int i = 0; i < n; i++)
		a = jv_array_append(a, jv_number(x[i]));
	return a;
}

static jv score_error(jv record, const char *message, int *status)
{
	ca_ndjson_record_warn("%s", message);
	*status = CA_EXIT_DATA;
	return jv_object_set(record, jv_string("reward"), jv_null());
}

/*
 * The completion is what follows the prompt: "completion_tokens" or
 * ca-sample's "completion.tokens" next to "prompt_tokens", or else the
 * mask-1 tokens of "tokens". The start symbol is the last prompt token.
 */
static jv score(jv record, void *ctx, int *status)
{
	int np = 0, nc = 0, nt = 0;
	int *prompt = int_array(record, "prompt_tokens", &np);
	int *completion = int_array(record, "completion_tokens", &nc);
	if (!completion) {
		/* ca-sample's own field: {"completion": {"tokens": [...]}} */
		jv c = ca_json_get(record, "completion");
		if (jv_get_kind(c) == JV_KIND_OBJECT)
			completion = int_array(c, "tokens", &nc);
		jv_free(c);
	}
	int *tokens = int_array(record, "tokens", &nt);
	if (prompt && completion && tokens) {
		/* ca-sample --token-record: the token record is there already. */
	} else if (prompt && completion && !tokens) {
		int *all = ca_xmalloc(sizeof(int) * (size_t)(np + nc + 1));
		memcpy(all, prompt, sizeof(int) * (size_t)np);
		memcpy(all + np, completion, sizeof(int) * (size_t)nc);
		jv mask = jv_array();
		for (int i = 0; i < np + nc; i++)
			mask = jv_array_append(mask, jv_number(i >= np));
		record = jv_object_set(record, jv_string("tokens"), int_json(all, np + nc));
		record = jv_object_set(record, jv_string("mask"), mask);
		free(all);
	} else if (tokens && !(prompt && completion)) {
		/* Split tokens at the first mask-1 token. */
		int first = nt;
		jv mask = ca_json_get(record, "mask");
		if (jv_get_kind(mask) == JV_KIND_ARRAY && jv_array_length(jv_copy(mask)) == nt) {
			for (int i = 0; i < nt; i++) {
				jv e = jv_array_get(jv_copy(mask), i);
				int on = jv_get_kind(e) == JV_KIND_NUMBER && jv_number_value(e) == 1;
				jv_free(e);
				if (on) {
					first = i;
					break;
				}
			}
		}
		jv_free(mask);
		free(prompt);
		free(completion);
		np = first;
		nc = nt - first;
		prompt = ca_xmalloc(sizeof(int) * (size_t)(np ? np : 1));
		completion = ca_xmalloc(sizeof(int) * (size_t)(nc ? nc : 1));
		memcpy(prompt, tokens, sizeof(int) * (size_t)np);
		memcpy(completion, tokens + np, sizeof(int) * (size_t)nc);
	}
	free(tokens);
	if (!prompt || !completion || np == 0) {
		free(prompt);
		free(completion);
		return score_error(record, "record needs prompt_tokens and completion_tokens, or tokens and mask", status);
	}
	int s = prompt[np - 1], right = 0;
	for (int k = 0; k < nc; k++)
		right += completion[k] == expected(s, k);
	free(prompt);
	free(completion);
	double reward = nc ? (double)right / nc : 0;
	return jv_object_set(record, jv_string("reward"), jv_number(reward));
}

int main(int argc, char **argv)
{
	enum { OPT_CRITIC = 1, OPT_HIDDEN, OPT_LAYERS, OPT_SEED };
	static const struct option longopts[] = {
		{"critic", no_argument, NULL, OPT_CRITIC},
		{"help", no_argument, NULL, 'h'},
		{"hidden", required_argument, NULL, OPT_HIDDEN},
		{"layers", required_argument, NULL, OPT_LAYERS},
		{"seed", required_argument, NULL, OPT_SEED},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	struct init_opts o = {.hidden = 32, .layers = 1, .seed = 1};
	long n = 64;
	int c;
	ca_err_init(argv[0]);
	if (argc < 2) {
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	const char *verb = argv[1];
	if (strcmp(verb, "-h") == 0 || strcmp(verb, "--help") == 0) {
		fputs(usage_text, stdout);
		return ca_err_finish(CA_EXIT_OK);
	}
	optind = 2;
	while ((c = getopt_long(argc, argv, "hn:u", longopts, NULL)) != -1) {
		switch (c) {
		case OPT_CRITIC: o.critic = 1; break;
		case OPT_HIDDEN: o.hidden = 8 * (int)(ca_opt_long("--hidden", optarg, 8, 4096) / 8); break;
		case OPT_LAYERS: o.layers = (int)ca_opt_long("--layers", optarg, 1, 64); break;
		case OPT_SEED: o.seed = (uint64_t)ca_opt_long("--seed", optarg, 0, (1LL << 62)); break;
		case 'n': n = ca_opt_long("-n", optarg, 0, 1L << 40); break;
		default: ca_opt_common(c, usage_text);
		}
	}
	if (strcmp(verb, "init") == 0) {
		if (argc - optind != 1) {
			fputs(usage_text, stderr);
			ca_opt_bad_usage();
		}
		return cmd_init(&o, argv[optind]);
	}
	if (strcmp(verb, "prompts") == 0) {
		if (argc != optind) {
			fputs(usage_text, stderr);
			ca_opt_bad_usage();
		}
		return cmd_prompts(n, o.seed);
	}
	if (strcmp(verb, "score") == 0)
		return ca_ndjson_map(argc - optind, argv + optind, score, NULL);
	ca_err_warn("unknown verb '%s' (init, prompts, score)", verb);
	fputs(usage_text, stderr);
	ca_opt_bad_usage();
}
