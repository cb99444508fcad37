/*
 * ca-gae: Generalized Advantage Estimation over token trajectories.
 *
 * Each record carries "values" (the critic's value per token), an optional
 * "mask" (1 = policy token, 0 = environment token) and either "reward"
 * (outcome reward, credited to the last policy token) or "rewards" (one per
 * token). ca-gae adds "advantages" and "returns"; with --whiten it also adds
 * "advantages_whitened", normalised over every policy token of the whole
 * input, which it therefore buffers; fewer than two policy tokens cannot be
 * whitened (verl raises), so the records go out without it and the exit
 * status says so. The arithmetic lives in lib/rl/rl.c.
 *
 * Speed: records are large number arrays, and building jv values for them
 * costs more than the arithmetic. So a record is first scanned as raw text
 * (lib/core/json.c's validating scanner); when the scanner vouches for it, the
 * arrays are parsed directly and the output is the input text with the new
 * fields appended before the closing brace. Anything unusual goes through
 * libjq, which also produces every error message.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "rl.h"

static const char usage_text[] =
	"usage: ca-gae [-hu] [--gamma X] [--jv] [--lambda X] [--progress] [--whiten] [file ...]\n";

struct config {
	double gamma, lambda;
	int whiten;
	int jv_only;
};

/* One record's outcome; kept until the end of input in --whiten mode. */
struct item {
	char *prefix;          /* fast path: input text before the closing brace */
	size_t prefixlen;
	jv record;             /* jv path: the output record so far */
	jv parsed;             /* jv path: the record as read from text, whose other fields go out as written */
	char *text;
	size_t textlen;
	size_t n;
	double *advantages, *returns;
	unsigned char *mask;   /* NULL: all tokens are policy tokens */
	int ok;                /* advantages computed */
};

/* Scratch arrays reused across records. */
struct scratch {
	double *values, *rewards, *mask_numbers;
	size_t values_cap, rewards_cap, mask_cap;
	char *out;
	size_t outlen, outcap;
};

static void grow_doubles(double **a, size_t *cap, size_t n)
{
	if (*cap < n) {
		*cap = n;
		*a = ca_xrealloc(*a, n * sizeof **a);
	}
}

static void out_reserve(struct scratch *s, size_t more)
{
	if (s->outlen + more > s->outcap) {
		s->outcap = (s->outlen + more) * 2;
		s->out = ca_xrealloc(s->out, s->outcap);
	}
}

static void out_append(struct scratch *s, const char *text, size_t len)
{
	out_reserve(s, len);
	memcpy(s->out + s->outlen, text, len);
	s->outlen += len;
}

static void out_array(struct scratch *s, const char *name, const double *x, size_t n)
{
	out_reserve(s, strlen(name) + 8 + 33 * n);
	s->out[s->outlen++] = ',';
	s->out[s->outlen++] = '"';
	memcpy(s->out + s->outlen, name, strlen(name));
	s->outlen += strlen(name);
	s->out[s->outlen++] = '"';
	s->out[s->outlen++] = ':';
	s->out[s->outlen++] = '[';
	for (size_t i = 0; i < n; i++) {
		if (i)
			s->out[s->outlen++] = ',';
		s->outlen += ca_json_format_double(x[i], s->out + s->outlen);
	}
	s->out[s->outlen++] = ']';
}

static void compute(const struct config *cfg, struct item *it, const double *values, double *rewards)
{
	it->advantages = ca_xmalloc(it->n * sizeof *it->advantages);
	it->returns = ca_xmalloc(it->n * sizeof *it->returns);
	ca_rl_gae(it->n, values, rewards, it->mask, cfg->gamma, cfg->lambda, it->advantages, it->returns);
	it->ok = 1;
}

static unsigned char *mask_from_numbers(const double *x, size_t n)
{
	unsigned char *mask = ca_xmalloc(n ? n : 1);
	for (size_t i = 0; i < n; i++) {
		if (x[i] != 0 && x[i] != 1) {
			free(mask);
			return NULL;
		}
		mask[i] = x[i] == 1;
	}
	return mask;
}

