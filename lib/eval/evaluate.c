/*
 * evaluate: the face of the engine behind ca-verify and ca-profile (see
 * evaluate.h): its defaults and options, what the operands ask for, the
 * kernel-name policy; and one record through a slot (evaluate_record),
 * its result's verdict and exit status, the -H and -v lines. The pieces
 * are listed in evaluate_impl.h.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compare.h"
#include "err.h"
#include "evaluate_impl.h"
#include "json.h"
#include "opt.h"
#include "proc.h"

void ca_eval_defaults(struct ca_eval_config *cfg, enum ca_eval_mode mode)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->mode = mode;
	cfg->device = "cuda";
	cfg->checks = 5;
	cfg->robust = 3;
	ca_compare_defaults(&cfg->tol);
	cfg->sandbox = 1;
	cfg->timeout_s = 60;
	cfg->load_timeout_s = 300;
	cfg->fsize_mb = 32768;  /* full-size KernelBench outputs reach 7 GB; lib/compare caps what it reads */
	cfg->warmup = 5;
	cfg->iters = 30;
	cfg->sets = 3;
	cfg->keep = 3;
	cfg->top = 5;
}

/* "0,1,3" into cfg->gpus. */
static void parse_gpus(struct ca_eval_config *cfg, const char *text)
{
	char *copy = ca_xstrdup(text), *save = NULL;
	cfg->ngpus = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		cfg->gpus = ca_xrealloc(cfg->gpus, (size_t)(cfg->ngpus + 1) * sizeof *cfg->gpus);
		cfg->gpus[cfg->ngpus++] = (int)ca_opt_long("--gpus", tok, 0, 1023);
	}
	free(copy);
	if (cfg->ngpus == 0) {
		ca_err_warn("--gpus: empty list");
		ca_opt_bad_usage();
	}
}

static const char *parse_device(const char *text)
{
	if (strcmp(text, "cuda") && strcmp(text, "cpu")) {
		ca_err_warn("--device: expected cuda or cpu");
		ca_opt_bad_usage();
	}
	return text;
}

/* A uid, kept as text for ca-sandbox --user. */
static const char *parse_uid(const char *text)
{
	ca_opt_long("--sandbox-user", text, 0, 4294967294LL);
	return text;
}

static void parse_seed(struct ca_eval_config *cfg, const char *text)
{
	cfg->seed = (unsigned long long)ca_opt_long("--seed", text, 0, (1LL << 48) - 1);
	cfg->seed_set = 1;
}

int ca_eval_option(struct ca_eval_config *cfg, const char *name, const char *value)
{
	if (!strcmp(name, "allow-torch"))
		cfg->allow_torch = 1;
	else if (!strcmp(name, "arch"))
		cfg->arch = value;
	else if (!strcmp(name, "atol"))
		cfg->tol.atol = ca_opt_double("--atol", value, 0, 1e9);
	else if (!strcmp(name, "build-cache"))
		cfg->build_cache = value;
	else if (!strcmp(name, "checks"))
		cfg->checks = (int)ca_opt_long("--checks", value, 1, 1000);
	else if (!strcmp(name, "compile-mode"))
		cfg->compile_mode = value;
	else if (!strcmp(name, "device"))
		cfg->device = parse_device(value);
	else if (!strcmp(name, "gpus"))
		parse_gpus(cfg, value);
	else if (!strcmp(name, "iters"))
		cfg->iters = (int)ca_opt_long("--iters", value, 1, 100000);
	else if (!strcmp(name, "keep"))
		cfg->keep = (int)ca_opt_long("--keep", value, 0, 1000);
	else if (!strcmp(name, "no-cache"))
		cfg->no_cache = 1;
	else if (!strcmp(name, "no-compile"))
		cfg->no_compile = 1;
	else if (!strcmp(name, "no-sandbox"))
		cfg->sandbox = 0;
	else if (!strcmp(name, "robust"))
		cfg->robust = (int)ca_opt_long("--robust", value, 0, 1000);
	else if (!strcmp(name, "rtol"))
		cfg->tol.rtol = ca_opt_double("--rtol", value, 0, 1e9);
	else if (!strcmp(name, "sandbox-user"))
		cfg->sandbox_user = parse_uid(value);
	else if (!strcmp(name, "seed"))
		parse_seed(cfg, value);
	else if (!strcmp(name, "serve"))
		cfg->serve = value;
	else if (!strcmp(name, "sets"))
		cfg->sets = (int)ca_opt_long("--sets", value, 1, 100);
	else if (!strcmp(name, "shapes"))
		cfg->shapes = (int)ca_opt_long("--shapes", value, 0, 2);
	else if (!strcmp(name, "timeout"))
		cfg->timeout_s = ca_opt_double("--timeout", value, 0.1, 86400);
	else if (!strcmp(name, "top"))
		cfg->top = (int)ca_opt_long("--top", value, 0, 1000);
	else if (!strcmp(name, "unordered"))
		cfg->unordered = 1;
	else if (!strcmp(name, "verify"))
		cfg->also_verify = 1;
	else if (!strcmp(name, "warmup"))
		cfg->warmup = (int)ca_opt_long("--warmup", value, 0, 100000);
	else
		return -1;
	return 0;
}

