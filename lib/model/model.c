/* model: loading, saving and the optimizer; see model.h. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "file.h"
#include "json.h"
#include "model.h"
#include "model_impl.h"
#include "nn.h"
#include "paths.h"
#include "safetensors.h"
#include "splitmix.h"

/* Integer field of the config; def when absent; -1 with why when invalid. */
static int cfg_int(jv cfg, const char *key, int def, int *out, char why[CA_MODEL_WHY])
{
	jv v = jv_object_get(jv_copy(cfg), jv_string(key));
	if (jv_get_kind(v) == JV_KIND_NULL || !jv_is_valid(v)) {
		jv_free(v);
		if (def < 0) {
			ca_err_why(why, CA_MODEL_WHY, "config.json: %s is missing", key);
			return -1;
		}
		*out = def;
		return 0;
	}
	double x = jv_get_kind(v) == JV_KIND_NUMBER ? jv_number_value(v) : -1;
	jv_free(v);
	if (!(x >= 0 && x <= INT_MAX) || x != floor(x)) {
		ca_err_why(why, CA_MODEL_WHY, "config.json: %s is not a non-negative integer", key);
		return -1;
	}
	*out = (int)x;
	return 0;
}

static double cfg_num(jv cfg, const char *key, double def)
{
	jv v = jv_object_get(jv_copy(cfg), jv_string(key));
	double x = jv_get_kind(v) == JV_KIND_NUMBER ? jv_number_value(v) : def;
	jv_free(v);
	return x;
}

static int cfg_bool(jv cfg, const char *key, int def)
{
	jv v = jv_object_get(jv_copy(cfg), jv_string(key));
	int b = jv_get_kind(v) == JV_KIND_TRUE ? 1 : jv_get_kind(v) == JV_KIND_FALSE ? 0 : def;
	jv_free(v);
	return b;
}

/*
 * Whether a Qwen3 config asks for sliding-window attention, which the engine
 * does not have: use_sliding_window, or a "sliding_attention" layer type.
 */
static int sliding_window_layers(jv cfg)
{
	if (cfg_bool(cfg, "use_sliding_window", 0))
		return 1;
	jv types = jv_object_get(jv_copy(cfg), jv_string("layer_types"));
	int sliding = 0;
	if (jv_get_kind(types) == JV_KIND_ARRAY)
		jv_array_foreach(types, i, t) {
			sliding |= jv_get_kind(t) == JV_KIND_STRING && strcmp(jv_string_value(t), "full_attention") != 0;
			jv_free(t);
		}
	jv_free(types);
	return sliding;
}

