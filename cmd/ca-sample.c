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
 * (lib/model/cuda/model_cuda_sample.cu), which decodes its requests together.
 * Output keeps the input order either way.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"

#include "device.h"
#include "err.h"
#include "http.h"
#include "json.h"
#include "model.h"
#include "ndjson.h"
#include "opt.h"
#include "tokenizer.h"

static const char usage_text[] =
	"usage: ca-sample [-hu] [--batch N] [--device cpu|cuda] [--fp32] [--max-tokens N]\n"
	"                 [--progress] [--seed N] [--slots N] [--stop STRING ...] [--stop-token ID ...]\n"
	"                 [--temperature X] [--token-record] [--top-p X] -m DIR [file ...]\n"
	"       ca-sample --serve [HOST:]PORT [--device cpu|cuda] [--fp32] [--idle SECONDS]\n"
	"                 [--max-request BYTES] [--max-tokens N] [--seed N] [--stop STRING ...]\n"
	"                 [--stop-token ID ...] [--temperature X] [--top-p X] -m DIR\n";

struct config {
	struct ca_model *model;
	struct ca_tokenizer *tok;   /* NULL when the checkpoint has no tokenizer.json */
	char tok_why[CA_TOKENIZER_WHY];
	double temperature, top_p;
	int max_tokens;
	unsigned long long seed;
	int nstop;
	const char **stop;
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
	const struct ca_tokenizer *tok;
	const char *const *stop;
	int nstop;
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
	if (s->nstop == 0 || !s->tok)
		return 0;
	size_t len;
	char *text = ca_tokenizer_decode(s->tok, tokens, (size_t)n, &len);
	int hit = 0;
	for (int i = 0; i < s->nstop; i++) {
		char *at = memmem(text, len, s->stop[i], strlen(s->stop[i]));
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

static int *prompt_tokens(jv a, int *n, const char **why)
{
	int *out;
	*n = ca_json_int_array(a, INT_MAX, &out);
	if (*n == 0)
		free(out);
	if (*n <= 0) {
		*why = *n == -2 ? "prompt_tokens must hold non-negative integers" : "prompt_tokens must be a non-empty array";
		return NULL;
	}
	return out;
}

/* A record's sampling settings: the command line's, and the seed of its place in the stream. */
static void defaults(struct config *cfg, struct pending *p)
{
	long index = cfg->index++;
	p->req.params = (struct ca_sample_params){
		.temperature = cfg->temperature, .top_p = cfg->top_p, .max_tokens = cfg->max_tokens,
		.seed = cfg->seed * 0x9e3779b97f4a7c15ull + (unsigned long long)index};
	p->sc = (struct stop_ctx){.tok = cfg->tok, .stop = cfg->stop, .nstop = cfg->nstop, .cut = SIZE_MAX};
}

/* The record's prompt as token ids, and the request to generate it (p->req.params set); p->bad set when impossible. */
static void prepare(struct config *cfg, struct pending *p)
{
	int chat_stop = -1;
	jv pt = ca_json_get(p->record, "prompt_tokens");
	jv text = ca_json_get(p->record, "prompt");
	jv messages = ca_json_get(p->record, "messages");
	if (jv_is_valid(pt)) {
		p->prompt = prompt_tokens(pt, &p->n, &p->bad);
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
	p->req.prompt = p->prompt;
	p->req.n = p->n;
	p->req.params.nstop_tokens = p->nstops;
	p->req.params.stop_tokens = p->stops;
	p->req.stop_fn = stop_on_string;
	p->req.stop_ctx = &p->sc;
	p->req.out_tokens = ca_xmalloc(sizeof(int) * (size_t)(p->req.params.max_tokens + 1));
	p->req.out_logprobs = ca_xmalloc(sizeof(float) * (size_t)(p->req.params.max_tokens + 1));
}

/* Why the completion stopped, and its text (jv_invalid without a tokenizer): a stop token or string is not part of it. */
static jv completion_text(const struct config *cfg, const struct pending *p, const char **reason)
{
	int got = p->req.produced, text_tokens = got;
	const int *out = p->req.out_tokens;
	*reason = "length";
	if (p->sc.cut != SIZE_MAX) {
		*reason = "stop";
	} else if (got > 0) {
		for (int i = 0; i < p->nstops; i++)
			if (out[got - 1] == p->stops[i]) {
				*reason = "stop";
				text_tokens = got - 1;
			}
	}
	if (!cfg->tok)
		return jv_invalid();
	size_t len;
	char *t = ca_tokenizer_decode(cfg->tok, out, (size_t)text_tokens, &len);
	if (p->sc.cut < len)
		len = p->sc.cut;
	jv text = jv_string_sized(t, (int)len);
	free(t);
	return text;
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
	const char *reason;
	jv text = completion_text(cfg, p, &reason);
	jv c = jv_object();
	jv toks = jv_array(), lp = jv_array();
	for (int i = 0; i < got; i++) {
		toks = jv_array_append(toks, jv_number(out[i]));
		lp = jv_array_append(lp, ca_json_num_or_null(lps[i]));
	}
	c = jv_object_set(c, jv_string("tokens"), jv_copy(toks));
	c = jv_object_set(c, jv_string("logprobs"), jv_copy(lp));
	if (jv_is_valid(text))
		c = jv_object_set(c, jv_string("text"), text);
	else
		jv_free(text);
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
 * for the longest prompt plus its max tokens (rounded up, so that a slightly
 * longer batch does not make a new one). Returns -1 with why set.
 */
static int cuda_sampler_for(struct config *cfg, struct pending *items, int nitems, char why[CA_MODEL_WHY])
{
	long need = 0, len = 1024;
	for (int i = 0; i < nitems; i++)
		if (!items[i].bad && items[i].n + (long)items[i].req.params.max_tokens > need)
			need = items[i].n + (long)items[i].req.params.max_tokens;
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
	defaults(cfg, p);
	prepare(cfg, p);
	return cfg->nitems == cfg->batch;
}

/* Generate the completions of items[0..nitems) that can be sampled. */
static void generate(struct config *cfg, struct pending *items, int nitems)
{
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
}

static void pending_free(struct pending *p)
{
	free(p->where);
	free(p->prompt);
	free(p->req.out_tokens);
	free(p->req.out_logprobs);
}

/* Generate every pending record's completion; out[i] is record i with it. */
static void run(void *ctx, jv *out, int nitems, int *status)
{
	struct config *cfg = ctx;
	struct pending *items = cfg->items;
	generate(cfg, items, nitems);
	for (int i = 0; i < nitems; i++) {
		struct pending *p = &items[i];
		out[i] = finish(cfg, p, status);
		pending_free(p);
	}
	cfg->nitems = 0;
}

/*
 * --serve: an OpenAI-compatible chat endpoint on the resident model. A
 * request's conversation is rendered as policy-ca-sample renders it
 * (lib/chat), sampled like a record, and answered with the reply read back
 * from the text, the sampled token ids and their log-probs.
 */
struct server {
	struct config *cfg;
	const char *name;      /* the model's name in replies and /v1/models */
	size_t max_request;
	long served;           /* requests answered, for the log and reply ids */
};

static volatile sig_atomic_t stop_signal;
static void on_stop_signal(int sig)
{
	stop_signal = sig;
}

/* OpenAI's error body. */
static jv api_error(const char *message, int status)
{
	jv e = jv_object_set(jv_object(), jv_string("message"), jv_string(message));
	e = jv_object_set(e, jv_string("type"), jv_string(status >= 500 ? "server_error" : "invalid_request_error"));
	e = jv_object_set(e, jv_string("code"), jv_number(status));
	return jv_object_set(jv_object(), jv_string("error"), e);
}

/*
 * A number field of the request: 0 when absent or null, 1 with *out set,
 * -1 with why set when it is not a number in [min, max] (an integer when
 * integral).
 */
static int number_field(jv req, const char *key, double min, double max, int integral, double *out, char *why)
{
	jv v = ca_json_get(req, key);
	int kind = jv_get_kind(v), rc = 0;
	if (kind == JV_KIND_NUMBER) {
		*out = jv_number_value(v);
		rc = *out >= min && *out <= max && (!integral || *out == floor(*out)) ? 1 : -1;
	} else if (kind != JV_KIND_NULL && kind != JV_KIND_INVALID) {
		rc = -1;
	}
	jv_free(v);
	if (rc < 0)
		snprintf(why, CA_MODEL_WHY, "%s must be %s from %g to %g", key, integral ? "an integer" : "a number", min,
			 max);
	return rc;
}

/* Is messages (borrowed) a conversation we can render? NULL, or why not (in why). */
static const char *check_messages(jv messages, char *why)
{
	if (jv_get_kind(messages) != JV_KIND_ARRAY || jv_array_length(jv_copy(messages)) == 0)
		return "messages must be a non-empty array";
	jv_array_foreach(messages, i, m) {
		jv role = jv_get_kind(m) == JV_KIND_OBJECT ? ca_json_get(m, "role") : jv_invalid();
		jv content = jv_get_kind(m) == JV_KIND_OBJECT ? ca_json_get(m, "content") : jv_invalid();
		jv calls = jv_get_kind(m) == JV_KIND_OBJECT ? ca_json_get(m, "tool_calls") : jv_invalid();
		const char *r = jv_get_kind(role) == JV_KIND_STRING ? jv_string_value(role) : "";
		int ck = jv_get_kind(content), tk = jv_get_kind(calls);
		if (jv_get_kind(m) != JV_KIND_OBJECT)
			snprintf(why, CA_MODEL_WHY, "messages[%d] is not an object", i);
		else if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
			snprintf(why, CA_MODEL_WHY, "messages[%d].role must be system, user, assistant or tool", i);
		else if (ck != JV_KIND_STRING && ck != JV_KIND_NULL && ck != JV_KIND_INVALID && ck != JV_KIND_ARRAY)
			snprintf(why, CA_MODEL_WHY, "messages[%d].content must be a string, a list of parts or null", i);
		else if (tk != JV_KIND_ARRAY && tk != JV_KIND_NULL && tk != JV_KIND_INVALID)
			snprintf(why, CA_MODEL_WHY, "messages[%d].tool_calls must be an array", i);
		else
			why[0] = 0;
		jv_free(role);
		jv_free(content);
		jv_free(calls);
		jv_free(m);
		if (why[0])
			return why;
	}
	return NULL;
}

/* stop: a string or a list of up to 16 non-empty strings (borrowed from req, which must outlive them). */
static const char *read_stops(jv stop, const char **stops, int *nstops)
{
	*nstops = 0;
	int kind = jv_get_kind(stop);
	if (kind == JV_KIND_NULL || kind == JV_KIND_INVALID)
		return NULL;
	if (kind == JV_KIND_STRING && jv_string_length_bytes(jv_copy(stop)) > 0) {
		stops[(*nstops)++] = jv_string_value(stop);
		return NULL;
	}
	if (kind != JV_KIND_ARRAY || jv_array_length(jv_copy(stop)) > 16)
		return "stop must be a string or a list of up to 16 strings";
	for (int i = 0; i < jv_array_length(jv_copy(stop)); i++) {
		jv s = jv_array_get(jv_copy(stop), i);
		int ok = jv_get_kind(s) == JV_KIND_STRING && jv_string_length_bytes(jv_copy(s)) > 0;
		if (ok)
			stops[(*nstops)++] = jv_string_value(s);   /* stop holds it */
		jv_free(s);
		if (!ok)
			return "stop must hold non-empty strings";
	}
	return NULL;
}

/* The sampling settings a request asks for, over the command line's (in p). NULL, or why not. */
static const char *request_params(jv req, struct pending *p, char *why)
{
	double x;
	int rc;
	if ((rc = number_field(req, "max_completion_tokens", 1, 1 << 24, 1, &x, why)) == 0)
		rc = number_field(req, "max_tokens", 1, 1 << 24, 1, &x, why);
	if (rc < 0)
		return why;
	if (rc > 0)
		p->req.params.max_tokens = (int)x;
	if ((rc = number_field(req, "temperature", 0, 100, 0, &x, why)) < 0)
		return why;
	if (rc > 0)
		p->req.params.temperature = x;
	if ((rc = number_field(req, "top_p", 1e-9, 1, 0, &x, why)) < 0)
		return why;
	if (rc > 0)
		p->req.params.top_p = x;
	/* A seed draws as ca-sample --seed draws for its first record. */
	if ((rc = number_field(req, "seed", 0, 9007199254740991.0, 1, &x, why)) < 0)
		return why;
	if (rc > 0)
		p->req.params.seed = (unsigned long long)x * 0x9e3779b97f4a7c15ull;
	if ((rc = number_field(req, "n", 1, 1, 1, &x, why)) < 0)
		return "n must be 1: one choice per request";
	if ((rc = number_field(req, "top_logprobs", 0, 0, 1, &x, why)) < 0)
		return "top_logprobs is not supported (the sampled token's log-prob is always returned)";
	if (ca_json_bool(req, "stream") == 1)
		return "stream is not supported";
	return NULL;
}

/* The assistant turns before this one, plus one: the turn in tool-call ids (as ca-agent numbers them). */
static int turn_of(jv messages)
{
	int turn = 1;
	jv_array_foreach(messages, i, m) {
		jv role = ca_json_get(m, "role");
		turn += jv_get_kind(role) == JV_KIND_STRING && !strcmp(jv_string_value(role), "assistant");
		jv_free(role);
		jv_free(m);
	}
	return turn;
}

/* What the engine sampled for p, as an OpenAI chat completion with vLLM's token ids. */
static jv chat_response(struct server *sv, struct pending *p, int turn)
{
	const struct config *cfg = sv->cfg;
	const char *reason;
	jv text = completion_text(cfg, p, &reason);
	jv message = ca_chat_reply(jv_string_value(text), (size_t)jv_string_length_bytes(jv_copy(text)), turn);
	jv_free(text);
	if (!strcmp(reason, "stop") && jv_object_has(jv_copy(message), jv_string("tool_calls")))
		reason = "tool_calls";
	int got = p->req.produced;
	jv ids = jv_array(), content = jv_array(), prompt = jv_array();
	for (int i = 0; i < got; i++) {
		size_t len;
		char *piece = ca_tokenizer_decode(cfg->tok, &p->req.out_tokens[i], 1, &len);
		jv bytes = jv_array();
		for (size_t k = 0; k < len; k++)
			bytes = jv_array_append(bytes, jv_number((unsigned char)piece[k]));
		jv entry = jv_object_set(jv_object(), jv_string("token"), jv_string_sized(piece, (int)len));
		entry = jv_object_set(entry, jv_string("logprob"), ca_json_num_or_null(p->req.out_logprobs[i]));
		entry = jv_object_set(entry, jv_string("bytes"), bytes);
		entry = jv_object_set(entry, jv_string("top_logprobs"), jv_array());
		content = jv_array_append(content, entry);
		ids = jv_array_append(ids, jv_number(p->req.out_tokens[i]));
		free(piece);
	}
	for (int i = 0; i < p->n; i++)
		prompt = jv_array_append(prompt, jv_number(p->prompt[i]));
	jv choice = jv_object_set(jv_object(), jv_string("index"), jv_number(0));
	choice = jv_object_set(choice, jv_string("message"), message);
	choice = jv_object_set(choice, jv_string("finish_reason"), jv_string(reason));
	choice = jv_object_set(choice, jv_string("logprobs"),
			       jv_object_set(jv_object(), jv_string("content"), content));
	choice = jv_object_set(choice, jv_string("token_ids"), ids);
	jv usage = jv_object_set(jv_object(), jv_string("prompt_tokens"), jv_number(p->n));
	usage = jv_object_set(usage, jv_string("completion_tokens"), jv_number(got));
	usage = jv_object_set(usage, jv_string("total_tokens"), jv_number(p->n + got));
	jv r = jv_object_set(jv_object(), jv_string("id"), jv_string_fmt("chatcmpl-%ld-%ld", (long)getpid(), sv->served));
	r = jv_object_set(r, jv_string("object"), jv_string("chat.completion"));
	r = jv_object_set(r, jv_string("created"), jv_number((double)time(NULL)));
	r = jv_object_set(r, jv_string("model"), jv_string(sv->name));
	r = jv_object_set(r, jv_string("choices"), jv_array_append(jv_array(), choice));
	r = jv_object_set(r, jv_string("prompt_token_ids"), prompt);
	return jv_object_set(r, jv_string("usage"), usage);
}

/* Answer a chat completion request (body[0..len)); *status gets the HTTP status. */
static jv chat_completion(struct server *sv, const char *body, size_t len, int *status)
{
	struct config *cfg = sv->cfg;
	char why[CA_MODEL_WHY];
	const char *bad = NULL;
	jv req = ca_json_parse(body, len);
	jv messages = jv_null(), tools = jv_null(), stop = jv_null();
	struct pending p = {.record = jv_invalid()};
	const char *stops[16];
	if (!jv_is_valid(req)) {
		jv msg = jv_invalid_get_msg(jv_copy(req));
		snprintf(why, sizeof why, "the body is not JSON: %s",
			 jv_get_kind(msg) == JV_KIND_STRING ? jv_string_value(msg) : "empty");
		jv_free(msg);
		bad = why;
	} else if (jv_get_kind(req) != JV_KIND_OBJECT) {
		bad = "the body must be a JSON object";
	} else {
		messages = ca_json_get(req, "messages");
		tools = ca_json_get(req, "tools");
		stop = ca_json_get(req, "stop");
		if (!jv_is_valid(messages))
			bad = "messages is missing";
		else
			bad = check_messages(messages, why);
		if (!bad && jv_get_kind(tools) != JV_KIND_ARRAY && jv_get_kind(tools) != JV_KIND_NULL &&
		    jv_is_valid(tools))
			bad = "tools must be an array";
		if (!bad) {
			defaults(cfg, &p);
			bad = request_params(req, &p, why);
		}
		if (!bad)
			bad = read_stops(stop, stops, &p.sc.nstop);
	}
	int turn = bad ? 0 : turn_of(messages);
	if (!bad) {
		p.sc.stop = stops;
		jv shown = ca_chat_render(jv_copy(messages), jv_is_valid(tools) ? jv_copy(tools) : jv_null());
		p.record = jv_object_set(jv_object(), jv_string("messages"), shown);
		p.where = ca_xstrdup("request");
		prepare(cfg, &p);
		if (p.bad)
			bad = p.bad;
	}
	if (!bad) {
		generate(cfg, &p, 1);
		if (p.req.produced < 0)
			bad = p.req.why;
	}
	jv reply = bad ? api_error(bad, 400) : chat_response(sv, &p, turn);
	if (bad && p.sc.tok)
		cfg->index--;   /* the seed of a request's place counts the requests sampled */
	*status = bad ? 400 : 200;
	jv_free(p.record);
	pending_free(&p);
	jv_free(stop);
	jv_free(tools);
	jv_free(messages);
	jv_free(req);
	return reply;
}

static jv models(const struct server *sv)
{
	jv m = jv_object_set(jv_object(), jv_string("id"), jv_string(sv->name));
	m = jv_object_set(m, jv_string("object"), jv_string("model"));
	m = jv_object_set(m, jv_string("created"), jv_number(0));
	m = jv_object_set(m, jv_string("owned_by"), jv_string("ca"));
	m = jv_object_set(m, jv_string("max_model_len"), jv_number(sv->cfg->model->cfg.max_positions));
	jv r = jv_object_set(jv_object(), jv_string("object"), jv_string("list"));
	return jv_object_set(r, jv_string("data"), jv_array_append(jv_array(), m));
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Read, answer and log one connection's request. */
static void serve_one(struct server *sv, int fd)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct ca_http_request r;
	char why[CA_HTTP_WHY];
	int status = ca_http_read(fd, sv->max_request, &r, why);
	int chat = !strcmp(r.path, "/v1/chat/completions") || !strcmp(r.path, "/chat/completions");
	int list = !strcmp(r.path, "/v1/models") || !strcmp(r.path, "/models");
	jv reply;
	if (status)
		reply = api_error(why, status);
	else if ((chat && strcmp(r.method, "POST")) || (list && strcmp(r.method, "GET")))
		reply = api_error(chat ? "use POST" : "use GET", status = 405);
	else if (chat)
		reply = chat_completion(sv, r.body, r.body_len, &status);
	else if (list)
		reply = models(sv), status = 200;
	else
		reply = api_error("no such endpoint: POST /v1/chat/completions and GET /v1/models are served", status = 404);
	jv log = jv_object_set(jv_object(), jv_string("index"), jv_number(sv->served++));
	log = jv_object_set(log, jv_string("method"), jv_string(r.method));
	log = jv_object_set(log, jv_string("path"), jv_string(r.path));
	log = jv_object_set(log, jv_string("status"), jv_number(status));
	jv usage = ca_json_get(reply, "usage");
	if (jv_get_kind(usage) == JV_KIND_OBJECT) {
		log = jv_object_set(log, jv_string("prompt_tokens"), ca_json_get(usage, "prompt_tokens"));
		log = jv_object_set(log, jv_string("completion_tokens"), ca_json_get(usage, "completion_tokens"));
		jv choices = ca_json_get(reply, "choices");
		jv first = jv_array_get(choices, 0);
		log = jv_object_set(log, jv_string("finish_reason"), ca_json_get(first, "finish_reason"));
		jv_free(first);
	}
	jv_free(usage);
	jv message = ca_json_path(reply, "error.message");
	if (jv_get_kind(message) == JV_KIND_STRING) {
		ca_err_warn("%s %s: %d %s", r.method[0] ? r.method : "-", r.path[0] ? r.path : "-", status,
			    jv_string_value(message));
		log = jv_object_set(log, jv_string("error"), message);
	} else {
		jv_free(message);
	}
	jv text = jv_dump_string(reply, 0);
	if (ca_http_reply(fd, status, "application/json", jv_string_value(text),
			  (size_t)jv_string_length_bytes(jv_copy(text))) < 0)
		log = jv_object_set(log, jv_string("error"), jv_string("the client went away before the reply"));
	jv_free(text);
	ca_http_close(fd);
	ca_http_request_free(&r);
	log = jv_object_set(log, jv_string("t_s"), jv_number(round(seconds_since(&t0) * 1000) / 1000));
	if (ca_ndjson_write(jv_object_set(jv_object(), jv_string("request"), log)) < 0)
		stop_signal = SIGPIPE;
}

/* Serve until a signal, or idle_s seconds without a request (0: no limit). */
static int serve(struct server *sv, const char *address, double idle_s)
{
	int port;
	char why[CA_HTTP_WHY];
	int fd = ca_http_listen(address, &port, why);
	if (fd < 0)
		ca_err_die(CA_EXIT_SYSTEM, "--serve %s", why);
	char host[256] = "127.0.0.1";
	const char *colon = strrchr(address, ':');
	if (colon)
		snprintf(host, sizeof host, "%.*s", (int)(colon - address), address);
	if (strncmp(host, "127.", 4) && strcmp(host, "localhost"))
		ca_err_warn("serving on %s, not loopback: whoever reaches it can use the model (there is no authentication)",
			    host);
	struct sigaction sa = {.sa_handler = on_stop_signal};   /* no SA_RESTART: the wait for a connection ends */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	jv ready = jv_object_set(jv_object(), jv_string("url"), jv_string_fmt("http://%s:%d/v1", host, port));
	ready = jv_object_set(ready, jv_string("model"), jv_string(sv->name));
	ready = jv_object_set(ready, jv_string("pid"), jv_number(getpid()));
	ca_ndjson_set_unbuffered(1);
	ca_ndjson_write(jv_object_set(jv_object(), jv_string("serve"), ready));
	int status = CA_EXIT_OK;
	while (!stop_signal) {
		int c = ca_http_accept(fd, idle_s > 0 ? (int)(idle_s * 1000) : -1);
		if (c >= 0) {
			serve_one(sv, c);
		} else if (errno == ETIMEDOUT) {
			ca_err_warn("no request for %g s: stopping (--idle)", idle_s);
			break;
		} else if (errno != EINTR && errno != ECONNABORTED) {
			ca_err_warn_sys("accepting a connection");
			status = CA_EXIT_SYSTEM;
			sleep(1);   /* out of descriptors, say: let the clients in flight finish */
		}
	}
	close(fd);
	return stop_signal && stop_signal != SIGPIPE ? CA_EXIT_OK : status;
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

/* The model's name in replies: the checkpoint directory's last component. */
static char *model_name(const char *dir)
{
	char *copy = ca_xstrdup(dir);
	size_t n = strlen(copy);
	while (n > 1 && copy[n - 1] == '/')
		copy[--n] = 0;
	const char *slash = strrchr(copy, '/');
	char *name = ca_xstrdup(slash && slash[1] ? slash + 1 : copy);
	free(copy);
	return name;
}

/* Serving chat needs a tokenizer with a chat format: say so at start, not on the first request. */
static void check_chat(const struct config *cfg, const char *dir)
{
	if (!cfg->tok)
		ca_err_die(CA_EXIT_DATA, "--serve needs the checkpoint's tokenizer: %s", cfg->tok_why);
	char why[CA_TOKENIZER_WHY];
	int stop;
	jv one = jv_array_append(jv_array(), jv_object_set(jv_object_set(jv_object(), jv_string("role"),
		jv_string("user")), jv_string("content"), jv_string("")));
	char *text = ca_tokenizer_chat(cfg->tok, one, 1, &stop, why);
	jv_free(one);
	if (!text)
		ca_err_die(CA_EXIT_DATA, "%s: --serve needs a chat format: %s", dir, why);
	free(text);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"batch", required_argument, NULL, 'b'},
		{"device", required_argument, NULL, 'd'},
		{"fp32", no_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{"idle", required_argument, NULL, 'i'},
		{"max-request", required_argument, NULL, 'R'},
		{"max-tokens", required_argument, NULL, 'n'},
		{"model", required_argument, NULL, 'm'},
		{"progress", no_argument, NULL, 'P'},
		{"seed", required_argument, NULL, 's'},
		{"serve", required_argument, NULL, 'A'},
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
	const char *dir = NULL, *serve_address = NULL;
	double idle_s = 0;
	long long max_request = 16 << 20;
	int c;
	ca_err_init(argv[0]);
	cfg.stop = ca_xcalloc((size_t)argc + 1, sizeof *cfg.stop);
	while ((c = getopt_long(argc, argv, "hm:u", longopts, NULL)) != -1) {
		switch (c) {
		case 'A': serve_address = optarg; break;
		case 'b': cfg.batch = (int)ca_opt_long("--batch", optarg, 1, 1 << 16); break;
		case 'd': cfg.device = ca_device_parse("--device", optarg); break;
		case 'f': cfg.fp32 = 1; break;
		case 'i': idle_s = ca_opt_double("--idle", optarg, 0, 1e9); break;
		case 'l': cfg.slots = (int)ca_opt_long("--slots", optarg, 1, 1 << 12); break;
		case 'm': dir = optarg; break;
		case 'n': cfg.max_tokens = (int)ca_opt_long("--max-tokens", optarg, 0, 1 << 24); break;
		case 'p': cfg.top_p = ca_opt_double("--top-p", optarg, 1e-9, 1); break;
		case 'R': max_request = ca_opt_long("--max-request", optarg, 1024, (long long)1 << 30); break;
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
		default: ca_opt_common(c, usage_text);
		}
	}
	if (cfg.batch == 0)   /* the CPU generates one record at a time anyway */
		cfg.batch = cfg.device == CA_DEVICE_CUDA ? 256 : 1;
	if (!dir) {
		ca_err_warn("-m DIR is required");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	if (serve_address && optind < argc) {
		ca_err_warn("--serve reads no files");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	cfg.cuda = ca_device_open(cfg.device, CA_DEVICE_SAMPLER);
	cfg.model = ca_model_open(dir);
	if (cfg.model->cfg.critic)
		ca_err_die(CA_EXIT_USAGE, "%s is a critic checkpoint; sampling needs a policy", dir);
	cfg.tok = ca_tokenizer_load(dir, cfg.tok_why);
	if (!cfg.tok && cfg.nstop > 0)
		ca_err_die(CA_EXIT_DATA, "--stop needs a tokenizer: %s", cfg.tok_why);
	load_eos(&cfg, dir);
	int status;
	if (serve_address) {
		struct server sv = {.cfg = &cfg, .name = model_name(dir), .max_request = (size_t)max_request};
		check_chat(&cfg, dir);
		status = ca_err_finish(serve(&sv, serve_address, idle_s));
		free((char *)sv.name);
	} else {
		cfg.items = ca_xcalloc((size_t)cfg.batch, sizeof *cfg.items);
		status = ca_ndjson_map_batch(argc - optind, argv + optind, take, run, &cfg);
		free(cfg.items);
	}
	if (cfg.sampler)
		cfg.cuda->sampler_free(cfg.sampler);
	ca_tokenizer_free(cfg.tok);
	ca_model_free(cfg.model);
	free(cfg.stop);
	return status;
}