void ca_eval_options(struct ca_eval_config *cfg, int argc, char **argv, const struct option *longopts,
	const char *usage)
{
	int c, index = 0;
	while ((c = getopt_long(argc, argv, "Hhuv", longopts, &index)) != -1) {
		switch (c) {
		case 'H': cfg->human = 1; break;
		case 'v': cfg->verbose = 1; break;
		case 'h': case 'u': case '?': ca_opt_common(c, usage); break;
		default: ca_eval_option(cfg, longopts[index].name, optarg);
		}
	}
}

int ca_eval_run(struct ca_eval_config *cfg, int nargs, char **args, const char *usage)
{
	struct stat st;
	int status;
	if (cfg->serve) {
		if (nargs > 0) {
			ca_err_warn("--serve takes no files: records come from the commands that connect");
			ca_opt_bad_usage();
		}
		const char *idle = getenv("CA_EVAL_SERVE_IDLE");
		status = ca_eval_serve(cfg, cfg->serve, idle && *idle ? atof(idle) : 1800);
	} else if (nargs >= 1 && stat(args[0], &st) == 0 && S_ISDIR(st.st_mode)) {
		if (nargs > 1) {
			ca_err_warn("a workspace directory must be the only argument");
			fputs(usage, stderr);
			ca_opt_bad_usage();
		}
		status = ca_err_finish(ca_eval_directory(cfg, args[0]));
	} else {
		status = ca_eval_stream(cfg, nargs, args);
	}
	free(cfg->gpus);
	cfg->gpus = NULL;
	return status;
}

static const char *const forbidden_marks[] = {
	"at::native", "at6native", "at_cuda_detail", "cunn_", "softmax_warp", "triton_", NULL,
};
static const char *const allowed_marks[] = {
	"FillFunctor", "fill_kernel", "copy_kernel", "CopyKernel", "direct_copy",
	"copy_device_to_device", NULL,
};

int ca_eval_kernel_forbidden(const char *name)
{
	int hit = 0;
	for (int i = 0; forbidden_marks[i]; i++)
		if (strstr(name, forbidden_marks[i]))
			hit = 1;
	if (!hit)
		return 0;
	for (int i = 0; allowed_marks[i]; i++)
		if (strstr(name, allowed_marks[i]))
			return 0;
	return 1;
}

/*
 * The stages where the evaluator itself failed, before or beside the
 * candidate's code: the reference (its worker, the task's code, torch),
 * the system (files, processes), the sandbox, a worker's start (the
 * interpreter, torch and CUDA, before any candidate code is imported),
 * no GPU. Such a record says nothing of the candidate: ok is null, the
 * reward null, and the exit status 4 (ca-records(5)).
 */