static int parse_config(struct ca_model_config *c, jv cfg, char why[CA_MODEL_WHY])
{
	jv type = jv_object_get(jv_copy(cfg), jv_string("model_type"));
	snprintf(c->model_type, sizeof c->model_type, "%s",
		 jv_get_kind(type) == JV_KIND_STRING ? jv_string_value(type) : "");
	jv_free(type);
	int is_qwen2 = strcmp(c->model_type, "qwen2") == 0, is_qwen3 = strcmp(c->model_type, "qwen3") == 0;
	if (!is_qwen2 && !is_qwen3 && strcmp(c->model_type, "llama") != 0) {
		ca_err_why(why, CA_MODEL_WHY, "config.json: model_type \"%s\" is not supported (qwen2, qwen3, llama)", c->model_type);
		return -1;
	}
	if (cfg_int(cfg, "vocab_size", -1, &c->vocab_size, why) < 0 ||
	    cfg_int(cfg, "hidden_size", -1, &c->hidden_size, why) < 0 ||
	    cfg_int(cfg, "intermediate_size", -1, &c->intermediate_size, why) < 0 ||
	    cfg_int(cfg, "num_hidden_layers", -1, &c->num_layers, why) < 0 ||
	    cfg_int(cfg, "num_attention_heads", -1, &c->num_heads, why) < 0 ||
	    cfg_int(cfg, "num_key_value_heads", 0, &c->num_kv_heads, why) < 0 ||
	    /* Qwen3Config's head_dim defaults to 128, not hidden_size / heads. */
	    cfg_int(cfg, "head_dim", is_qwen3 ? 128 : 0, &c->head_dim, why) < 0 ||
	    cfg_int(cfg, "max_position_embeddings", 32768, &c->max_positions, why) < 0)
		return -1;
	if (c->num_kv_heads == 0)
		c->num_kv_heads = c->num_heads;
	if (c->num_heads == 0 || c->hidden_size == 0 || c->vocab_size == 0 ||
	    c->num_heads % c->num_kv_heads != 0) {
		ca_err_why(why, CA_MODEL_WHY, "config.json: inconsistent head counts or sizes");
		return -1;
	}
	if (c->head_dim == 0)
		c->head_dim = c->hidden_size / c->num_heads;
	if (c->head_dim % 2 != 0) {
		ca_err_why(why, CA_MODEL_WHY, "config.json: head_dim must be even for rotary embeddings");
		return -1;
	}
	c->rms_norm_eps = (float)cfg_num(cfg, "rms_norm_eps", 1e-6);
	/* transformers 5 nests rope_theta in rope_parameters; 4.x keeps it at the top. */
	jv rope = jv_object_get(jv_copy(cfg), jv_string("rope_parameters"));
	if (jv_get_kind(rope) != JV_KIND_OBJECT) {
		jv_free(rope);
		rope = jv_object_get(jv_copy(cfg), jv_string("rope_scaling"));
	}
	c->rope_theta = cfg_num(cfg, "rope_theta", 10000.0);
	if (jv_get_kind(rope) == JV_KIND_OBJECT) {
		c->rope_theta = cfg_num(rope, "rope_theta", c->rope_theta);
		jv kind = jv_object_get(jv_copy(rope), jv_string("rope_type"));
		if (jv_get_kind(kind) != JV_KIND_STRING) {
			jv_free(kind);
			kind = jv_object_get(jv_copy(rope), jv_string("type"));
		}
		int ok = jv_get_kind(kind) != JV_KIND_STRING || strcmp(jv_string_value(kind), "default") == 0;
		if (!ok)
			ca_err_why(why, CA_MODEL_WHY, "config.json: rope type \"%s\" is not supported (default only)",
				jv_string_value(kind));
		jv_free(kind);
		if (!ok) {
			jv_free(rope);
			return -1;
		}
	}
	jv_free(rope);
	jv act = jv_object_get(jv_copy(cfg), jv_string("hidden_act"));
	int silu = jv_get_kind(act) != JV_KIND_STRING || strcmp(jv_string_value(act), "silu") == 0;
	jv_free(act);
	if (!silu) {
		ca_err_why(why, CA_MODEL_WHY, "config.json: hidden_act must be silu");
		return -1;
	}
	if (cfg_bool(cfg, "mlp_bias", 0)) {
		ca_err_why(why, CA_MODEL_WHY, "config.json: mlp_bias is not supported");
		return -1;
	}
	c->tied = cfg_bool(cfg, "tie_word_embeddings", 0);
	if (is_qwen2) {
		c->qkv_bias = 1;
	} else {
		c->qkv_bias = c->o_bias = cfg_bool(cfg, "attention_bias", 0);
	}
	c->qk_norm = is_qwen3;
	if (is_qwen3 && sliding_window_layers(cfg)) {
		ca_err_why(why, CA_MODEL_WHY, "config.json: sliding-window attention layers are not supported");
		return -1;
	}
	return 0;
}

static int add_tensor(struct ca_model *m, int cap, const char *name, int ndim, int64_t d0, int64_t d1)
{
	if (m->ntensors >= cap)
		return -1;
	struct ca_model_tensor *t = &m->tensors[m->ntensors++];
	snprintf(t->name, sizeof t->name, "%s", name);
	t->ndim = ndim;
	t->shape[0] = d0;
	t->shape[1] = ndim > 1 ? d1 : 1;
	t->numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
	t->offset = m->nparams;
	m->nparams += t->numel;
	return 0;
}

/* An attention projection of a layer: its weight [out, in], then its bias [out] when it has one. */
static void add_projection(struct ca_model *m, int cap, int layer, const char *which, int64_t out, int64_t in,
	int bias)
{
	char n[96];
	snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.weight", layer, which);
	add_tensor(m, cap, n, 2, out, in);
	if (bias) {
		snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_proj.bias", layer, which);
		add_tensor(m, cap, n, 1, out, 0);
	}
}

