/*
 * ca-sample: complete prompts or conversations with the policy checkpoint.
 *
 * Each record holds "prompt_tokens" (ids), "prompt" (text) or "messages"
 * (a conversation, rendered in the tokenizer's chat format with the
 * assistant turn opened); ca-sample adds "completion" with the sampled
 * tokens, their log-probs under the sampling distribution, the text and
 * why it stopped. With --token-record it also sets "tokens", "mask" and
 * "logprobs" over prompt + completion, the token record that ca-logprob,
 * ca-gae and the RL steps read.
 */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "model.h"
#include "ndjson.h"
#include "opt.h"
#include "tokenizer.h"

static const char usage_text[] =
	"usage: ca-sample [-hu] [--max-tokens N] [--progress] [--seed N] [--stop STRING ...]\n"
	"                 [--stop-token ID ...] [--temperature X] [--token-record] [--top-p X]\n"
	"                 -m DIR [file ...]\n";

struct config {
	struct ca_model *model;
	struct ca_tokenizer *tok;   /* NULL when the checkpoint has no tokenizer.json */
	char tok_why[CA_TOKENIZER_WHY];
	double temperature, top_p;
	int max_tokens;
	unsigned long long seed;
	int nstop;
	char **stop;
	int token_record;
	int neos;
	int eos[16];
	long index;
};

struct stop_ctx {
	const struct config *cfg;
	size_t cut;   /* where the stop string starts in the decoded text, or SIZE_MAX */
};

/* Does the completion so far contain a stop string? */
static int stop_on_string(const int *tokens, int n, void *p)
{
	struct stop_ctx *s = p;
	if (s->cfg->nstop == 0 || !s->cfg->tok)
		return 0;
	size_t len;
	char *text = ca_tokenizer_decode(s->cfg->tok, tokens, (size_t)n, &len);
	int hit = 0;
	for (int i = 0; i < s->cfg->nstop; i++) {
		char *at = memmem(text, len, s->cfg->stop[i], strlen(s->cfg->stop[i]));
		if (at && (size_t)(at - text) < s->cut) {
			s->cut = (size_t)(at - text);
			hit = 1;
		}
	}
	free(text);
	return hit;
}

static jv sample_error(jv record, const char *message, int *status)
{
	ca_ndjson_record_warn("%s", message);
	*status = CA_EXIT_DATA;
	jv c = jv_object_set(jv_object(), jv_string("error"), jv_string(message));
	return jv_object_set(record, jv_string("completion"), c);
}

static int *int_array(jv a, int *n, const char **why)
{
	if (jv_get_kind(a) != JV_KIND_ARRAY || jv_array_length(jv_copy(a)) == 0) {
		*why = "prompt_tokens must be a non-empty array";
		return NULL;
	}
	*n = jv_array_length(jv_copy(a));
	int *out = ca_xmalloc(sizeof(int) * (size_t)*n);
	for (int i = 0; i < *n; i++) {
		jv x = jv_array_get(jv_copy(a), i);
		double v = jv_get_kind(x) == JV_KIND_NUMBER ? jv_number_value(x) : -1;
		jv_free(x);
		if (!(v >= 0 && v < INT_MAX) || v != floor(v)) {
			free(out);
			*why = "prompt_tokens must hold non-negative integers";
			return NULL;
		}
		out[i] = (int)v;
	}
	return out;
}