/* The fast path: 1 when it handled the record, 0 to fall back to jv. */
static int try_fast(const struct config *cfg, struct scratch *s, const char *text, size_t len, struct item *it)
{
	enum { VALUES, MASK, REWARD, REWARDS, ADVANTAGES, RETURNS, WHITENED, NKEYS };
	static const char *const keys[NKEYS] = {"values", "mask", "reward", "rewards", "advantages", "returns",
		"advantages_whitened"};
	struct ca_json_span spans[NKEYS];
	size_t close;
	if (ca_json_scan_object(text, len, keys, NKEYS, spans, &close) != 0)
		return 0;
	if (spans[ADVANTAGES].start || spans[RETURNS].start || spans[WHITENED].start)
		return 0;  /* replacing fields is jv's job */
	if (!spans[VALUES].start || !spans[REWARD].start == !spans[REWARDS].start)
		return 0;
	long n = ca_json_number_array(spans[VALUES], &s->values, &s->values_cap);
	if (n < 0)
		return 0;
	unsigned char *mask = NULL;
	if (spans[MASK].start) {
		long m = ca_json_number_array(spans[MASK], &s->mask_numbers, &s->mask_cap);
		if (m != n || !(mask = mask_from_numbers(s->mask_numbers, (size_t)n)))
			return 0;
	}
	grow_doubles(&s->rewards, &s->rewards_cap, (size_t)n + 1);
	if (spans[REWARD].start) {
		char *stop;
		const char *p = spans[REWARD].start;
		double r = NAN;
		if (*p == '-' || (*p >= '0' && *p <= '9')) {
			r = ca_json_strtod(p, &stop);
		} else if (*p == '{') {  /* ca-reward's object: parse just that */
			jv obj = jv_parse_sized(p, (int)spans[REWARD].len);
			jv value = jv_object_get(obj, jv_string("value"));
			if (jv_get_kind(value) == JV_KIND_NUMBER)
				r = jv_number_value(value);
			jv_free(value);
		}
		if (!isfinite(r)) {
			free(mask);
			return 0;
		}
		ca_rl_outcome_rewards((size_t)n, mask, r, s->rewards);
	} else {
		if (ca_json_number_array(spans[REWARDS], &s->rewards, &s->rewards_cap) != n) {
			free(mask);
			return 0;
		}
	}
	it->n = (size_t)n;
	it->mask = mask;
	it->prefix = (char *)text;
	it->prefixlen = close;
	/* An object with "values" has members, so the new fields follow a comma. */
	compute(cfg, it, s->values, s->rewards);
	return 1;
}

/* Read a number array field through jv; NULL with *why on failure. */
static double *jv_numbers(jv record, const char *key, size_t *n, int required, const char **why, char *whybuf, size_t whylen)
{
	jv a = ca_json_get(record, key);
	if (!jv_is_valid(a) || jv_get_kind(a) == JV_KIND_NULL) {
		jv_free(a);
		*n = 0;
		if (required)
			snprintf(whybuf, whylen, "%s is missing", key), *why = whybuf;
		return NULL;
	}
	if (jv_get_kind(a) != JV_KIND_ARRAY) {
		snprintf(whybuf, whylen, "%s is a %s, not an array", key, jv_kind_name(jv_get_kind(a)));
		*why = whybuf;
		jv_free(a);
		return NULL;
	}
	int len = jv_array_length(jv_copy(a));
	double *x = ca_xmalloc((size_t)(len ? len : 1) * sizeof *x);
	for (int i = 0; i < len; i++) {
		jv e = jv_array_get(jv_copy(a), i);
		jv_kind kind = jv_get_kind(e);
		if (kind == JV_KIND_NUMBER && isfinite(jv_number_value(e))) {
			x[i] = jv_number_value(e);
		} else if (kind == JV_KIND_NUMBER) {
			snprintf(whybuf, whylen, "%s[%d] is not a finite number", key, i);
			*why = whybuf;
		} else if ((kind == JV_KIND_TRUE || kind == JV_KIND_FALSE) && strcmp(key, "mask") == 0) {
			x[i] = kind == JV_KIND_TRUE;
		} else {
			snprintf(whybuf, whylen, "%s[%d] is a %s, not a number", key, i, jv_kind_name(kind));
			*why = whybuf;
		}
		jv_free(e);
		if (*why) {
			free(x);
			jv_free(a);
			return NULL;
		}
	}
	jv_free(a);
	*n = (size_t)len;
	return x;
}

