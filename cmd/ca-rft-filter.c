/*
 * ca-rft-filter: the paper's rejection step before fine-tuning on the
 * agent's own trajectories (RFT): keep a trajectory only when its outcome
 * reward is positive and it shows no degenerate pattern.
 *
 * Degenerate: tool calls or policy outputs that broke the schema; the same
 * failing tool call made again and again; a run of turns that only repeat
 * tool calls made before (a loop without progress). Dropped records are
 * counted on stderr; --keep-marked keeps every record and says why in
 * "rft": {"keep": false, "reasons": [...]}.
 *
 * With --tokens DIR each written record also becomes a token record for
 * the training steps (tokens, mask, reward): the conversation rendered as
 * policy-ca-sample shows it to the model (tool schemas in the system
 * message, calls as <tool_call> blocks, results as <tool_response> user
 * turns) in the chat format of DIR's tokenizer, with mask 1 on what the
 * assistant wrote.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "tokenizer.h"
#include "tools.h"

static const char usage_text[] =
	"usage: ca-rft-filter [-hu] [--keep-marked] [--max-invalid N] [--max-loop N] [--max-repeats N]\n"
	"                     [--min-reward X] [--progress] [--require-done] [--tokens DIR] [file ...]\n";

struct config {
	double min_reward;
	long long max_invalid, max_loop, max_repeats;
	int keep_marked, require_done;
	struct ca_tokenizer *tokenizer;   /* --tokens: NULL without */
	long total, kept;                 /* trajectories read, kept */
};

static jv get(jv obj, const char *key)
{
	jv v = ca_json_get(obj, key);
	if (!jv_is_valid(v)) {
		jv_free(v);
		return jv_null();
	}
	return v;
}

static double number_at(jv obj, const char *path, double fallback)
{
	jv v = ca_json_path(obj, path);
	double x = jv_get_kind(v) == JV_KIND_NUMBER ? jv_number_value(v) : fallback;
	jv_free(v);
	return x;
}

/* "name arguments" of a normalised tool call (borrowed), as a jv string. */
static jv call_key(jv call)
{
	jv fn = get(call, "function");
	jv name = get(fn, "name"), args = get(fn, "arguments");
	jv key = jv_string_fmt("%s %s", jv_get_kind(name) == JV_KIND_STRING ? jv_string_value(name) : "?",
		jv_get_kind(args) == JV_KIND_STRING ? jv_string_value(args) : "");
	jv_free(fn);
	jv_free(name);
	jv_free(args);
	return key;
}

static jv shorten(jv s)
{
	if (jv_string_length_bytes(jv_copy(s)) <= 100)
		return s;
	jv r = jv_string_fmt("%.97s...", jv_string_value(s));
	jv_free(s);
	return r;
}

