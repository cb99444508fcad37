/*
 * ca-logprob: add per-token log-probs (policy checkpoint) or values (critic
 * checkpoint) to token records.
 *
 * Records are packed into batches of about --batch-tokens tokens and run
 * through one forward pass each (on the CPU, or with --device cuda on the
 * GPU forward of lib/model/cuda); attention never crosses records. This is how
 * PPO's old log-probs and the critic's values are produced.
 *
 * Entry i of every array belongs to the action of emitting tokens[i]: its
 * log-prob and entropy come from position i - 1, and so does its value,
 * V(s_i), the value of the state before the token, which is what ca-gae
 * and the training steps read (ca-records(5)). Entry 0 has no state before
 * it: null for log-probs and entropy, 0 for the value.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "err.h"
#include "json.h"
#include "model.h"
#include "ndjson.h"
#include "opt.h"

static const char usage_text[] =
	"usage: ca-logprob [-hu] [--batch-tokens N] [--device cpu|cuda] [--entropy] [--progress]\n"
	"                  -m DIR [file ...]\n";

struct pending {
	jv record;          /* the input record (owned) */
	int *tokens;
	int n;
	char *where;        /* "FILE:LINE" for messages */
	char *error;        /* set when the record cannot be scored */
};

struct state {
	struct ca_model *model;
	const struct ca_cuda_api *cuda;   /* NULL on the CPU */
	struct ca_cuda_model *gpu;
	int entropy;
	long batch_tokens;
	struct pending *items;
	int nitems, cap;
	long ntokens;
};

/* Parse the record's "tokens" array; returns NULL with *why set on failure. */
static int *parse_tokens(jv record, int *n, const char **why)
{
	jv toks = ca_json_get(record, "tokens");
	int *out;
	int len = ca_json_int_array(toks, INT_MAX, &out);
	jv_free(toks);
	if (len == 0)
		free(out);
	if (len <= 0) {
		*why = len == -1 ? "record has no tokens array" : len == 0 ? "tokens array is empty" :
			"tokens must be non-negative integers";
		return NULL;
	}
	*n = len;
	return out;
}

static jv float_array(const float *x, int n, int first_null)
{
	jv a = jv_array();
	for (int i = 0; i < n; i++)
		a = jv_array_append(a, i == 0 && first_null ? jv_null() : ca_json_num_or_null(x[i]));
	return a;
}

static jv failed(struct pending *p, const char *why, int *status)
{
	ca_err_warn("%s: %s", p->where, why);
	*status = ca_err_worst(*status, CA_EXIT_DATA);
	jv r = jv_object_set(p->record, jv_string("logprob_error"), jv_string(why));
	p->record = jv_invalid();
	return r;
}

/* Take a record into the batch; 1 when the batch holds enough tokens for a forward pass. */
static int take(jv record, const char *where, void *ctx, int *status)
{
	struct state *s = ctx;
	if (s->nitems == s->cap)
		s->items = ca_xrealloc(s->items, sizeof *s->items * (size_t)(s->cap = s->cap ? 2 * s->cap : 16));
	struct pending *p = &s->items[s->nitems++];
	memset(p, 0, sizeof *p);
	p->record = record;
	p->where = ca_xstrdup(where);
	const char *bad = NULL;
	p->tokens = parse_tokens(record, &p->n, &bad);
	if (!p->tokens)
		p->error = ca_xstrdup(bad);
	else
		s->ntokens += p->n;
	return s->ntokens >= s->batch_tokens;
}