static int evaluator_stage(const char *stage)
{
	static const char *const stages[] = {"reference", "system", "sandbox", "start", "gpu", NULL};
	for (int i = 0; stage && stages[i]; i++)
		if (!strcmp(stage, stages[i]))
			return 1;
	return 0;
}

/* A result (consumed) finished: "ok" first, the exit status worsened by a failure. */
static jv finish_result(jv result, int *status)
{
	int ok = ca_json_bool(result, "ok");
	int fault = 0;
	if (ok != 1) {
		char *stage = ca_json_strdup(result, "stage");
		fault = evaluator_stage(stage);
		if (stage && !strcmp(stage, "input"))
			*status = ca_err_worst(*status, CA_EXIT_DATA);
		else if (fault)
			*status = ca_err_worst(*status, CA_EXIT_SYSTEM);
		else
			*status = ca_err_worst(*status, CA_EXIT_NEGATIVE);
		free(stage);
	}
	if (fault)
		result = jv_object_set(result, jv_string("evaluator_fault"), jv_true());
	/* Put "ok" first for people reading the records: true, false, or null for an evaluator fault. */
	jv ordered = jv_object_set(jv_object(), jv_string("ok"), fault ? jv_null() : jv_bool(ok == 1));
	jv_object_foreach(result, key, value) {
		if (strcmp(jv_string_value(key), "ok"))
			ordered = jv_object_set(ordered, key, value);
		else {
			jv_free(key);
			jv_free(value);
		}
	}
	jv_free(result);
	return ordered;
}

/* The profile of a record not timed: verify failed, or (fault) the evaluator failed in it. */
static jv not_profiled(int fault)
{
	jv r = jv_object_set(jv_object(), jv_string("ok"), fault ? jv_null() : jv_false());
	r = jv_object_set(r, jv_string("skipped"), jv_true());
	if (fault)
		r = jv_object_set(r, jv_string("evaluator_fault"), jv_true());
	return set_str(r, "error", fault ? "not profiled: the evaluator failed in verify (verify.ok is null)"
		: "not profiled: verify.ok is not true");
}

/* -v: the record's phases on stderr, one line. */
void print_phases(jv record, jv phases, double seconds)
{
	char *id = ca_json_strdup(record, "id");
	char line[1024];
	size_t used = 0;
	line[0] = '\0';
	jv_object_foreach(phases, key, value) {
		if (used < sizeof line)
			used += (size_t)snprintf(line + used, sizeof line - used, " %s %.3f", jv_string_value(key), jv_number_value(value));
		jv_free(key);
		jv_free(value);
	}
	ca_err_warn("%s: %.3f s:%s", id ? id : "-", seconds, line);
	free(id);
}

/*
 * Why no GPU can run a record here, from the driver's traces alone (no
 * CUDA context: starting one to find out took seconds per record); NULL
 * when one may. why holds the message.
 */
const char *gpu_missing(char *why, size_t size)
{
	static const char *const traces[] = {"/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", NULL};
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	if (visible && (!*visible || !strcmp(visible, "-1"))) {
		snprintf(why, size, "no GPU is visible (CUDA_VISIBLE_DEVICES=\"%s\"); the record needs one "
			"(--device cpu for CPU-only candidates)", visible);
		return why;
	}
	for (int i = 0; traces[i]; i++)
		if (access(traces[i], F_OK) == 0)
			return NULL;
	snprintf(why, size, "no GPU here (no GPU driver: neither /proc/driver/nvidia nor /dev/nvidiactl); the record "
		"needs one: run it on a GPU machine, or --device cpu for CPU-only candidates");
	return why;
}