/* Append the reasons for dropping record (borrowed) to reasons. */
static jv judge(const struct config *cfg, jv record, jv reasons)
{
	jv traj = get(record, "trajectory");
	if (jv_get_kind(traj) != JV_KIND_OBJECT) {
		jv_free(traj);
		return jv_array_append(reasons, jv_string("no trajectory"));
	}
	jv reward = ca_json_path(record, "reward.value");
	if (jv_get_kind(reward) != JV_KIND_NUMBER)
		reasons = jv_array_append(reasons, jv_string("no outcome reward"));
	else if (!(jv_number_value(reward) > cfg->min_reward))
		reasons = jv_array_append(reasons, jv_string_fmt("reward %g is not above %g",
			jv_number_value(reward), cfg->min_reward));
	jv_free(reward);

	double invalid = number_at(traj, "invalid_tool_calls", 0) + number_at(traj, "invalid_outputs", 0);
	if (invalid > (double)cfg->max_invalid)
		reasons = jv_array_append(reasons, jv_string_fmt("%.0f invalid tool calls or policy outputs", invalid));

	if (cfg->require_done) {
		jv stop = get(traj, "stop");
		if (jv_get_kind(stop) != JV_KIND_STRING || strcmp(jv_string_value(stop), "done") != 0)
			reasons = jv_array_append(reasons, jv_string_fmt("stopped by %s, not done",
				jv_get_kind(stop) == JV_KIND_STRING ? jv_string_value(stop) : "nothing"));
		jv_free(stop);
	}

	/* Walk the conversation once: calls by id, failing calls by key, loops. */
	jv messages = get(traj, "messages");
	jv by_id = jv_object(), failures = jv_object(), seen = jv_object();
	long run = 0, longest = 0;
	if (jv_get_kind(messages) == JV_KIND_ARRAY) {
		jv_array_foreach(messages, i, m) {
			jv role = get(m, "role");
			const char *r = jv_get_kind(role) == JV_KIND_STRING ? jv_string_value(role) : "";
			if (!strcmp(r, "assistant")) {
				jv calls = get(m, "tool_calls");
				int n = jv_get_kind(calls) == JV_KIND_ARRAY ? jv_array_length(jv_copy(calls)) : 0, all_seen = n > 0;
				for (int k = 0; k < n; k++) {
					jv call = jv_array_get(jv_copy(calls), k);
					jv key = call_key(call), id = get(call, "id");
					if (!jv_object_has(jv_copy(seen), jv_copy(key)))
						all_seen = 0;
					seen = jv_object_set(seen, jv_copy(key), jv_true());
					if (jv_get_kind(id) == JV_KIND_STRING)
						by_id = jv_object_set(by_id, id, key);
					else {
						jv_free(id);
						jv_free(key);
					}
					jv_free(call);
				}
				jv_free(calls);
				if (n > 0) {
					run = all_seen ? run + 1 : 0;
					if (run > longest)
						longest = run;
				}
			} else if (!strcmp(r, "tool") && ca_json_bool(m, "is_error") == 1) {
				jv id = get(m, "tool_call_id");
				jv key = jv_get_kind(id) == JV_KIND_STRING && jv_object_has(jv_copy(by_id), jv_copy(id))
					? jv_object_get(jv_copy(by_id), jv_copy(id)) : jv_null();
				if (jv_get_kind(key) == JV_KIND_STRING) {
					double count = 0;
					if (jv_object_has(jv_copy(failures), jv_copy(key))) {
						jv old = jv_object_get(jv_copy(failures), jv_copy(key));
						count = jv_number_value(old);
						jv_free(old);
					}
					failures = jv_object_set(failures, key, jv_number(count + 1));
				} else {
					jv_free(key);
				}
				jv_free(id);
			}
			jv_free(role);
			jv_free(m);
		}
	}
	double worst = 0;
	jv worst_key = jv_null();
	jv_object_foreach(failures, key, count) {
		if (jv_number_value(count) > worst) {
			worst = jv_number_value(count);
			jv_free(worst_key);
			worst_key = jv_copy(key);
		}
		jv_free(key);
		jv_free(count);
	}
	if (worst >= (double)cfg->max_repeats && jv_get_kind(worst_key) == JV_KIND_STRING) {
		jv what = shorten(jv_copy(worst_key));
		reasons = jv_array_append(reasons, jv_string_fmt("the same failing tool call %.0f times: %s",
			worst, jv_string_value(what)));
		jv_free(what);
	}
	jv_free(worst_key);
	if (longest >= cfg->max_loop)
		reasons = jv_array_append(reasons, jv_string_fmt("%ld turns in a row only repeated earlier tool calls", longest));
	jv_free(messages);
	jv_free(by_id);
	jv_free(failures);
	jv_free(seen);
	jv_free(traj);
	return reasons;
}

/* Append the ids of text[0..len) to tokens and mask (value bit). */
static void append_ids(const struct ca_tokenizer *t, const char *text, size_t len, int bit, jv *tokens, jv *mask)
{
	if (len == 0)
		return;
	int *ids = NULL;
	size_t n = ca_tokenizer_encode(t, text, len, &ids);
	for (size_t i = 0; i < n; i++) {
		*tokens = jv_array_append(*tokens, jv_number(ids[i]));
		*mask = jv_array_append(*mask, jv_number(bit));
	}
	free(ids);
}

