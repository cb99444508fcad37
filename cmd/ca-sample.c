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
 *
 * Records are read in batches of --batch; on the CPU each is generated in
 * turn, with --device cuda the whole batch goes to the GPU sampler
 * (lib/cuda/model_cuda_sample.cu), which decodes its requests together.
 * Output keeps the input order either way.
 */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "err.h"
#include "json.h"
#include "model.h"
#include "ndjson.h"
#include "opt.h"
#include "tokenizer.h"

static const char usage_text[] =
	"usage: ca-sample [-hu] [--batch N] [--device cpu|cuda] [--fp32] [--max-tokens N]\n"
	"                 [--progress] [--seed N] [--slots N] [--stop STRING ...] [--stop-token ID ...]\n"
	"                 [--temperature X] [--token-record] [--top-p X] -m DIR [file ...]\n";

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
	int batch;          /* records read before generating */
	int slots;          /* GPU: sequences decoded together */
	int fp32;           /* GPU: fp32 matrices, the CPU's numbers */
	enum ca_device device;
	const struct ca_cuda_api *cuda;
	struct ca_cuda_sampler *sampler;   /* made for the first batch, again when a longer one comes */
	int sampler_len;
	struct pending *items;             /* the batch: --batch records taken, not yet generated */
	int nitems;
};

struct stop_ctx {
	const struct config *cfg;
	size_t cut;   /* where the stop string starts in the decoded text, or SIZE_MAX */
};