/* The tensor table of a configuration, in the order we keep and write them. */
static void build_table(struct ca_model *m)
{
	const struct ca_model_config *c = &m->cfg;
	int C = c->hidden_size, F = c->intermediate_size, V = c->vocab_size;
	int QD = c->num_heads * c->head_dim, KD = c->num_kv_heads * c->head_dim;
	int cap = 4 + 18 * c->num_layers;
	m->tensors = ca_xcalloc((size_t)cap, sizeof *m->tensors);
	char n[96];
	add_tensor(m, cap, "model.embed_tokens.weight", 2, V, C);
	for (int l = 0; l < c->num_layers; l++) {
#define LAYER(suffix, ...) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), add_tensor(m, cap, n, __VA_ARGS__))
		LAYER("input_layernorm.weight", 1, C, 0);
		add_projection(m, cap, l, "q", QD, C, c->qkv_bias);
		add_projection(m, cap, l, "k", KD, C, c->qkv_bias);
		add_projection(m, cap, l, "v", KD, C, c->qkv_bias);
		add_projection(m, cap, l, "o", C, QD, c->o_bias);
		if (c->qk_norm) {
			LAYER("self_attn.q_norm.weight", 1, c->head_dim, 0);
			LAYER("self_attn.k_norm.weight", 1, c->head_dim, 0);
		}
		LAYER("post_attention_layernorm.weight", 1, C, 0);
		LAYER("mlp.gate_proj.weight", 2, F, C);
		LAYER("mlp.up_proj.weight", 2, F, C);
		LAYER("mlp.down_proj.weight", 2, C, F);
#undef LAYER
	}
	add_tensor(m, cap, "model.norm.weight", 1, C, 0);
	if (c->critic) {
		add_tensor(m, cap, "score.weight", 2, 1, C);
		if (c->score_bias)
			add_tensor(m, cap, "score.bias", 1, 1, 0);
	} else if (!c->tied) {
		add_tensor(m, cap, "lm_head.weight", 2, V, C);
	}
}

const struct ca_model_tensor *ca_model_find(const struct ca_model *m, const char *name)
{
	for (int i = 0; i < m->ntensors; i++)
		if (strcmp(m->tensors[i].name, name) == 0)
			return &m->tensors[i];
	return NULL;
}

