/*
 * ca-reward: add the paper's discrete reward to verified, profiled records.
 *
 * -1 incorrect; 1 correct; 2 faster than eager by more than the threshold;
 * 3 faster than both eager and torch.compile by more than the threshold.
 * "Faster than t0 by more than thr" is (t0 - t) / t0 > thr, strictly.
 * Only a candidate that passed both verify and profile (ok true in each)
 * is rewarded for speed; one caught by either gets -1 with the stage as
 * reason; where the evaluator itself failed (ok null) the value is null,
 * so training drops the sample instead of learning a false -1.
 * Only verify and profile are parsed; the rest of each line is passed
 * through as text (ca_ndjson_map_field).
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

static const char usage_text[] =
	"usage: ca-reward [-hu] [--continuous] [--progress] [--threshold X] [file ...]\n";

struct config {
	double threshold;
	int continuous;
};

static jv reward_error(const char *message, int *status)
{
	jv r = jv_object();
	r = jv_object_set(r, jv_string("value"), jv_null());
	r = jv_object_set(r, jv_string("error"), jv_string(message));
	ca_ndjson_record_warn("%s", message);
	*status = CA_EXIT_DATA;
	return r;
}

static int faster(double t0, double t, double threshold)
{
	return (t0 - t) / t0 > threshold;
}

/*
 * Where the evaluator stopped, from a verify or profile object (borrowed):
 * "verify: compare", "profile: timing"; "verify" alone without a stage.
 */
static jv reason_of(const char *what, jv result)
{
	char *stage = ca_json_strdup(result, "stage");
	jv reason = stage ? jv_string_fmt("%s: %s", what, stage) : jv_string(what);
	free(stage);
	return reason;
}

/* A reward without speed: -1 (value) for a candidate caught, null for an evaluator fault. */
static jv no_speed(jv value, jv reason, int evaluator_fault)
{
	jv r = jv_object_set(jv_object(), jv_string("value"), value);
	r = jv_object_set(r, jv_string("speedup_eager"), jv_null());
	r = jv_object_set(r, jv_string("speedup_compile"), jv_null());
	r = jv_object_set(r, jv_string("reason"), reason);
	if (evaluator_fault)
		r = jv_object_set(r, jv_string("evaluator_fault"), jv_true());
	return r;
}

/*
 * The verdict of one evaluator object (borrowed): 1 passed, 0 caught, 2
 * its evaluator failed (ok null); -1 with *why set when ok is unusable.
 */
static int verdict(jv result, const char *what, const char **why)
{
	static char message[64];
	jv ok = ca_json_get(result, "ok");
	jv_kind kind = jv_get_kind(ok);
	jv_free(ok);
	if (kind == JV_KIND_TRUE || kind == JV_KIND_FALSE)
		return kind == JV_KIND_TRUE;
	if (kind == JV_KIND_NULL)
		return 2;
	snprintf(message, sizeof message, "%s.ok is missing or not a boolean", what);
	*why = message;
	return -1;
}

/* The speed reward of a candidate both verified and profiled (profile borrowed). */
static jv speed_reward(jv profile, const struct config *cfg, int *status)
{
	double eager, compiled, candidate;
	const char *missing = NULL;
	if (ca_json_number(profile, "eager_us", &eager) != 1 || !(eager > 0))
		missing = "profile.eager_us is missing or not a positive number";
	else if (ca_json_number(profile, "compile_us", &compiled) != 1 || !(compiled > 0))
		missing = "profile.compile_us is missing or not a positive number";
	else if (ca_json_number(profile, "candidate_us", &candidate) != 1 || !(candidate > 0))
		missing = "profile.candidate_us is missing or not a positive number";
	if (missing)
		return reward_error(missing, status);
	double value;
	if (cfg->continuous)
		value = compiled / candidate;
	else if (faster(eager, candidate, cfg->threshold) && faster(compiled, candidate, cfg->threshold))
		value = 3;
	else if (faster(eager, candidate, cfg->threshold))
		value = 2;
	else
		value = 1;
	jv r = jv_object_set(jv_object(), jv_string("value"), jv_number(value));
	r = jv_object_set(r, jv_string("speedup_eager"), jv_number(eager / candidate));
	return jv_object_set(r, jv_string("speedup_compile"), jv_number(compiled / candidate));
}

/*
 * The reward when one evaluator object (borrowed) settles it: the
 * candidate caught (-1), its evaluator failed (null), the object absent
 * (absent says so) or unusable; jv_invalid() when the candidate passed.
 */
static jv stage_reward(jv result, const char *what, const char *absent, int *status)
{
	const char *why = NULL;
	if (jv_get_kind(result) != JV_KIND_OBJECT)
		return reward_error(absent, status);
	switch (verdict(result, what, &why)) {
	case 1: return jv_invalid();
	case 0: return no_speed(jv_number(-1), reason_of(what, result), 0);
	case 2: return no_speed(jv_null(), reason_of(what, result), 1);
	default: return reward_error(why, status);
	}
}

/*
 * The reward object of a record (borrowed). The reward follows the
 * evaluator's whole verdict: a candidate caught by verify or by profile
 * gets -1, and no time is read from a profile that did not pass.
 */
static jv reward_of(jv record, void *ctx, int *status)
{
	const struct config *cfg = ctx;
	jv verify = ca_json_get(record, "verify"), profile = ca_json_get(record, "profile");
	jv r = stage_reward(verify, "verify", "no verify object in record", status);
	if (!jv_is_valid(r))
		r = stage_reward(profile, "profile", "correct candidate without a profile object", status);
	if (!jv_is_valid(r))
		r = speed_reward(profile, cfg, status);
	jv_free(verify);
	jv_free(profile);
	if (cfg->continuous)
		r = jv_object_set(r, jv_string("continuous"), jv_true());
	else
		r = jv_object_set(r, jv_string("threshold"), jv_number(cfg->threshold));
	return r;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"continuous", no_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{"progress", no_argument, NULL, 'P'},
		{"threshold", required_argument, NULL, 't'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	struct config cfg = {.threshold = 0.05};
	int c;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hu", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': cfg.continuous = 1; break;
		case 't': cfg.threshold = ca_opt_double("--threshold", optarg, 0, 1e9); break;
		default: ca_opt_common(c, usage_text);
		}
	}
	static const char *const reads[] = {"verify", "profile"};
	return ca_ndjson_map_field(argc - optind, argv + optind, reads, 2, "reward", reward_of, &cfg);
}