/* A record read and waiting for its batch to be generated. */
struct pending {
	jv record;
	char *where;        /* "FILE:LINE" for messages */
	const char *bad;    /* why it cannot be sampled (static or in why) */
	char why[CA_MODEL_WHY];
	int *prompt, n;
	int stops[17], nstops;
	struct stop_ctx sc;
	struct ca_sample_request req;
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

static jv sample_error(struct pending *p, const char *message, int *status)
{
	ca_err_warn("%s: %s", p->where, message);
	*status = ca_err_worst(*status, CA_EXIT_DATA);
	jv c = jv_object_set(jv_object(), jv_string("error"), jv_string(message));
	jv out = jv_object_set(p->record, jv_string("completion"), c);
	p->record = jv_invalid();
	return out;
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

/* The record's prompt as token ids, and the request to generate it; p->bad set when impossible. */
static void prepare(struct config *cfg, struct pending *p)
{
	long index = cfg->index++;
	int chat_stop = -1;
	jv pt = ca_json_get(p->record, "prompt_tokens");
	jv text = ca_json_get(p->record, "prompt");
	jv messages = ca_json_get(p->record, "messages");
	if (jv_is_valid(pt)) {
		p->prompt = int_array(pt, &p->n, &p->bad);
	} else if (jv_get_kind(text) == JV_KIND_STRING || jv_get_kind(messages) == JV_KIND_ARRAY) {
		if (!cfg->tok) {
			p->bad = cfg->tok_why;
		} else {
			char *rendered = NULL;
			if (jv_get_kind(messages) == JV_KIND_ARRAY) {
				rendered = ca_tokenizer_chat(cfg->tok, messages, 1, &chat_stop, p->why);
				if (!rendered)
					p->bad = p->why;
			} else {
				rendered = ca_xstrdup(jv_string_value(text));
			}
			if (rendered) {
				p->n = (int)ca_tokenizer_encode(cfg->tok, rendered, strlen(rendered), &p->prompt);
				free(rendered);
				if (p->n == 0)
					p->bad = "the prompt encodes to no tokens";
			}
		}
	} else {
		p->bad = "record has no prompt_tokens, prompt or messages";
	}
	jv_free(pt);
	jv_free(text);
	jv_free(messages);
	if (p->bad)
		return;
	for (int i = 0; i < cfg->neos; i++)
		p->stops[p->nstops++] = cfg->eos[i];
	if (chat_stop >= 0)
		p->stops[p->nstops++] = chat_stop;
	p->sc = (struct stop_ctx){.cfg = cfg, .cut = SIZE_MAX};
	p->req = (struct ca_sample_request){
		.prompt = p->prompt, .n = p->n,
		.params = {.temperature = cfg->temperature, .top_p = cfg->top_p, .max_tokens = cfg->max_tokens,
			   .nstop_tokens = p->nstops, .stop_tokens = p->stops,
			   .seed = cfg->seed * 0x9e3779b97f4a7c15ull + (unsigned long long)index},
		.stop_fn = stop_on_string, .stop_ctx = &p->sc,
		.out_tokens = ca_xmalloc(sizeof(int) * (size_t)(cfg->max_tokens + 1)),
		.out_logprobs = ca_xmalloc(sizeof(float) * (size_t)(cfg->max_tokens + 1)),
	};
}

/* The record with its completion (and token record) added. */
static jv finish(const struct config *cfg, struct pending *p, int *status)
{
	if (p->bad)
		return sample_error(p, p->bad, status);
	if (p->req.produced < 0)
		return sample_error(p, p->req.why, status);
	int got = p->req.produced, n = p->n;
	const int *out = p->req.out_tokens;
	const float *lps = p->req.out_logprobs;
	const char *reason = "length";
	int text_tokens = got;
	if (p->sc.cut != SIZE_MAX) {
		reason = "stop";
	} else if (got > 0) {
		for (int i = 0; i < p->nstops; i++)
			if (out[got - 1] == p->stops[i]) {
				reason = "stop";
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
		if (p->sc.cut < len)
			len = p->sc.cut;
		c = jv_object_set(c, jv_string("text"), jv_string_sized(t, (int)len));
		free(t);
	}
	c = jv_object_set(c, jv_string("finish_reason"), jv_string(reason));
	c = jv_object_set(c, jv_string("prompt_tokens"), jv_number(n));
	jv record = jv_object_set(p->record, jv_string("completion"), c);
	p->record = jv_invalid();
	if (cfg->token_record) {
		jv all = jv_array(), mask = jv_array(), alp = jv_array();
		for (int i = 0; i < n; i++) {
			all = jv_array_append(all, jv_number(p->prompt[i]));
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
	return record;
}

/*
 * The GPU sampler for a batch: cache slots for every request, positions
 * for the longest prompt plus --max-tokens (rounded up, so that a slightly
 * longer batch does not make a new one). Returns -1 with why set.
 */
static int cuda_sampler_for(struct config *cfg, struct pending *items, int nitems, char why[CA_MODEL_WHY])
{
	int longest = 0;
	for (int i = 0; i < nitems; i++)
		if (!items[i].bad && items[i].n > longest)
			longest = items[i].n;
	long need = (long)longest + cfg->max_tokens, len = 1024;
	while (len < need)
		len *= 2;
	if (len > cfg->model->cfg.max_positions)
		len = cfg->model->cfg.max_positions;
	if (cfg->sampler && cfg->sampler_len >= len)
		return 0;
	if (cfg->sampler)
		cfg->cuda->sampler_free(cfg->sampler);
	int slots = cfg->slots < cfg->batch ? cfg->slots : cfg->batch;
	cfg->sampler = cfg->cuda->sampler_new(cfg->model, slots, (int)len, cfg->fp32, why);
	cfg->sampler_len = cfg->sampler ? (int)len : 0;
	return cfg->sampler ? 0 : -1;
}

/* Take a record into the batch; 1 when the batch is full. */
static int take(jv record, const char *where, void *ctx, int *status)
{
	struct config *cfg = ctx;
	struct pending *p = &cfg->items[cfg->nitems++];
	memset(p, 0, sizeof *p);
	p->record = record;
	p->where = ca_xstrdup(where);
	prepare(cfg, p);
	return cfg->nitems == cfg->batch;
}

/* Generate every pending record's completion; out[i] is record i with it. */
static void run(void *ctx, jv *out, int nitems, int *status)
{
	struct config *cfg = ctx;
	struct pending *items = cfg->items;
	if (cfg->device == CA_DEVICE_CUDA) {
		struct ca_sample_request *reqs = ca_xcalloc((size_t)nitems + 1, sizeof *reqs);
		int nreq = 0;
		for (int i = 0; i < nitems; i++)
			if (!items[i].bad)
				reqs[nreq++] = items[i].req;
		char why[CA_MODEL_WHY];
		if (nreq > 0 && (cuda_sampler_for(cfg, items, nitems, why) < 0 ||
				 cfg->cuda->sampler_generate(cfg->sampler, reqs, nreq, why) < 0))
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
		for (int i = 0, k = 0; i < nitems; i++)
			if (!items[i].bad) {
				items[i].req.produced = reqs[k].produced;
				memcpy(items[i].req.why, reqs[k++].why, CA_MODEL_WHY);
			}
		free(reqs);
	} else {
		for (int i = 0; i < nitems; i++) {
			struct pending *p = &items[i];
			if (!p->bad)
				p->req.produced = ca_model_generate(cfg->model, p->prompt, p->n, &p->req.params, stop_on_string,
								    &p->sc, p->req.out_tokens, p->req.out_logprobs,
								    p->req.why);
		}
	}
	for (int i = 0; i < nitems; i++) {
		struct pending *p = &items[i];
		out[i] = finish(cfg, p, status);
		free(p->where);
		free(p->prompt);
		free(p->req.out_tokens);
		free(p->req.out_logprobs);
	}
	cfg->nitems = 0;
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
		{"batch", required_argument, NULL, 'b'},
		{"device", required_argument, NULL, 'd'},
		{"fp32", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{"max-tokens", required_argument, NULL, 'n'},
		{"model", required_argument, NULL, 'm'},
		{"progress", no_argument, NULL, 'P'},
		{"seed", required_argument, NULL, 's'},
		{"slots", required_argument, NULL, 'l'},
		{"stop", required_argument, NULL, 'S'},
		{"stop-token", required_argument, NULL, 'T'},
		{"temperature", required_argument, NULL, 't'},
		{"token-record", no_argument, NULL, 'r'},
		{"top-p", required_argument, NULL, 'p'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	struct config cfg = {.temperature = 1.0, .top_p = 1.0, .max_tokens = 256, .slots = 64};
	const char *dir = NULL;
	int c;
	ca_err_init(argv[0]);
	cfg.stop = ca_xcalloc((size_t)argc + 1, sizeof *cfg.stop);
	while ((c = getopt_long(argc, argv, "hm:u", longopts, NULL)) != -1) {
		switch (c) {
		case 'b': cfg.batch = (int)ca_opt_long("--batch", optarg, 1, 1 << 16); break;
		case 'd': cfg.device = ca_device_parse("--device", optarg); break;
		case 'f': cfg.fp32 = 1; break;
		case 'h': fputs(usage_text, stdout); return ca_err_finish(CA_EXIT_OK);
		case 'l': cfg.slots = (int)ca_opt_long("--slots", optarg, 1, 1 << 12); break;
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
	if (cfg.batch == 0)   /* the CPU generates one record at a time anyway */
		cfg.batch = cfg.device == CA_DEVICE_CUDA ? 256 : 1;
	if (!dir) {
		ca_err_warn("-m DIR is required");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	char why[CA_MODEL_WHY];
	if (cfg.device == CA_DEVICE_CUDA) {
		cfg.cuda = ca_device_cuda(why);
		if (!cfg.cuda)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
		if (!cfg.cuda->sampler_new || !cfg.cuda->sampler_generate || !cfg.cuda->sampler_free)
			ca_err_die(CA_EXIT_SYSTEM, "%s has no sampler (rebuild with make model-cuda)", cfg.cuda->path);
	}
	cfg.model = ca_model_load(dir, why);
	if (!cfg.model)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	if (cfg.model->cfg.critic)
		ca_err_die(CA_EXIT_USAGE, "%s is a critic checkpoint; sampling needs a policy", dir);
	cfg.tok = ca_tokenizer_load(dir, cfg.tok_why);
	if (!cfg.tok && cfg.nstop > 0)
		ca_err_die(CA_EXIT_DATA, "--stop needs a tokenizer: %s", cfg.tok_why);
	load_eos(&cfg, dir);
	cfg.items = ca_xcalloc((size_t)cfg.batch, sizeof *cfg.items);
	int status = ca_ndjson_map_batch(argc - optind, argv + optind, take, run, &cfg);
	free(cfg.items);
	if (cfg.sampler)
		cfg.cuda->sampler_free(cfg.sampler);
	ca_tokenizer_free(cfg.tok);
	ca_model_free(cfg.model);
	free(cfg.stop);
	return status;
}