/* A record without a GPU (record consumed): an evaluator fault at once, no worker started. */
static jv no_gpu_record(const struct ca_eval_config *cfg, jv record, int *status)
{
	jv r = set_str(set_str(jv_object(), "stage", "gpu"), "error", cfg->no_gpu_why);
	r = jv_object_set(r, jv_string("ok"), jv_false());
	if (cfg->mode == CA_EVAL_VERIFY || cfg->also_verify)
		record = jv_object_set(record, jv_string("verify"), finish_result(jv_copy(r), status));
	if (cfg->mode == CA_EVAL_PROFILE)
		record = jv_object_set(record, jv_string("profile"), cfg->also_verify ? not_profiled(1) : finish_result(jv_copy(r), status));
	jv_free(r);
	return record;
}

jv evaluate_record(struct slot *s, jv record, int *status)
{
	const struct ca_eval_config *cfg = s->cfg;
	const char *field = cfg->mode == CA_EVAL_VERIFY ? "verify" : "profile";
	struct job j;
	memset(&j, 0, sizeof j);
	j.slot = s;
	char *id = ca_json_strdup(record, "id");
	snprintf(j.id, sizeof j.id, "%s", id ? id : "-");
	free(id);
	j.result = jv_object();
	j.cand.run.hello = jv_invalid();
	j.started = ca_proc_now();
	j.mark = j.started;
	j.phases = jv_object();
	j.ship_digests = jv_array();
	j.sizes = jv_invalid();
	j.ref_state = jv_invalid();
	if (cfg->mode == CA_EVAL_PROFILE && !cfg->also_verify) {
		jv verify = ca_json_get(record, "verify");
		int vok = jv_get_kind(verify) == JV_KIND_OBJECT ? ca_json_bool(verify, "ok") : -2;
		jv vnull = jv_get_kind(verify) == JV_KIND_OBJECT ? ca_json_get(verify, "ok") : jv_invalid();
		int fault = jv_get_kind(vnull) == JV_KIND_NULL;
		jv_free(vnull);
		jv_free(verify);
		if (vok == 0 || vok == -1) {
			jv_free(j.result);
			jv_free(j.phases);
			if (fault)
				*status = ca_err_worst(*status, CA_EXIT_SYSTEM);
			return jv_object_set(record, jv_string(field), not_profiled(fault));
		}
	}
	if (cfg->no_gpu_why) {
		jv_free(j.result);
		jv_free(j.phases);
		jv_free(j.ship_digests);
		return no_gpu_record(cfg, record, status);
	}
	jv verified = jv_invalid();  /* --verify: the verify object, made by this same run */
	if (job_prepare(&j, record) == 0) {
		if (cfg->mode == CA_EVAL_VERIFY) {
			do_verify(&j);
		} else if (cfg->also_verify) {
			/* Verify, then profile with the same workers and the same loaded candidate. */
			jv base = jv_copy(j.result);
			do_verify(&j);
			verified = j.result;
			j.result = base;
			if (ca_json_bool(verified, "ok") == 1)
				do_profile(&j);
		} else {
			do_profile(&j);
		}
	} else if (cfg->also_verify) {
		verified = j.result;
		j.result = jv_object();
	}
	if (j.ext_key[0]) {
		worker_stop(&j.cand, 0);
		ext_save(&j);
	}
	if (j.cand.dir[0] || j.cand.run.running)
		candidate_release(s, &j.cand);
	free(j.seeds);
	jv_free(j.ship_digests);
	jv_free(j.sizes);
	jv_free(j.ref_state);
	job_phase(&j, "release");
	double seconds = ca_proc_now() - j.started;
	if (cfg->verbose)
		print_phases(record, j.phases, seconds);
	if (jv_is_valid(verified)) {
		int vok = ca_json_bool(verified, "ok") == 1;
		verified = set_num(verified, "seconds", seconds);
		verified = jv_object_set(verified, jv_string("phases"), jv_copy(j.phases));
		verified = finish_result(verified, status);
		int fault = ca_json_bool(verified, "evaluator_fault") == 1;
		record = jv_object_set(record, jv_string("verify"), verified);
		if (!vok) {
			jv_free(j.result);
			jv_free(j.phases);
			return jv_object_set(record, jv_string(field), not_profiled(fault));
		}
	}
	j.result = set_num(j.result, "seconds", seconds);
	j.result = jv_object_set(j.result, jv_string("phases"), j.phases);
	return jv_object_set(record, jv_string(field), finish_result(j.result, status));
}