static float *view(struct ca_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static float *view(struct ca_model *m, const char *fmt, ...)
{
	char name[96];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	const struct ca_model_tensor *t = ca_model_find(m, name);
	return t ? m->params + t->offset : NULL;
}

static void bind_views(struct ca_model *m)
{
	const struct ca_model_config *c = &m->cfg;
	m->embed = view(m, "model.embed_tokens.weight");
	m->norm = view(m, "model.norm.weight");
	m->lm_head = c->critic ? NULL : c->tied ? m->embed : view(m, "lm_head.weight");
	m->score_w = view(m, "score.weight");
	m->score_b = view(m, "score.bias");
	m->layers = ca_xcalloc((size_t)c->num_layers, sizeof *m->layers);
	for (int l = 0; l < c->num_layers; l++) {
		struct ca_model_layer *L = &m->layers[l];
		const char *p = "model.layers";
		L->ln1 = view(m, "%s.%d.input_layernorm.weight", p, l);
		L->wq = view(m, "%s.%d.self_attn.q_proj.weight", p, l);
		L->bq = view(m, "%s.%d.self_attn.q_proj.bias", p, l);
		L->wk = view(m, "%s.%d.self_attn.k_proj.weight", p, l);
		L->bk = view(m, "%s.%d.self_attn.k_proj.bias", p, l);
		L->wv = view(m, "%s.%d.self_attn.v_proj.weight", p, l);
		L->bv = view(m, "%s.%d.self_attn.v_proj.bias", p, l);
		L->wo = view(m, "%s.%d.self_attn.o_proj.weight", p, l);
		L->bo = view(m, "%s.%d.self_attn.o_proj.bias", p, l);
		L->q_norm = view(m, "%s.%d.self_attn.q_norm.weight", p, l);
		L->k_norm = view(m, "%s.%d.self_attn.k_norm.weight", p, l);
		L->ln2 = view(m, "%s.%d.post_attention_layernorm.weight", p, l);
		L->wgate = view(m, "%s.%d.mlp.gate_proj.weight", p, l);
		L->wup = view(m, "%s.%d.mlp.up_proj.weight", p, l);
		L->wdown = view(m, "%s.%d.mlp.down_proj.weight", p, l);
	}
	int D = c->head_dim, P = c->max_positions;
	m->rope_cos = ca_xmalloc(sizeof(float) * (size_t)P * (size_t)(D / 2));
	m->rope_sin = ca_xmalloc(sizeof(float) * (size_t)P * (size_t)(D / 2));
	ca_nn_rope_table(m->rope_cos, m->rope_sin, P, D, c->rope_theta);
}

void ca_model_free(struct ca_model *m)
{
	if (!m)
		return;
	jv_free(m->config_json);
	free(m->source_dir);
	free(m->tensors);
	free(m->params);
	free(m->grad);
	free(m->adam_m);
	free(m->adam_v);
	free(m->layers);
	free(m->rope_cos);
	free(m->rope_sin);
	ca_model_acts_free(m->acts);
	free(m);
}

struct ca_model *ca_model_load(const char *dir, char why[CA_MODEL_WHY])
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/config.json", dir);
	jv cfg = ca_json_read_object(path, why, CA_MODEL_WHY);
	if (!jv_is_valid(cfg))
		return NULL;
	struct ca_model *m = ca_xcalloc(1, sizeof *m);
	m->config_json = cfg;
	m->source_dir = ca_xstrdup(dir);
	if (parse_config(&m->cfg, cfg, why) < 0) {
		ca_model_free(m);
		return NULL;
	}
	char stwhy[CA_ST_WHY];
	struct ca_st_dir *st = ca_st_dir_open(dir, stwhy);
	if (!st) {
		ca_err_why(why, CA_MODEL_WHY, "%s", stwhy);
		ca_model_free(m);
		return NULL;
	}
	m->save_dtype = ca_st_dir_dtype(st);
	/* The head is decided by what the checkpoint holds. */
	const struct ca_st_tensor *score = ca_st_dir_find(st, "score.weight");
	if (score) {
		if (score->ndim != 2 || score->shape[0] != 1) {
			ca_err_why(why, CA_MODEL_WHY, "score.weight must have shape [1, hidden_size] (one value per token)");
			ca_st_dir_close(st);
			ca_model_free(m);
			return NULL;
		}
		m->cfg.critic = 1;
		m->cfg.score_bias = ca_st_dir_find(st, "score.bias") != NULL;
	} else if (!m->cfg.tied && !ca_st_dir_find(st, "lm_head.weight")) {
		ca_err_why(why, CA_MODEL_WHY, "checkpoint has neither lm_head.weight nor score.weight and embeddings are not tied");
		ca_st_dir_close(st);
		ca_model_free(m);
		return NULL;
	}
	build_table(m);
	m->params = malloc(sizeof(float) * m->nparams);
	if (!m->params) {
		ca_err_why(why, CA_MODEL_WHY, "cannot allocate %zu parameters", m->nparams);
		ca_st_dir_close(st);
		ca_model_free(m);
		return NULL;
	}
	for (int i = 0; i < m->ntensors; i++) {
		const struct ca_model_tensor *t = &m->tensors[i];
		const struct ca_st_tensor *s = ca_st_dir_find(st, t->name);
		if (!s) {
			ca_err_why(why, CA_MODEL_WHY, "checkpoint lacks tensor %s", t->name);
			break;
		}
		int64_t s0 = s->ndim > 0 ? s->shape[0] : 1, s1 = s->ndim > 1 ? s->shape[1] : 1;
		if (s->ndim != t->ndim || s0 != t->shape[0] || s1 != t->shape[1]) {
			ca_err_why(why, CA_MODEL_WHY, "tensor %s has shape [%lld, %lld], config says [%lld, %lld]", t->name,
				(long long)s0, (long long)s1, (long long)t->shape[0], (long long)t->shape[1]);
			break;
		}
		if (ca_st_to_f32(s, m->params + t->offset) < 0) {
			ca_err_why(why, CA_MODEL_WHY, "tensor %s: dtype %s is not a float type", t->name, s->dtype_name);
			break;
		}
		if (i == m->ntensors - 1)
			why[0] = 0;
	}
	ca_st_dir_close(st);
	if (m->ntensors == 0 || why[0]) {
		ca_model_free(m);
		return NULL;
	}
	bind_views(m);
	return m;
}