/* A chat rendering of messages (borrowed) as a jv string, or invalid with why. */
static jv chat_text(const struct ca_tokenizer *t, jv messages, int generation_prompt, int *stop_id)
{
	char why[CA_TOKENIZER_WHY];
	char *text = ca_tokenizer_chat(t, messages, generation_prompt, stop_id, why);
	if (!text)
		return jv_invalid_with_msg(jv_string(why));
	jv s = jv_string(text);
	free(text);
	return s;
}

/*
 * Set tokens, mask and reward on record (consumed) from its trajectory's
 * messages. Returns the record, or an invalid with a message on failure.
 */
static jv tokenize(const struct ca_tokenizer *t, jv record)
{
	jv traj = get(record, "trajectory");
	jv rendered = ca_chat_render(get(traj, "messages"), ca_tools_schema());
	jv_free(traj);
	int stop_id = -1;
	jv empty = jv_array();
	jv bos = chat_text(t, empty, 0, &stop_id), opened = chat_text(t, empty, 1, &stop_id);
	jv_free(empty);
	if (!jv_is_valid(bos) || !jv_is_valid(opened)) {
		jv_free(rendered);
		jv_free(record);
		if (jv_is_valid(bos)) {
			jv_free(bos);
			return opened;
		}
		jv_free(opened);
		return bos;
	}
	size_t bos_len = (size_t)jv_string_length_bytes(jv_copy(bos));
	const char *head = jv_string_value(opened) + bos_len;
	size_t head_len = strlen(head);
	size_t stop_len = 0;
	char *stop_text = stop_id >= 0 ? ca_tokenizer_decode(t, &stop_id, 1, &stop_len) : NULL;
	jv tokens = jv_array(), mask = jv_array();
	append_ids(t, jv_string_value(bos), bos_len, 0, &tokens, &mask);
	jv failure = jv_null();
	jv_array_foreach(rendered, i, m) {
		jv one = jv_array_append(jv_array(), jv_copy(m));
		int sid;
		jv seg = chat_text(t, one, 0, &sid);
		jv_free(one);
		if (!jv_is_valid(seg)) {
			jv_free(failure);
			failure = jv_invalid_get_msg(seg);
			jv_free(m);
			break;
		}
		const char *text = jv_string_value(seg) + bos_len;
		size_t len = strlen(text);
		jv role = get(m, "role");
		int assistant = !strcmp(jv_string_value(role), "assistant");
		jv_free(role);
		if (assistant && len >= head_len && !strncmp(text, head, head_len)) {
			/* The opening the prompt ends with, what the model wrote up
			 * to its end token, and what follows that token. */
			const char *body = text + head_len, *end = body + strlen(body);
			if (stop_text && stop_len > 0) {
				for (const char *p = body + strlen(body); p >= body; p--)
					if ((size_t)(end - p) >= stop_len && !strncmp(p, stop_text, stop_len)) {
						end = p + stop_len;
						break;
					}
			}
			append_ids(t, text, head_len, 0, &tokens, &mask);
			append_ids(t, body, (size_t)(end - body), 1, &tokens, &mask);
			append_ids(t, end, strlen(end), 0, &tokens, &mask);
		} else {
			append_ids(t, text, len, 0, &tokens, &mask);
		}
		jv_free(seg);
		jv_free(m);
	}
	free(stop_text);
	jv_free(rendered);
	jv_free(bos);
	jv_free(opened);
	if (jv_get_kind(failure) != JV_KIND_NULL) {
		jv_free(tokens);
		jv_free(mask);
		jv_free(record);
		return jv_invalid_with_msg(failure);
	}
	jv_free(failure);
	jv reward = ca_json_path(record, "reward.value"), fault = ca_json_path(record, "reward.evaluator_fault");
	record = jv_object_set(record, jv_string("tokens"), tokens);
	record = jv_object_set(record, jv_string("mask"), mask);
	/*
	 * A trajectory none of whose candidates was scored counts as a
	 * failure; one the evaluator failed on has no reward (null), so the
	 * training steps leave it out rather than learn a false -1.
	 */
	if (jv_get_kind(reward) != JV_KIND_NUMBER) {
		jv_free(reward);
		reward = jv_get_kind(fault) == JV_KIND_TRUE ? jv_null() : jv_number(-1);
	}
	jv_free(fault);
	return jv_object_set(record, jv_string("reward"), reward);
}

