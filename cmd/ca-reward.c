/*
 * ca-reward: add the paper's discrete reward to verified, profiled records.
 *
 * -1 incorrect; 1 correct; 2 faster than eager by more than the threshold;
 * 3 faster than both eager and torch.compile by more than the threshold.
 * "Faster than t0 by more than thr" is (t0 - t) / t0 > thr, strictly.
 * Only verify and profile are parsed; the rest of each line is passed
 * through as text (ca_ndjson_map_field).
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* The reward object of a record (borrowed). */
static jv reward_of(jv record, void *ctx, int *status)
{
	const struct config *cfg = ctx;
	jv verify = ca_json_get(record, "verify");
	if (jv_get_kind(verify) != JV_KIND_OBJECT) {
		jv_free(verify);
		return reward_error("no verify object in record", status);
	}
	int ok = ca_json_bool(verify, "ok");
	jv_free(verify);
	if (ok < 0)
		return reward_error("verify.ok is missing or not a boolean", status);

	jv r = jv_object();
	if (!ok) {
		r = jv_object_set(r, jv_string("value"), jv_number(-1));
		r = jv_object_set(r, jv_string("speedup_eager"), jv_null());
		r = jv_object_set(r, jv_string("speedup_compile"), jv_null());
	} else {
		jv profile = ca_json_get(record, "profile");
		double eager, compiled, candidate;
		const char *missing = NULL;
		if (jv_get_kind(profile) != JV_KIND_OBJECT)
			missing = "correct candidate without a profile object";
		else if (ca_json_number(profile, "eager_us", &eager) != 1 || !(eager > 0))
			missing = "profile.eager_us is missing or not a positive number";
		else if (ca_json_number(profile, "compile_us", &compiled) != 1 || !(compiled > 0))
			missing = "profile.compile_us is missing or not a positive number";
		else if (ca_json_number(profile, "candidate_us", &candidate) != 1 || !(candidate > 0))
			missing = "profile.candidate_us is missing or not a positive number";
		jv_free(profile);
		if (missing) {
			jv_free(r);
			return reward_error(missing, status);
		}
		double value;
		if (cfg->continuous)
			value = compiled / candidate;
		else if (faster(eager, candidate, cfg->threshold) && faster(compiled, candidate, cfg->threshold))
			value = 3;
		else if (faster(eager, candidate, cfg->threshold))
			value = 2;
		else
			value = 1;
		r = jv_object_set(r, jv_string("value"), jv_number(value));
		r = jv_object_set(r, jv_string("speedup_eager"), jv_number(eager / candidate));
		r = jv_object_set(r, jv_string("speedup_compile"), jv_number(compiled / candidate));
	}
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
		case 'h': fputs(usage_text, stdout); return ca_err_finish(CA_EXIT_OK);
		case 'P': ca_ndjson_set_progress(1); break;
		case 't': cfg.threshold = ca_opt_double("--threshold", optarg, -1e9, 1e9); break;
		case 'u': ca_ndjson_set_unbuffered(1); break;
		default: fputs(usage_text, stderr); ca_opt_bad_usage();
		}
	}
	static const char *const reads[] = {"verify", "profile"};
	return ca_ndjson_map_field(argc - optind, argv + optind, reads, 2, "reward", reward_of, &cfg);
}