/* Score every pending record (those without errors) in one forward pass; out[i] is record i with its scores. */
static void run(void *ctx, jv *out, int n, int *status)
{
	struct state *s = ctx;
	const struct ca_model_config *c = &s->model->cfg;
	int T = 0, nseq = 0;
	for (int i = 0; i < s->nitems; i++) {
		struct pending *p = &s->items[i];
		if (p->error)
			continue;
		for (int j = 0; j < p->n; j++)
			if (p->tokens[j] >= c->vocab_size) {
				p->error = ca_xstrdup("token outside the model's vocabulary");
				break;
			}
		if (!p->error && p->n > c->max_positions)
			p->error = ca_xstrdup("sequence longer than max_position_embeddings");
		if (!p->error) {
			T += p->n;
			nseq++;
		}
	}
	float *logprobs = NULL, *entropy = NULL, *values = NULL;
	char why[CA_MODEL_WHY] = "";
	int ok = 1;
	if (T > 0) {
		int *tokens = ca_xmalloc(sizeof(int) * (size_t)T), *targets = ca_xmalloc(sizeof(int) * (size_t)T);
		int *lens = ca_xmalloc(sizeof(int) * (size_t)nseq);
		int t = 0, k = 0;
		for (int i = 0; i < s->nitems; i++) {
			struct pending *p = &s->items[i];
			if (p->error)
				continue;
			lens[k++] = p->n;
			for (int j = 0; j < p->n; j++, t++) {
				tokens[t] = p->tokens[j];
				targets[t] = j + 1 < p->n ? p->tokens[j + 1] : -1;
			}
		}
		struct ca_batch b = {.T = T, .tokens = tokens, .nseq = nseq, .seq_len = lens};
		if (c->critic) {
			values = ca_xmalloc(sizeof(float) * (size_t)T);
		} else {
			logprobs = ca_xmalloc(sizeof(float) * (size_t)T);
			if (s->entropy)
				entropy = ca_xmalloc(sizeof(float) * (size_t)T);
		}
		if (s->gpu)
			ok = s->cuda->model_forward(s->gpu, &b, targets, logprobs, entropy, values, why) == 0;
		else
			ok = ca_model_forward(s->model, &b, targets, logprobs, entropy, values, 0, why) == 0;
		free(tokens);
		free(targets);
		free(lens);
	}
	for (int i = 0, t = 0; i < n; i++) {
		struct pending *p = &s->items[i];
		if (p->error) {
			out[i] = failed(p, p->error, status);
		} else if (!ok) {
			out[i] = failed(p, why, status);
		} else if (c->critic) {
			/* values[j] is V(s_j), the critic at position j - 1, before tokens[j]. */
			float *shifted = ca_xmalloc(sizeof(float) * (size_t)p->n);
			shifted[0] = 0;
			for (int j = 1; j < p->n; j++)
				shifted[j] = values[t + j - 1];
			out[i] = jv_object_set(p->record, jv_string("values"), float_array(shifted, p->n, 0));
			free(shifted);
			p->record = jv_invalid();
			t += p->n;
		} else {
			/* logprobs[j] scores tokens[j]: it was computed at position j - 1. */
			float *shifted = ca_xmalloc(sizeof(float) * (size_t)p->n);
			shifted[0] = 0;
			for (int j = 1; j < p->n; j++)
				shifted[j] = logprobs[t + j - 1];
			out[i] = jv_object_set(p->record, jv_string("logprobs"), float_array(shifted, p->n, 1));
			if (entropy) {
				for (int j = 1; j < p->n; j++)
					shifted[j] = entropy[t + j - 1];
				out[i] = jv_object_set(out[i], jv_string("entropy"), float_array(shifted, p->n, 1));
			}
			free(shifted);
			p->record = jv_invalid();
			t += p->n;
		}
		free(p->tokens);
		free(p->where);
		free(p->error);
	}
	free(logprobs);
	free(entropy);
	free(values);
	s->nitems = 0;
	s->ntokens = 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"batch-tokens", required_argument, NULL, 'b'},
		{"device", required_argument, NULL, 'd'},
		{"entropy", no_argument, NULL, 'e'},
		{"help", no_argument, NULL, 'h'},
		{"model", required_argument, NULL, 'm'},
		{"progress", no_argument, NULL, 'P'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	struct state s = {.batch_tokens = 2048};
	const char *dir = NULL;
	int c;
	enum ca_device device = CA_DEVICE_CPU;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hm:u", longopts, NULL)) != -1) {
		switch (c) {
		case 'b': s.batch_tokens = ca_opt_long("--batch-tokens", optarg, 1, 1L << 30); break;
		case 'd': device = ca_device_parse("--device", optarg); break;
		case 'e': s.entropy = 1; break;
		case 'm': dir = optarg; break;
		default: ca_opt_common(c, usage_text);
		}
	}
	if (!dir) {
		ca_err_warn("-m DIR is required");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	s.cuda = ca_device_open(device, CA_DEVICE_FORWARD);
	s.model = ca_model_open(dir);
	if (s.entropy && s.model->cfg.critic)
		ca_err_die(CA_EXIT_USAGE, "--entropy needs a policy checkpoint, %s is a critic", dir);
	char why[CA_MODEL_WHY];
	if (s.cuda && !(s.gpu = s.cuda->model_upload(s.model, why)))
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);

	int status = ca_ndjson_map_batch(argc - optind, argv + optind, take, run, &s);
	free(s.items);
	if (s.gpu)
		s.cuda->model_free(s.gpu);
	ca_model_free(s.model);
	return status;
}