/* The record marked with the verdict (and tokenized with --tokens), or none when it is dropped. */
static jv filter_one(jv record, void *ctx, int *status)
{
	struct config *cfg = ctx;
	cfg->total++;
	jv reasons = judge(cfg, record, jv_array());
	int keep = jv_array_length(jv_copy(reasons)) == 0;
	jv traj = ca_json_get(record, "trajectory");
	if (jv_get_kind(traj) != JV_KIND_OBJECT) {
		ca_ndjson_record_warn("record has no trajectory object");
		*status = CA_EXIT_DATA;
	}
	jv_free(traj);
	jv mark = jv_object_set(jv_object(), jv_string("keep"), jv_bool(keep));
	mark = jv_object_set(mark, jv_string("reasons"), reasons);
	jv out = jv_object_set(record, jv_string("rft"), mark);
	cfg->kept += keep;
	if (!keep && !cfg->keep_marked) {
		jv_free(out);
		return jv_invalid();
	}
	if (!cfg->tokenizer)
		return out;
	jv tokens = tokenize(cfg->tokenizer, jv_copy(out));
	if (jv_is_valid(tokens)) {
		jv_free(out);
		return tokens;
	}
	jv msg = jv_invalid_get_msg(tokens);
	jv why = jv_string_fmt("cannot render the conversation: %s",
		jv_get_kind(msg) == JV_KIND_STRING ? jv_string_value(msg) : "?");
	jv_free(msg);
	out = ca_ndjson_record_error(out, jv_string_value(why));
	jv_free(why);
	*status = CA_EXIT_DATA;
	return out;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"keep-marked", no_argument, NULL, 'k'},
		{"max-invalid", required_argument, NULL, 'i'},
		{"max-loop", required_argument, NULL, 'l'},
		{"max-repeats", required_argument, NULL, 'r'},
		{"min-reward", required_argument, NULL, 'm'},
		{"progress", no_argument, NULL, 'P'},
		{"require-done", no_argument, NULL, 'd'},
		{"tokens", required_argument, NULL, 't'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	struct config cfg = {.min_reward = 0, .max_invalid = 0, .max_loop = 5, .max_repeats = 3};
	int c;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hu", longopts, NULL)) != -1) {
		switch (c) {
		case 'k': cfg.keep_marked = 1; break;
		case 'i': cfg.max_invalid = ca_opt_long("--max-invalid", optarg, 0, 1LL << 40); break;
		case 'l': cfg.max_loop = ca_opt_long("--max-loop", optarg, 1, 1LL << 40); break;
		case 'r': cfg.max_repeats = ca_opt_long("--max-repeats", optarg, 1, 1LL << 40); break;
		case 'm': cfg.min_reward = ca_opt_double("--min-reward", optarg, -1e9, 1e9); break;
		case 'd': cfg.require_done = 1; break;
		case 't': {
			char why[CA_TOKENIZER_WHY];
			if (cfg.tokenizer)
				ca_tokenizer_free(cfg.tokenizer);
			cfg.tokenizer = ca_tokenizer_load(optarg, why);
			if (!cfg.tokenizer) {
				ca_err_warn("--tokens: %s: %s", optarg, why);
				return ca_err_finish(CA_EXIT_SYSTEM);
			}
			break;
		}
		default: ca_opt_common(c, usage_text);
		}
	}
	int status = ca_ndjson_map(argc - optind, argv + optind, filter_one, &cfg);
	ca_err_warn("kept %ld of %ld trajectories%s", cfg.kept, cfg.total, cfg.keep_marked ? " (all written, marked)" : "");
	if (cfg.tokenizer)
		ca_tokenizer_free(cfg.tokenizer);
	return status;
}