struct ca_model *ca_model_open(const char *dir)
{
	char why[CA_MODEL_WHY];
	struct ca_model *m = ca_model_load(dir, why);
	if (!m)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	return m;
}

static int copy_file(const char *from, const char *to)
{
	size_t len;
	char *text = ca_file_read(from, 0, 0, &len);
	if (!text)
		return errno == ENOENT ? 0 : -1;
	int rc = ca_file_write(to, text, len, 0644);
	free(text);
	return rc;
}

int ca_model_save(const struct ca_model *m, const char *dir, int dtype, size_t max_shard_bytes,
		  char why[CA_MODEL_WHY])
{
	if (ca_paths_mkdirs(dir, 0777) < 0) {
		ca_err_why(why, CA_MODEL_WHY, "%s: %s", dir, strerror(errno));
		return -1;
	}
	struct ca_st_out *out = ca_xcalloc((size_t)m->ntensors, sizeof *out);
	for (int i = 0; i < m->ntensors; i++) {
		const struct ca_model_tensor *t = &m->tensors[i];
		out[i].name = t->name;
		out[i].ndim = t->ndim;
		out[i].shape[0] = t->shape[0];
		out[i].shape[1] = t->shape[1];
		out[i].data = m->params + t->offset;
	}
	char stwhy[CA_ST_WHY];
	enum ca_st_dtype dt = dtype >= 0 ? (enum ca_st_dtype)dtype : (enum ca_st_dtype)m->save_dtype;
	int rc = ca_st_write_dir(dir, m->ntensors, out, dt, max_shard_bytes, stwhy);
	free(out);
	if (rc < 0) {
		ca_err_why(why, CA_MODEL_WHY, "%s", stwhy);
		return -1;
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/config.json", dir);
	jv cfg = jv_copy(m->config_json);
	const char *dtname = dt == CA_ST_BF16 ? "bfloat16" : dt == CA_ST_F16 ? "float16" : "float32";
	if (jv_object_has(jv_copy(cfg), jv_string("torch_dtype")))
		cfg = jv_object_set(cfg, jv_string("torch_dtype"), jv_string(dtname));
	if (jv_object_has(jv_copy(cfg), jv_string("dtype")))
		cfg = jv_object_set(cfg, jv_string("dtype"), jv_string(dtname));
	jv text = jv_dump_string(cfg, JV_PRINT_PRETTY | JV_PRINT_INDENT_FLAGS(2) | JV_PRINT_SORTED);
	FILE *fp = fopen(path, "w");
	rc = fp && fputs(jv_string_value(text), fp) != EOF && fputc('\n', fp) != EOF ? 0 : -1;
	if (fp && fclose(fp) != 0)
		rc = -1;
	jv_free(text);
	if (rc < 0) {
		ca_err_why(why, CA_MODEL_WHY, "%s: %s", path, strerror(errno));
		return -1;
	}
	static const char *const sidecars[] = {
		"tokenizer.json", "tokenizer_config.json", "generation_config.json",
		"special_tokens_map.json", "vocab.json", "merges.txt", "chat_template.jinja",
	};
	struct stat a, b;
	if (m->source_dir && stat(m->source_dir, &a) == 0 && stat(dir, &b) == 0 &&
	    (a.st_dev != b.st_dev || a.st_ino != b.st_ino)) {
		for (size_t i = 0; i < sizeof sidecars / sizeof sidecars[0]; i++) {
			char from[PATH_MAX], to[PATH_MAX];
			snprintf(from, sizeof from, "%s/%s", m->source_dir, sidecars[i]);
			snprintf(to, sizeof to, "%s/%s", dir, sidecars[i]);
			if (copy_file(from, to) < 0) {
				ca_err_why(why, CA_MODEL_WHY, "%s: %s", to, strerror(errno));
				return -1;
			}
		}
	}
	return 0;
}

void ca_model_to_critic(struct ca_model *m, uint64_t seed)
{
	if (m->cfg.critic)
		return;
	int C = m->cfg.hidden_size;
	float *body = m->params;
	/* The body tensors keep their offsets; only the head changes. */
	const struct ca_model_tensor *head = ca_model_find(m, "lm_head.weight");
	size_t body_params = head ? head->offset : m->nparams;
	struct ca_model_tensor *old = m->tensors;
	int old_n = m->ntensors;
	m->cfg.critic = 1;
	m->cfg.score_bias = 1;  /* transformers' score layer has one; it starts at 0 */
	m->ntensors = 0;
	m->nparams = 0;
	free(m->layers);
	free(m->rope_cos);
	free(m->rope_sin);
	build_table(m);
	m->params = ca_xmalloc(sizeof(float) * m->nparams);
	memset(m->params, 0, sizeof(float) * m->nparams);
	memcpy(m->params, body, sizeof(float) * body_params);
	(void)old_n;
	free(old);
	free(body);
	double std = cfg_num(m->config_json, "initializer_range", 0.02);
	float *w = m->params + ca_model_find(m, "score.weight")->offset;
	uint64_t s = seed;
	for (int i = 0; i < C; i++) {
		/* Box-Muller over splitmix64. */
		double u[2];
		for (int k = 0; k < 2; k++) {
			u[k] = ((double)(ca_splitmix_next(&s) >> 11) + 0.5) / 9007199254740992.0;
		}
		w[i] = (float)(std * sqrt(-2.0 * log(u[0])) * cos(2.0 * M_PI * u[1]));
	}
	bind_views(m);
	free(m->grad);
	free(m->adam_m);
	free(m->adam_v);
	m->grad = m->adam_m = m->adam_v = NULL;
	m->adam_step = 0;
	ca_model_acts_free(m->acts);
	m->acts = NULL;
	const char *arch = strcmp(m->cfg.model_type, "qwen2") == 0   ? "Qwen2ForTokenClassification"
			   : strcmp(m->cfg.model_type, "qwen3") == 0 ? "Qwen3ForTokenClassification"
								     : "LlamaForTokenClassification";
	jv cfg = m->config_json;
	cfg = jv_object_set(cfg, jv_string("architectures"), JV_ARRAY(jv_string(arch)));
	cfg = jv_object_set(cfg, jv_string("id2label"), jv_object_set(jv_object(), jv_string("0"), jv_string("LABEL_0")));
	cfg = jv_object_set(cfg, jv_string("label2id"), jv_object_set(jv_object(), jv_string("LABEL_0"), jv_number(0)));
	m->config_json = cfg;
}

void ca_model_zero_grad(struct ca_model *m)
{
	if (!m->grad)
		m->grad = ca_xmalloc(sizeof(float) * m->nparams);
	memset(m->grad, 0, sizeof(float) * m->nparams);
}

double ca_model_grad_norm(const struct ca_model *m)
{
	if (!m->grad)
		return 0;
	double s = 0;
	for (size_t i = 0; i < m->nparams; i++)
		s += (double)m->grad[i] * m->grad[i];
	return sqrt(s);
}

double ca_model_adamw_step(struct ca_model *m, const struct ca_adamw *o)
{
	if (!m->grad)
		ca_model_zero_grad(m);
	if (!m->adam_m) {
		m->adam_m = ca_xcalloc(m->nparams, sizeof(float));
		m->adam_v = ca_xcalloc(m->nparams, sizeof(float));
	}
	double norm = ca_model_grad_norm(m);
	struct ca_adamw_scalars s = ca_adamw_scalars(o, norm, ++m->adam_step);
	for (size_t i = 0; i < m->nparams; i++) {
		float g = m->grad[i] * s.clip;
		float mi = m->adam_m[i] = s.beta1 * m->adam_m[i] + (1.0f - s.beta1) * g;
		float vi = m->adam_v[i] = s.beta2 * m->adam_v[i] + (1.0f - s.beta2) * g * g;
		float p = m->params[i] * s.decay;
		m->params[i] = p - s.step_size * mi / (sqrtf(vi) / s.bc2_sqrt + s.eps);
	}
	return norm;
}

/*
 * Master weights. A checkpoint kept in bf16 or fp16 would round every
 * update away that is smaller than half a unit in the last place (most of
 * them at a learning rate of 1e-6): the fp32 weights go into
 * optimizer.safetensors as "master", and the model file keeps its dtype
 * for transformers. A master copy counts only while the model file holds
 * exactly its rounding; anything else means the model was replaced.
 */
static uint32_t rounded_bits(float x, int dtype)
{
	uint32_t u;
	if (dtype == CA_ST_BF16)
		return ca_st_f32_to_bf16(x);
	if (dtype == CA_ST_F16)
		return ca_st_f32_to_f16(x);
	memcpy(&u, &x, sizeof u);
	return u;
}

/* The index of the first weight the model holds that is not master's rounding; n when all are. */
static size_t master_mismatch(const struct ca_model *m, const float *master)
{
	for (size_t i = 0; i < m->nparams; i++)
		if (rounded_bits(master[i], m->save_dtype) != rounded_bits(m->params[i], m->save_dtype))
			return i;
	return m->nparams;
}

int ca_model_save_optimizer(const struct ca_model *m, const char *dir, char why[CA_MODEL_WHY])
{
	if (!m->adam_m) {
		ca_err_why(why, CA_MODEL_WHY, "no optimizer state to save");
		return -1;
	}
	float step = (float)m->adam_step;
	struct ca_st_out out[4] = {
		{.name = "adam_m", .ndim = 1, .shape = {(int64_t)m->nparams}, .data = m->adam_m},
		{.name = "adam_v", .ndim = 1, .shape = {(int64_t)m->nparams}, .data = m->adam_v},
		{.name = "step", .ndim = 1, .shape = {1}, .data = &step},
		{.name = "master", .ndim = 1, .shape = {(int64_t)m->nparams}, .data = m->params},
	};
	int n = m->save_dtype == CA_ST_F32 ? 3 : 4;  /* an fp32 model file is its own master copy */
	char path[PATH_MAX], stwhy[CA_ST_WHY];
	snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
	if (ca_st_write_file(path, n, out, CA_ST_F32, stwhy) < 0) {
		ca_err_why(why, CA_MODEL_WHY, "%s", stwhy);
		return -1;
	}
	return 0;
}

int ca_model_load_optimizer(struct ca_model *m, const char *dir, char why[CA_MODEL_WHY])
{
	char path[PATH_MAX], stwhy[CA_ST_WHY];
	snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
	struct ca_st_file *f = ca_st_open(path, stwhy);
	if (!f) {
		ca_err_why(why, CA_MODEL_WHY, "%s", stwhy);
		return -1;
	}
	const struct ca_st_tensor *tm = ca_st_file_find(f, "adam_m"), *tv = ca_st_file_find(f, "adam_v"),
				  *ts = ca_st_file_find(f, "step"), *tw = ca_st_file_find(f, "master");
	if (!tm || !tv || !ts || tm->numel != (int64_t)m->nparams || tv->numel != (int64_t)m->nparams ||
	    ts->numel != 1 || tm->dtype != CA_ST_F32 || tv->dtype != CA_ST_F32 || ts->dtype != CA_ST_F32 ||
	    (tw && (tw->numel != (int64_t)m->nparams || tw->dtype != CA_ST_F32))) {
		ca_err_why(why, CA_MODEL_WHY, "%s: does not match the model", path);
		ca_st_close(f);
		return -1;
	}
	if (!m->adam_m) {
		m->adam_m = ca_xmalloc(sizeof(float) * m->nparams);
		m->adam_v = ca_xmalloc(sizeof(float) * m->nparams);
	}
	ca_st_to_f32(tm, m->adam_m);
	ca_st_to_f32(tv, m->adam_v);
	float step;
	ca_st_to_f32(ts, &step);
	m->adam_step = (long)step;
	if (tw) {
		float *master = ca_xmalloc(sizeof(float) * m->nparams);
		ca_st_to_f32(tw, master);
		size_t bad = master_mismatch(m, master);
		if (bad == m->nparams) {
			memcpy(m->params, master, sizeof(float) * m->nparams);
		} else {
			const struct ca_model_tensor *t = m->tensors;
			while (t + 1 < m->tensors + m->ntensors && t[1].offset <= bad)
				t++;
			ca_err_warn("%s: fp32 master weights ignored: the model's %s is not their rounding "
				"(the model file was replaced); training goes on from the model file", path, t->name);
		}
		free(master);
	}
	ca_st_close(f);
	return 0;
}