static jv complete(jv record, void *ctx, int *status)
{
	struct config *cfg = ctx;
	long index = cfg->index++;
	int *prompt = NULL, n = 0, chat_stop = -1;
	const char *bad = NULL;
	jv pt = ca_json_get(record, "prompt_tokens");
	jv text = ca_json_get(record, "prompt");
	jv messages = ca_json_get(record, "messages");
	if (jv_is_valid(pt)) {
		prompt = int_array(pt, &n, &bad);
	} else if (jv_get_kind(text) == JV_KIND_STRING || jv_get_kind(messages) == JV_KIND_ARRAY) {
		if (!cfg->tok) {
			bad = cfg->tok_why;
		} else {
			char why[CA_TOKENIZER_WHY];
			char *rendered = NULL;
			if (jv_get_kind(messages) == JV_KIND_ARRAY) {
				rendered = ca_tokenizer_chat(cfg->tok, messages, 1, &chat_stop, why);
				if (!rendered)
					bad = why;
			} else {
				rendered = ca_xstrdup(jv_string_value(text));
			}
			if (rendered) {
				size_t count = ca_tokenizer_encode(cfg->tok, rendered, strlen(rendered), &prompt);
				n = (int)count;
				free(rendered);
				if (n == 0)
					bad = "the prompt encodes to no tokens";
			}
			if (bad) {
				jv_free(pt);
				jv_free(text);
				jv_free(messages);
				free(prompt);
				return sample_error(record, bad, status);
			}
		}
	} else {
		bad = "record has no prompt_tokens, prompt or messages";
	}
	jv_free(pt);
	jv_free(text);
	jv_free(messages);
	if (bad) {
		free(prompt);
		return sample_error(record, bad, status);
	}

	int stops[17];
	int nstops = 0;
	for (int i = 0; i < cfg->neos; i++)
		stops[nstops++] = cfg->eos[i];
	if (chat_stop >= 0)
		stops[nstops++] = chat_stop;
	struct ca_sample_params p = {
		.temperature = cfg->temperature, .top_p = cfg->top_p, .max_tokens = cfg->max_tokens,
		.nstop_tokens = nstops, .stop_tokens = stops,
		.seed = cfg->seed * 0x9e3779b97f4a7c15ull + (unsigned long long)index,
	};
	int *out = ca_xmalloc(sizeof(int) * (size_t)(cfg->max_tokens + 1));
	float *lps = ca_xmalloc(sizeof(float) * (size_t)(cfg->max_tokens + 1));
	struct stop_ctx sc = {.cfg = cfg, .cut = SIZE_MAX};
	char why[CA_MODEL_WHY];
	int got = ca_model_generate(cfg->model, prompt, n, &p, stop_on_string, &sc, out, lps, why);
	if (got < 0) {
		free(prompt);
		free(out);
		free(lps);
		return sample_error(record, why, status);
	}
	const char *finish = "length";
	int text_tokens = got;
	if (sc.cut != SIZE_MAX) {
		finish = "stop";
	} else if (got > 0) {
		for (int i = 0; i < nstops; i++)
			if (out[got - 1] == stops[i]) {
				finish = "stop";
				text_tokens = got - 1;  /* the end token is not part of the text */
			}
	}
	jv c = jv_object();
	jv toks = jv_array(), lp = jv_array();
	for (int i = 0; i < got; i++) {
		toks = jv_array_append(toks, jv_number(out[i]));
		lp = jv_array_append(lp, ca_json_num_or_null(lps[i]));
	}
	c = jv_object_set(c, jv_string("tokens"), jv_copy(toks));
	c = jv_object_set(c, jv_string("logprobs"), jv_copy(lp));
	if (cfg->tok) {
		size_t len;
		char *t = ca_tokenizer_decode(cfg->tok, out, (size_t)text_tokens, &len);
		if (sc.cut < len)
			len = sc.cut;
		c = jv_object_set(c, jv_string("text"), jv_string_sized(t, (int)len));
		free(t);
	}
	c = jv_object_set(c, jv_string("finish_reason"), jv_string(finish));
	c = jv_object_set(c, jv_string("prompt_tokens"), jv_number(n));
	record = jv_object_set(record, jv_string("completion"), c);
	if (cfg->token_record) {
		jv all = jv_array(), mask = jv_array(), alp = jv_array();
		for (int i = 0; i < n; i++) {
			all = jv_array_append(all, jv_number(prompt[i]));
			mask = jv_array_append(mask, jv_number(0));
			alp = jv_array_append(alp, jv_null());
		}
		all = jv_array_concat(all, toks);
		alp = jv_array_concat(alp, lp);
		for (int i = 0; i < got; i++)
			mask = jv_array_append(mask, jv_number(1));
		record = jv_object_set(record, jv_string("tokens"), all);
		record = jv_object_set(record, jv_string("mask"), mask);
		record = jv_object_set(record, jv_string("logprobs"), alp);
	} else {
		jv_free(toks);
		jv_free(lp);
	}
	free(prompt);
	free(out);
	free(lps);
	return record;
}