/* A one-line summary for -H. */
void print_human(const struct ca_eval_config *cfg, jv record)
{
	if (cfg->also_verify && cfg->mode == CA_EVAL_PROFILE) {
		/* --verify: the verify line first (a failure says why), then the profile's unless skipped. */
		struct ca_eval_config v = *cfg;
		v.mode = CA_EVAL_VERIFY;
		v.also_verify = 0;
		print_human(&v, record);
		jv p = ca_json_get(record, "profile");
		int skipped = jv_get_kind(p) == JV_KIND_OBJECT && ca_json_bool(p, "skipped") == 1;
		jv_free(p);
		if (skipped)
			return;
	}
	const char *field = cfg->mode == CA_EVAL_VERIFY ? "verify" : "profile";
	jv r = ca_json_get(record, field);
	char *id = ca_json_strdup(record, "id");
	if (jv_get_kind(r) != JV_KIND_OBJECT) {
		jv err = ca_json_get(record, "error");
		jv msg = jv_get_kind(err) == JV_KIND_OBJECT ? ca_json_get(err, "message") : jv_invalid();
		printf("%s: malformed record: %s\n", id ? id : "-", jv_get_kind(msg) == JV_KIND_STRING ? jv_string_value(msg) : "?");
		jv_free(msg);
		jv_free(err);
		jv_free(r);
		free(id);
		return;
	}
	int ok = ca_json_bool(r, "ok") == 1;
	char *stage = ca_json_strdup(r, "stage");
	char *error = ca_json_strdup(r, "error");
	double a = 0, b = 0, c = NAN, d = 0, e = 0;
	printf("%s: ", id ? id : "-");
	if (!ok) {
		printf("%s (%s): %s\n", ca_json_bool(r, "evaluator_fault") == 1 ? "EVALUATOR FAULT" : "FAIL",
			stage ? stage : "?", error ? error : "");
	} else if (cfg->mode == CA_EVAL_VERIFY) {
		double robust = 0;
		ca_json_number(r, "checks_passed", &a);
		ca_json_number(r, "max_abs_err", &b);
		ca_json_number(r, "max_rel_err", &d);
		ca_json_number(r, "seconds", &e);
		jv rb = ca_json_get(r, "robust");
		if (jv_get_kind(rb) == JV_KIND_OBJECT)
			ca_json_number(rb, "checks", &robust);
		jv_free(rb);
		printf("PASS %g/%g checks + %g robustness, max abs err %.3g, max rel err %.3g (%.1f s)\n", a, a, robust, b, d, e);
	} else {
		ca_json_number(r, "eager_us", &a);
		ca_json_number(r, "candidate_us", &b);
		ca_json_number(r, "compile_us", &c);
		ca_json_number(r, "cv", &d);
		printf("candidate %.1f us, eager %.1f us (%.2fx)", b, a, b > 0 ? a / b : 0);
		if (isfinite(c))
			printf(", compile %.1f us (%.2fx)", c, b > 0 ? c / b : 0);
		printf(", cv %.1f%%\n", 100 * d);
		jv ks = ca_json_get(r, "kernels");
		for (int i = 0; jv_get_kind(ks) == JV_KIND_ARRAY && i < jv_array_length(jv_copy(ks)); i++) {
			jv k = jv_array_get(jv_copy(ks), i);
			char *name = ca_json_strdup(k, "name");
			double us = 0, calls = 0;
			ca_json_number(k, "total_us", &us);
			ca_json_number(k, "calls", &calls);
			printf("  %10.1f us %6g calls  %.100s\n", us, calls, name ? name : "?");
			free(name);
			jv_free(k);
		}
		jv_free(ks);
	}
	free(stage);
	free(error);
	free(id);
	jv_free(r);
}