/* The reference path through libjq; on bad data fills it->record with an error. */
static int jv_path(const struct config *cfg, struct scratch *s, jv record, struct item *it)
{
	char whybuf[256];
	const char *why = NULL;
	size_t n = 0, nmask = 0, nrewards = 0;
	double *values = NULL, *maskx = NULL, *rewards = NULL;
	unsigned char *mask = NULL;
	double reward = 0;

	values = jv_numbers(record, "values", &n, 1, &why, whybuf, sizeof whybuf);
	if (!why)
		maskx = jv_numbers(record, "mask", &nmask, 0, &why, whybuf, sizeof whybuf);
	if (!why && maskx) {
		if (nmask != n)
			snprintf(whybuf, sizeof whybuf, "mask has %zu entries, values has %zu", nmask, n), why = whybuf;
		else if (!(mask = mask_from_numbers(maskx, n)))
			why = "mask entries must be 0 or 1";
	}
	if (!why) {
		jv r = ca_json_get(record, "reward"), rs = ca_json_get(record, "rewards");
		int reward_object = jv_get_kind(r) == JV_KIND_OBJECT;
		if (reward_object)  /* ca-reward's object: its value */
			r = jv_object_get(r, jv_string("value"));
		int has_r = jv_is_valid(r) && jv_get_kind(r) != JV_KIND_NULL;
		int has_rs = jv_is_valid(rs) && jv_get_kind(rs) != JV_KIND_NULL;
		if (reward_object && !has_r && !has_rs)
			why = "reward.value is not a finite number";
		else if (has_r && has_rs)
			why = "both reward and rewards are given; give one";
		else if (!has_r && !has_rs)
			why = "neither reward nor rewards is given";
		else if (has_r && !(jv_get_kind(r) == JV_KIND_NUMBER && isfinite(jv_number_value(r))))
			why = "reward is not a finite number";
		else if (has_r)
			reward = jv_number_value(r);
		jv_free(r);
		jv_free(rs);
		if (!why && has_rs) {
			rewards = jv_numbers(record, "rewards", &nrewards, 1, &why, whybuf, sizeof whybuf);
			if (!why && nrewards != n)
				snprintf(whybuf, sizeof whybuf, "rewards has %zu entries, values has %zu", nrewards, n), why = whybuf;
		}
	}
	free(maskx);
	if (why) {
		free(values);
		free(rewards);
		free(mask);
		it->record = ca_ndjson_record_error(record, why);
		return CA_EXIT_DATA;
	}
	if (!rewards) {
		grow_doubles(&s->rewards, &s->rewards_cap, n + 1);
		ca_rl_outcome_rewards(n, mask, reward, s->rewards);
	}
	it->n = n;
	it->mask = mask;
	compute(cfg, it, values, rewards ? rewards : s->rewards);
	free(values);
	free(rewards);
	it->record = record;
	return CA_EXIT_OK;
}

static jv jv_doubles(const double *x, size_t n)
{
	jv a = jv_array_sized((int)n);
	for (size_t i = 0; i < n; i++)
		a = jv_array_append(a, jv_number(x[i]));
	return a;
}