/* eos ids from config.json and generation_config.json (a number or a list). */
static void add_eos(struct config *cfg, jv v)
{
	if (jv_get_kind(v) == JV_KIND_NUMBER) {
		int id = (int)jv_number_value(v), seen = 0;
		for (int i = 0; i < cfg->neos; i++)
			seen |= cfg->eos[i] == id;
		if (!seen && cfg->neos < 16 && id >= 0)
			cfg->eos[cfg->neos++] = id;
		jv_free(v);
	} else if (jv_get_kind(v) == JV_KIND_ARRAY) {
		for (int i = 0; i < jv_array_length(jv_copy(v)); i++)
			add_eos(cfg, jv_array_get(jv_copy(v), i));
		jv_free(v);
	} else {
		jv_free(v);
	}
}

static void load_eos(struct config *cfg, const char *dir)
{
	add_eos(cfg, ca_json_get(cfg->model->config_json, "eos_token_id"));
	char path[4096];
	snprintf(path, sizeof path, "%s/generation_config.json", dir);
	FILE *fp = fopen(path, "r");
	if (!fp)
		return;
	char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf, fp);
	fclose(fp);
	jv g = jv_parse_sized(buf, (int)n);
	if (jv_get_kind(g) == JV_KIND_OBJECT)
		add_eos(cfg, ca_json_get(g, "eos_token_id"));
	jv_free(g);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"max-tokens", required_argument, NULL, 'n'},
		{"model", required_argument, NULL, 'm'},
		{"progress", no_argument, NULL, 'P'},
		{"seed", required_argument, NULL, 's'},
		{"stop", required_argument, NULL, 'S'},
		{"stop-token", required_argument, NULL, 'T'},
		{"temperature", required_argument, NULL, 't'},
		{"token-record", no_argument, NULL, 'r'},
		{"top-p", required_argument, NULL, 'p'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	struct config cfg = {.temperature = 1.0, .top_p = 1.0, .max_tokens = 256};
	const char *dir = NULL;
	int c;
	ca_err_init(argv[0]);
	cfg.stop = ca_xcalloc((size_t)argc + 1, sizeof *cfg.stop);
	while ((c = getopt_long(argc, argv, "hm:u", longopts, NULL)) != -1) {
		switch (c) {
		case 'h': fputs(usage_text, stdout); return ca_err_finish(CA_EXIT_OK);
		case 'm': dir = optarg; break;
		case 'n': cfg.max_tokens = (int)ca_opt_long("--max-tokens", optarg, 0, 1 << 24); break;
		case 'P': ca_ndjson_set_progress(1); break;
		case 'p': cfg.top_p = ca_opt_double("--top-p", optarg, 1e-9, 1); break;
		case 'r': cfg.token_record = 1; break;
		case 's': cfg.seed = (unsigned long long)ca_opt_long("--seed", optarg, 0, LLONG_MAX); break;
		case 'S':
			if (!*optarg) {
				ca_err_warn("--stop: empty string");
				ca_opt_bad_usage();
			}
			cfg.stop[cfg.nstop++] = optarg;
			break;
		case 'T':
			if (cfg.neos < 15)
				cfg.eos[cfg.neos++] = (int)ca_opt_long("--stop-token", optarg, 0, INT_MAX);
			break;
		case 't': cfg.temperature = ca_opt_double("--temperature", optarg, 0, 100); break;
		case 'u': ca_ndjson_set_unbuffered(1); break;
		default: fputs(usage_text, stderr); ca_opt_bad_usage();
		}
	}
	if (!dir) {
		ca_err_warn("-m DIR is required");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	char why[CA_MODEL_WHY];
	cfg.model = ca_model_load(dir, why);
	if (!cfg.model)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	if (cfg.model->cfg.critic)
		ca_err_die(CA_EXIT_USAGE, "%s is a critic checkpoint; sampling needs a policy", dir);
	cfg.tok = ca_tokenizer_load(dir, cfg.tok_why);
	if (!cfg.tok && cfg.nstop > 0)
		ca_err_die(CA_EXIT_DATA, "--stop needs a tokenizer: %s", cfg.tok_why);
	load_eos(&cfg, dir);
	int status = ca_ndjson_map(argc - optind, argv + optind, complete, &cfg);
	ca_tokenizer_free(cfg.tok);
	ca_model_free(cfg.model);
	free(cfg.stop);
	return status;
}