/* Write one finished item (whitened may be NULL) and free it; -1 on write error. */
static int emit(struct scratch *s, struct item *it, const double *whitened)
{
	int rc;
	if (it->prefix) {
		s->outlen = 0;
		out_append(s, it->prefix, it->prefixlen);
		out_array(s, "advantages", it->advantages, it->n);
		out_array(s, "returns", it->returns, it->n);
		if (whitened)
			out_array(s, "advantages_whitened", whitened, it->n);
		out_append(s, "}", 1);
		rc = ca_ndjson_write_raw(s->out, s->outlen);
	} else {
		jv r = it->record;
		if (it->ok) {
			r = jv_object_set(r, jv_string("advantages"), jv_doubles(it->advantages, it->n));
			r = jv_object_set(r, jv_string("returns"), jv_doubles(it->returns, it->n));
			if (whitened)
				r = jv_object_set(r, jv_string("advantages_whitened"), jv_doubles(whitened, it->n));
		}
		rc = ca_ndjson_write_spliced(r, it->parsed, it->text, it->textlen);
		jv_free(it->parsed);
		free(it->text);
	}
	free(it->advantages);
	free(it->returns);
	free(it->mask);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"gamma", required_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'},
		{"jv", no_argument, NULL, 'j'},
		{"lambda", required_argument, NULL, 'l'},
		{"progress", no_argument, NULL, 'P'},
		{"unbuffered", no_argument, NULL, 'u'},
		{"whiten", no_argument, NULL, 'w'},
		{NULL, 0, NULL, 0},
	};
	struct config cfg = {.gamma = 1.0, .lambda = 0.95};
	int c;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hu", longopts, NULL)) != -1) {
		switch (c) {
		case 'g': cfg.gamma = ca_opt_double("--gamma", optarg, 0, 1); break;
		case 'j': cfg.jv_only = 1; break;
		case 'l': cfg.lambda = ca_opt_double("--lambda", optarg, 0, 1); break;
		case 'w': cfg.whiten = 1; break;
		default: ca_opt_common(c, usage_text);
		}
	}

	struct ca_ndjson_reader *r = ca_ndjson_open(argc - optind, argv + optind);
	struct scratch s = {0};
	struct item *items = NULL;
	size_t nitems = 0, items_cap = 0;
	int status = CA_EXIT_OK;
	const char *text;
	size_t len;
	int kind;
	while ((kind = ca_ndjson_next_text(r, &text, &len)) != CA_NDJSON_EOF) {
		struct item it = {.record = jv_invalid(), .parsed = jv_invalid()};
		if (kind == CA_NDJSON_BAD) {  /* a line too long to keep: text is the reason */
			ca_ndjson_warn(r, "%s", text);
			it.record = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), text);
			status = ca_err_worst(status, CA_EXIT_DATA);
		} else if (cfg.jv_only || !try_fast(&cfg, &s, text, len, &it)) {
			jv record;
			if (ca_ndjson_parse(text, len, &record) == CA_NDJSON_BAD) {
				ca_ndjson_warn(r, "%s", jv_string_value(record));
				it.record = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(record));
				jv_free(record);
				status = ca_err_worst(status, CA_EXIT_DATA);
			} else {
				it.parsed = jv_copy(record);
				it.text = memcpy(ca_xmalloc(len + 1), text, len);
				it.textlen = len;
				status = ca_err_worst(status, jv_path(&cfg, &s, record, &it));
			}
		}
		ca_ndjson_progress_tick();
		if (!cfg.whiten) {
			if (emit(&s, &it, NULL) != 0)
				goto write_error;
			continue;
		}
		if (it.prefix)  /* the line buffer is reused: keep a copy */
			it.prefix = memcpy(ca_xmalloc(it.prefixlen), it.prefix, it.prefixlen);
		if (nitems == items_cap)
			items = ca_xrealloc(items, (items_cap = items_cap ? 2 * items_cap : 64) * sizeof *items);
		items[nitems++] = it;
	}
	if (cfg.whiten) {
		struct ca_rl_moments m = {0};
		size_t computed = 0;
		for (size_t i = 0; i < nitems; i++) {
			if (items[i].ok) {
				ca_rl_moments_add(&m, items[i].n, items[i].advantages, items[i].mask);
				computed++;
			}
		}
		for (size_t i = 0; i < nitems; i++)
			if (items[i].ok)
				ca_rl_moments_add_centered(&m, items[i].n, items[i].advantages, items[i].mask);
		double mean = ca_rl_moments_mean(&m), var = 0;
		int whiten = ca_rl_moments_var(&m, &var) == 0;
		if (!whiten && computed > 0) {
			ca_err_warn("--whiten: %zu policy token%s in the input; whitening needs at least 2", m.count,
				m.count == 1 ? "" : "s");
			status = ca_err_worst(status, CA_EXIT_DATA);
		}
		double *whitened = NULL;
		size_t whitened_cap = 0;
		for (size_t i = 0; i < nitems; i++) {
			struct item *it = &items[i];
			if (it->ok && whiten) {
				grow_doubles(&whitened, &whitened_cap, it->n + 1);
				ca_rl_whiten(it->n, it->advantages, it->mask, mean, var, whitened);
			}
			int rc = emit(&s, it, it->ok && whiten ? whitened : NULL);
			free(it->prefix);
			if (rc != 0)
				goto write_error;
		}
		free(whitened);
		free(items);
	}
	ca_ndjson_progress_done();
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	free(s.values);
	free(s.rewards);
	free(s.mask_numbers);
	free(s.out);
	return ca_err_finish(status);

write_error:
	ca_err_warn_sys("write error on stdout");
	return CA_EXIT_SYSTEM;
}
