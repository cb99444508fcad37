/*
 * evaluate_verify: ca-verify's checks (do_verify): the reference and the
 * candidate run on the same inputs, drawn by each under one seed (shipped
 * as files where the candidate's draws differ), outputs compared by
 * lib/compare; then the robustness checks (other value distributions)
 * and the checks at other sizes of the task.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compare.h"
#include "evaluate_impl.h"
#include "json.h"
#include "proc.h"

/* A robustness check's inputs: the task's draw under seed moved to dist (ca_runner's robust_inputs). */
struct robust_spec {
	const char *dist;
	int signed_values;       /* a random sign per value; 0: magnitudes with the task's signs */
	unsigned long long seed;
};

/* Where the reference drew the inputs (its reply's "gen", borrowed), into the result. */
void note_drawn_on(struct job *j, jv reply)
{
	jv gen = ca_json_get(reply, "gen");
	if (jv_get_kind(gen) == JV_KIND_STRING)
		j->result = jv_object_set(j->result, jv_string("inputs_drawn_on"), gen);
	else
		jv_free(gen);
}

/* The reference's request for check or set inputs: drawn under seed, outputs to ref_out. */
static jv inputs_request(struct job *j, unsigned long long seed, const char *in, const char *ref_out)
{
	jv req = set_num(set_str(jv_object(), "op", "inputs"), "seed", (double)seed);
	if (j->ship)
		req = set_str(req, "out", in);
	return set_str(req, "ref_out", ref_out);
}

/* Whether a reply's digest (or a digests array's element i) equals want. */
int digest_matches(jv reply, const char *key, int i, jv want)
{
	jv got = ca_json_get(reply, key);
	if (i >= 0) {
		jv e = jv_get_kind(got) == JV_KIND_ARRAY && i < jv_array_length(jv_copy(got)) ? jv_array_get(jv_copy(got), i) : jv_invalid();
		jv_free(got);
		got = e;
	}
	int same = jv_get_kind(got) == JV_KIND_STRING && jv_get_kind(want) == JV_KIND_STRING &&
		!strcmp(jv_string_value(got), jv_string_value(want));
	jv_free(got);
	return same;
}

/* Check k's files: its inputs and the candidate's outputs in the job's io, the reference's in trusted. */
static void check_paths(const struct job *j, int k, char in[PATHLEN], char ref[PATHLEN], char out[PATHLEN])
{
	snprintf(in, PATHLEN, "%s/in-%d.ten", j->io, k);
	snprintf(ref, PATHLEN, "%s/ref-%d.ten", j->slot->trusted, k);
	snprintf(out, PATHLEN, "%s/out-%d.ten", j->io, k);
}

static void check_paths_remove(const struct job *j, int k)
{
	char in[PATHLEN], ref[PATHLEN], out[PATHLEN];
	check_paths(j, k, in, ref, out);
	unlink(in);
	unlink(ref);
	unlink(out);
}

static jv robust_json(const struct robust_spec *r)
{
	jv o = set_str(jv_object(), "dist", r->dist);
	o = jv_object_set(o, jv_string("signed"), jv_bool(r->signed_values));
	return set_num(o, "seed", (double)r->seed);
}

/*
 * One check of verify: the reference draws the inputs under seed and runs
 * on them while the candidate, at the same time, draws the same inputs in
 * its own process and runs on them. When the candidate's digest of its
 * inputs differs from the reference's (a get_inputs() that does not
 * repeat under its seed), the check is done again with the inputs shipped
 * as a file, and so are the checks after it. 0 with the candidate's reply
 * in *reply and *ref_mutated set; -1 when the result already says why not.
 */
static int verify_check(struct job *j, int k, const struct robust_spec *robust, int trace, jv *reply,
		int *ref_mutated, jv *ref_info)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	char in[PATHLEN], ref[PATHLEN], out[PATHLEN];
	unsigned long long seed = robust ? robust->seed : j->seed + 1 + (unsigned)k;
	check_paths(j, k, in, ref, out);
	jv fault, rreply, cfault = jv_invalid();
	*reply = jv_invalid();
	if (ref_info)
		*ref_info = jv_invalid();
	for (;;) {
		jv req = inputs_request(j, seed, in, ref);
		if (robust)
			req = jv_object_set(req, jv_string("robust"), robust_json(robust));
		if (reference_send(j, jv_copy(req), cfg->timeout_s * 4) != 0) {
			jv_free(req);
			return -1;
		}
		double sent = ca_proc_now();
		int cand_sent = 0;
		if (!j->ship) {
			jv creq = set_str(set_num(set_str(jv_object(), "op", "run"), "seed", (double)seed), "out", out);
			creq = jv_object_set(creq, jv_string("trace"), jv_bool(trace));
			if (robust)
				creq = jv_object_set(creq, jv_string("robust"), robust_json(robust));
			j->cand.limit_s = cfg->timeout_s;
			/* A candidate already gone is reported after the reference's reply is in. */
			if (worker_send(&j->cand, creq, &cfault) != 0)
				cand_sent = -1;
			else
				cand_sent = 1;
		}
		/*
		 * The candidate's reply is taken as soon as it comes, before the
		 * reference's, and at its own limit at the latest: taking it stops
		 * its whole tree (worker_recv), so what it leaves running cannot
		 * starve the reference's check of the CPUs (a reference that does
		 * not answer is an evaluator fault, a null where its wrong outputs
		 * earn -1).
		 */
		int early = 0, crc = 0;
		if (cand_sent > 0 && worker_first(&j->cand, &j->slot->reference, sent + cfg->timeout_s) != 1) {
			crc = worker_recv(&j->cand, sent + cfg->timeout_s, reply, &cfault, NULL);
			early = 1;
		}
		jv why;
		int ra = reference_answer(j, cfg->timeout_s * 4, &rreply, &why);
		if (ra > 0)
			ra = reference_again(j, jv_copy(req), cfg->timeout_s * 4, why, &rreply);
		jv_free(req);
		if (ra != 0) {
			jv_free(cfault);
			jv_free(*reply);
			*reply = jv_invalid();
			return -1;
		}
		*ref_mutated = ca_json_bool(rreply, "inputs_mutated") == 1;
		jv want = ca_json_get(rreply, "digest");
		note_drawn_on(j, rreply);
		if (ref_info) {
			jv_free(*ref_info);
			*ref_info = rreply;
		} else {
			jv_free(rreply);
		}
		if (cand_sent < 0) {
			jv_free(want);
			job_fault(j, cfault, NULL);
			return -1;
		}
		if (!cand_sent) {
			chmod(in, 0644);
			jv creq = set_str(set_str(set_str(jv_object(), "op", "run"), "inputs", in), "out", out);
			creq = jv_object_set(creq, jv_string("trace"), jv_bool(trace));
			j->cand.limit_s = cfg->timeout_s;
			if (worker_send(&j->cand, creq, &fault) != 0) {
				jv_free(want);
				job_fault(j, fault, NULL);
				return -1;
			}
			sent = ca_proc_now();
		}
		if (!early)
			crc = worker_recv(&j->cand, sent + cfg->timeout_s, reply, &cfault, NULL);
		if (crc != 0) {
			jv_free(want);
			job_fault(j, cfault, NULL);
			return -1;
		}
		if (ca_json_bool(*reply, "ok") != 1) {
			jv_free(want);
			job_fault(j, *reply, NULL);
			*reply = jv_invalid();
			return -1;
		}
		int same = j->ship || digest_matches(*reply, "digest", -1, want);
		jv_free(want);
		if (same)
			return 0;
		/* The candidate drew other inputs: ship them from now on. */
		jv_free(*reply);
		*reply = jv_invalid();
		j->ship = 1;
		j->result = jv_object_set(j->result, jv_string("inputs_shipped"), jv_true());
	}
}

/* What verify's checks add up to, for the record. */
struct verify_tally {
	double max_abs, max_rel;
	int passed;              /* of the checks (the robustness checks count in "robust") */
	jv kernels, bad_names;   /* the first check's top kernels; the forbidden ones */
	int nbad;
};

/*
 * Judge check k once both ran (the candidate's reply consumed): the
 * inputs left as the reference leaves them, no torch fallback, the
 * outputs within tol. what names the check in a failure's message.
 * 0 when it passed; -1 when the result says why not.
 */
static int judge_check(struct job *j, int k, jv reply, int ref_mutated, const struct ca_compare_options *tol,
		const char *what, struct verify_tally *t)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	if (k == 0) {
		jv kl = ca_json_get(reply, "kernels");
		jv_free(t->kernels);
		t->kernels = top_kernels(kl, cfg->top, &t->nbad, &t->bad_names);
		jv_free(kl);
	}
	int mutated = ca_json_bool(reply, "inputs_mutated") == 1;
	jv_free(reply);
	if (mutated && !ref_mutated) {
		check_paths_remove(j, k);
		job_fail(j, "run", "the candidate modified its inputs in place (the reference does not)");
		return -1;
	}
	if (t->nbad && !cfg->allow_torch) {
		char msg[1024];
		jv first = jv_array_get(jv_copy(t->bad_names), 0);
		snprintf(msg, sizeof msg, "torch fallback refused: %d ATen/torch.compile kernel%s ran, e.g. %.400s",
			t->nbad, t->nbad == 1 ? "" : "s", jv_string_value(first));
		jv_free(first);
		check_paths_remove(j, k);
		job_fail(j, "policy", msg);
		j->result = jv_object_set(j->result, jv_string("forbidden"), jv_copy(t->bad_names));
		return -1;
	}
	char in[PATHLEN], ref[PATHLEN], out[PATHLEN];
	check_paths(j, k, in, ref, out);
	struct ca_compare_result cr;
	int c = ca_compare_files(ref, out, tol, &cr);
	job_phase(j, "compare");
	check_paths_remove(j, k);
	if (cr.max_abs_err > t->max_abs)
		t->max_abs = cr.max_abs_err;
	if (cr.max_rel_err > t->max_rel)
		t->max_rel = cr.max_rel_err;
	if (c < 0) {
		job_fail(j, "reference", cr.message);
		return -1;
	}
	if (c == 0) {
		char msg[1200];
		snprintf(msg, sizeof msg, "%s: %s", what, cr.message);
		job_fail(j, "compare", msg);
		return -1;
	}
	return 0;
}

/*
 * A failure of one of verify's later checks (robustness, shapes) told as
 * that check's: where the result's stage is one of from (NULL-ended),
 * it becomes stage, and the error says which check ran (what; a compare
 * failure's error already begins with it) and what the kernel must do.
 */
static void retell_failure(struct job *j, const char *const *from, const char *stage, const char *what,
		const char *must)
{
	char *was = ca_json_strdup(j->result, "stage");
	for (int i = 0; was && from[i]; i++) {
		if (strcmp(was, from[i]))
			continue;
		char *error = ca_json_strdup(j->result, "error");
		char head[1600];
		if (!strcmp(was, "compare"))
			snprintf(head, sizeof head, "%s", error ? error : "");
		else
			snprintf(head, sizeof head, "%s (%s): %s", what, was, error ? error : "");
		j->result = set_str(j->result, "stage", stage);
		j->result = jv_object_set(j->result, jv_string("error"), jv_string_fmt("%s; %s", head, must));
		free(error);
		break;
	}
	free(was);
}

/* ------------------------------------------------------------------ robustness checks */

/*
 * The robustness checks' value distributions, in the order they are
 * tried (lib/py/ca_runner.py, ROBUST_DISTS, does the moving), with what
 * the agent reads of each when its kernel fails there.
 */
static const struct {
	const char *name, *described;
	int has_sign;   /* a signed form and, after it, one of magnitudes alone */
} robust_dists[] = {
	/* Its magnitudes alone would be the task's own draw for positive inputs. */
	{"signed", "the task's values, each with a random sign (zero mean)", 0},
	{"spikes", "random signs, and one value in 1000 made 50 times the typical magnitude", 1},
	{"ties", "random signs, magnitudes rounded to quarters of the typical one (many ties), one value in four exactly zero", 1},
	{"shifted", "the task's values shifted up by 4 times their typical magnitude", 0},
	{"large", "random signs, 100 times the task's magnitudes", 1},
	{"small", "random signs, 1/100 of the task's magnitudes", 1},
};
enum { NROBUST_DISTS = sizeof robust_dists / sizeof robust_dists[0] };

struct robust_run {
	int asked, run, attempts;
	jv used, skipped;
	int usable[NROBUST_DISTS][2];   /* by dist and form (1 signed): -1 unknown, 0 no, 1 yes */
};

/*
 * One robustness check of dist in one form: 1 passed, 0 the reference's
 * output cannot judge it there (noted in skipped), -1 failed (the result
 * says why).
 */
static int robust_check(struct job *j, struct verify_tally *t, struct robust_run *rr, int d, int signed_values)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	int k = cfg->checks + rr->attempts;
	struct robust_spec spec = {robust_dists[d].name, signed_values, j->seed + 1 + (unsigned long long)k};
	rr->attempts++;
	jv reply, info;
	int ref_mutated = 0;
	gpu_lock(s, LOCK_SH);
	int vc = verify_check(j, k, &spec, 0, &reply, &ref_mutated, &info);
	gpu_lock(s, LOCK_UN);
	job_phase(j, "robust");
	if (vc != 0) {
		jv_free(info);
		check_paths_remove(j, k);
		return -1;
	}
	double rms = 0;
	int usable = ca_json_bool(info, "out_usable") == 1 && ca_json_number(info, "out_rms", &rms) == 1 && rms > 0;
	rr->usable[d][signed_values] = usable;
	jv form = jv_string_fmt("%s%s", spec.dist, signed_values || !robust_dists[d].has_sign ? "" : " (magnitudes)");
	if (!usable) {
		char *why = ca_json_strdup(info, "out_unusable_why");
		rr->skipped = jv_array_append(rr->skipped,
			jv_string_fmt("%s: %s", jv_string_value(form), why ? why : "no usable reference output"));
		free(why);
		jv_free(form);
		jv_free(info);
		jv_free(reply);
		check_paths_remove(j, k);
		return 0;
	}
	jv_free(info);
	/*
	 * The absolute tolerance follows the output's scale: these inputs
	 * are not the task's magnitudes, and a kernel's rounding is relative
	 * to them (a TF32 matmul on zero-mean inputs has outputs near zero
	 * that atol 1e-2 alone would reject); small inputs get a smaller
	 * atol, so a wrong answer of small magnitude still fails.
	 */
	struct ca_compare_options tol = cfg->tol;
	tol.atol = cfg->tol.atol * rms;
	jv used = set_str(jv_object(), "dist", spec.dist);
	if (robust_dists[d].has_sign)
		used = jv_object_set(used, jv_string("signed"), jv_bool(signed_values));
	used = set_num(used, "seed", (double)spec.seed);
	used = set_num(used, "atol", tol.atol);
	rr->used = jv_array_append(rr->used, used);
	rr->run++;
	char what[600];
	snprintf(what, sizeof what, "robustness check %d (%s: %s%s; seed %llu)", rr->run, jv_string_value(form),
		robust_dists[d].described, signed_values || !robust_dists[d].has_sign ? "" : ", signs as the task's",
		spec.seed);
	jv_free(form);
	if (judge_check(j, k, reply, ref_mutated, &tol, what, t) == 0)
		return 1;
	static const char *const compare_only[] = {"compare", NULL};
	retell_failure(j, compare_only, "robust", what, "the kernel must be correct for any input of the task's "
		"shapes and dtypes, not only for values like get_inputs()'s");
	return -1;
}

/*
 * verify's robustness checks (--robust N, after the checks passed): the
 * same shapes, dtypes and weights with values from other distributions,
 * each used only where the reference's output is finite and not
 * degenerate (a signed form first, then magnitudes alone for a task
 * defined on positive values). Once every distribution was tried, the
 * usable ones are used again under new seeds until N ran. The record's
 * "robust" says what ran. 0 when all passed.
 */
static int robust_checks(struct job *j, struct verify_tally *t)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	if (cfg->robust <= 0)
		return 0;
	struct robust_run rr = {.asked = cfg->robust, .used = jv_array(), .skipped = jv_array()};
	memset(rr.usable, -1, sizeof rr.usable);
	int rc = 0, any = 1;
	for (int pass = 0; rc == 0 && rr.run < rr.asked && any; pass++) {
		any = 0;
		for (int d = 0; d < NROBUST_DISTS && rc == 0 && rr.run < rr.asked; d++) {
			for (int sv = 1; sv >= (robust_dists[d].has_sign ? 0 : 1); sv--) {
				if (pass > 0 && rr.usable[d][sv] != 1)
					continue;
				int r = robust_check(j, t, &rr, d, sv);
				if (r < 0)
					rc = -1;
				if (r != 0)
					break;  /* passed or failed: this distribution's other form is not needed */
			}
			any |= rr.usable[d][1] == 1 || rr.usable[d][0] == 1;
		}
	}
	jv o = jv_object_set(jv_object(), jv_string("asked"), jv_number(rr.asked));
	o = jv_object_set(o, jv_string("checks"), jv_number(rr.run));
	o = jv_object_set(o, jv_string("passed"), jv_number(rc == 0 ? rr.run : rr.run - 1));
	o = jv_object_set(o, jv_string("dists"), rr.used);
	o = jv_object_set(o, jv_string("skipped"), rr.skipped);
	jv failed = jv_null();
	if (rc != 0 && rr.run > 0) {
		jv last = jv_array_get(ca_json_get(o, "dists"), rr.run - 1);
		failed = ca_json_get(last, "dist");
		jv_free(last);
	}
	o = jv_object_set(o, jv_string("failed"), failed);
	j->result = jv_object_set(j->result, jv_string("robust"), o);
	return rc;
}

/* ------------------------------------------------------------------ other sizes */

struct shapes_run {
	int asked, run, attempts;
	int resized;  /* the reference was sent to other sizes (a proposal skipped too) */
	jv used, skipped, failed;
};

/*
 * Proposal attempt of other sizes for the task's size globals (borrowed):
 * every one halved, then every one at three quarters, then each alone
 * halved (for sizes that constrain one another); invalid past the last.
 */
static jv shapes_proposal(jv sizes, int attempt)
{
	int n = jv_object_length(jv_copy(sizes)), i = 0;
	if (attempt >= 2 + (n > 1 ? n : 0))
		return jv_invalid();
	jv out = jv_object();
	jv_object_foreach(sizes, key, value) {
		long v = (long)jv_number_value(value), w = v;
		if (attempt == 0 || attempt - 2 == i)
			w = v / 2;
		else if (attempt == 1)
			w = v * 3 / 4;
		out = jv_object_set(out, key, jv_number(w < 1 ? 1 : w));
		jv_free(value);
		i++;
	}
	return out;
}

/* "batch_size=8, dim=32" of sizes (borrowed). */
static void sizes_text(jv sizes, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	jv_object_foreach(sizes, key, value) {
		if (used < size)
			used += (size_t)snprintf(buf + used, size - used, "%s%s=%g", used ? ", " : "",
				jv_string_value(key), jv_number_value(value));
		jv_free(key);
		jv_free(value);
	}
}

/* A worker's "resize" request to sizes (consumed; null: back to the task's own). */
static jv resize_request(struct job *j, jv sizes, int reference, const char *weights, const char *init)
{
	jv req = jv_object_set(set_str(jv_object(), "op", "resize"), jv_string("sizes"), sizes);
	req = set_num(req, "seed", (double)j->seed);
	if (reference)
		return set_str(set_str(req, "weights_out", weights), "init_out", init);
	return set_str(set_str(req, "weights", weights), "init", init);
}

/*
 * A failure of the candidate at other sizes (a crash, an error, outputs
 * that differ) is stage "shapes", with what the agent must change.
 */
static void shapes_blame(struct job *j, const char *what)
{
	static const char *const candidate_stages[] = {"compare", "run", "load", "weights", "crash", "timeout", NULL};
	retell_failure(j, candidate_stages, "shapes", what, "the kernel must work for other sizes of the same task: "
		"take every size from the inputs' shapes and the init arguments, not from the benchmark's constants");
}

/*
 * One check at other sizes (consumed): the reference builds the task
 * there and runs it once; where it fails or its output cannot judge (0,
 * noted in skipped) the sizes are not used. Else the candidate builds
 * ModelNew with the reference's new weights and one check runs as the
 * checks do. 1 passed, -1 failed (the result says why).
 */
static int shapes_check(struct job *j, struct verify_tally *t, struct shapes_run *sr, jv sizes)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	int k = cfg->checks + sr->attempts++;
	unsigned long long seed = j->seed + 1 + (unsigned long long)k;  /* verify_check's for check k */
	char weights[PATHLEN], init[PATHLEN], text[1024], what[1200];
	snprintf(weights, sizeof weights, "%s/weights-shapes.ten", j->io);
	snprintf(init, sizeof init, "%s/init-shapes.ten", j->io);
	sizes_text(sizes, text, sizeof text);
	jv req = set_num(resize_request(j, jv_copy(sizes), 1, weights, init), "probe_seed", (double)seed);
	jv reply = jv_invalid(), fault;
	gpu_lock(s, LOCK_SH);
	double t0 = ca_proc_now();
	int wc = worker_call(&s->reference, jv_copy(req), cfg->load_timeout_s, &reply, &fault, NULL);
	gpu_lock(s, LOCK_UN);
	if (wc != 0) {
		jv_free(req);
		jv_free(sizes);
		reference_failed(j, fault);
		return -1;
	}
	sr->resized = 1;
	if (ca_json_bool(reply, "ok") == 1)
		reference_state(j, req, ca_proc_now() - t0);  /* its model now */
	else
		jv_free(req);
	if (ca_json_bool(reply, "out_usable") != 1) {
		int ran = ca_json_bool(reply, "ok") == 1;
		char *why = ca_json_strdup(reply, ran ? "out_unusable_why" : "error");
		sr->skipped = jv_array_append(sr->skipped, jv_string_fmt("%s: %s%s", text,
			ran ? "" : "the reference fails there: ", why ? why : "no usable reference output"));
		free(why);
		jv_free(reply);
		jv_free(sizes);
		return 0;
	}
	jv_free(reply);
	chmod(weights, 0644);
	chmod(init, 0644);
	sr->used = jv_array_append(sr->used, set_num(jv_object_set(jv_object(), jv_string("globals"), jv_copy(sizes)),
		"seed", (double)seed));
	sr->run++;
	snprintf(what, sizeof what, "shapes check %d (%s; seed %llu)", sr->run, text, seed);
	jv_free(sr->failed);
	sr->failed = sizes;
	int ref_mutated = 0;
	gpu_lock(s, LOCK_SH);
	int rc = candidate_call(j, resize_request(j, jv_copy(sr->failed), 0, weights, init), cfg->load_timeout_s, &reply, NULL);
	if (rc == 0) {
		jv_free(reply);
		rc = verify_check(j, k, NULL, 0, &reply, &ref_mutated, NULL);
	}
	gpu_lock(s, LOCK_UN);
	job_phase(j, "shapes");
	if (rc == 0)
		rc = judge_check(j, k, reply, ref_mutated, &cfg->tol, what, t);
	else
		check_paths_remove(j, k);
	if (rc != 0) {
		shapes_blame(j, what);
		return -1;
	}
	jv_free(sr->failed);
	sr->failed = jv_null();
	return 1;
}

/*
 * verify's checks at other sizes (--shapes N, last): the task rebuilt
 * with its size globals made smaller, the candidate with it, so a kernel
 * that hard-codes the benchmark's sizes fails. Then both back to the
 * task's own sizes (a profile may follow). The record's "shapes" says
 * what ran. 0 when all passed.
 */
static int shapes_checks(struct job *j, struct verify_tally *t)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	if (cfg->shapes <= 0)
		return 0;
	struct shapes_run sr = {.asked = cfg->shapes, .used = jv_array(), .skipped = jv_array(), .failed = jv_null()};
	int rc = 0, any = jv_get_kind(j->sizes) == JV_KIND_OBJECT && jv_object_length(jv_copy(j->sizes)) > 0;
	if (!any)
		sr.skipped = jv_array_append(sr.skipped, jv_string("the task has no sizes to change: get_inputs() and "
			"get_init_inputs() read no integer module-level globals greater than 1"));
	for (int a = 0; any && rc == 0 && sr.run < sr.asked; a++) {
		jv sizes = shapes_proposal(j->sizes, a);
		if (!jv_is_valid(sizes))
			break;
		rc = shapes_check(j, t, &sr, sizes) < 0 ? -1 : 0;
	}
	jv o = jv_object_set(jv_object(), jv_string("asked"), jv_number(sr.asked));
	o = jv_object_set(o, jv_string("checks"), jv_number(sr.run));
	o = jv_object_set(o, jv_string("passed"), jv_number(rc == 0 ? sr.run : sr.run - 1));
	o = jv_object_set(o, jv_string("sizes"), sr.used);
	o = jv_object_set(o, jv_string("skipped"), sr.skipped);
	o = jv_object_set(o, jv_string("failed"), sr.failed);
	j->result = jv_object_set(j->result, jv_string("shapes"), o);
	if (rc != 0 || !sr.resized)
		return rc;
	/*
	 * Back to the benchmark's sizes and models: the reference after any
	 * proposal (one it ran but could not judge by left it at those sizes:
	 * a profile after would draw its inputs there), the candidate after
	 * one that ran.
	 */
	jv reply, back = resize_request(j, jv_null(), 1, "", "");
	if (reference_call(j, jv_copy(back), cfg->load_timeout_s, &reply) != 0) {
		jv_free(back);
		return -1;
	}
	reference_state(j, back, 0);
	jv_free(reply);
	if (sr.run == 0)
		return 0;
	reply = jv_invalid();
	rc = candidate_call(j, resize_request(j, jv_null(), 0, "", ""), cfg->load_timeout_s, &reply, NULL);
	jv_free(reply);
	return rc;
}

void do_verify(struct job *j)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	j->result = set_num(j->result, "atol", cfg->tol.atol);
	j->result = set_num(j->result, "rtol", cfg->tol.rtol);
	struct verify_tally t = {.kernels = jv_array(), .bad_names = jv_array()};
	for (int k = 0; k < cfg->checks; k++) {
		jv reply;
		int ref_mutated = 0;
		gpu_lock(s, LOCK_SH);
		int vc = verify_check(j, k, NULL, k == 0 && strcmp(cfg->device, "cpu"), &reply, &ref_mutated, NULL);
		gpu_lock(s, LOCK_UN);
		if (vc != 0) {
			check_paths_remove(j, k);
			goto done;
		}
		job_phase(j, "checks");
		char what[32];
		snprintf(what, sizeof what, "check %d", k + 1);
		if (judge_check(j, k, reply, ref_mutated, &cfg->tol, what, &t) != 0)
			goto done;
		t.passed++;
	}
	if (robust_checks(j, &t) != 0 || shapes_checks(j, &t) != 0)
		goto done;
	j->result = jv_object_set(j->result, jv_string("ok"), jv_true());
done:
	j->result = jv_object_set(j->result, jv_string("checks"), jv_number(cfg->checks));
	j->result = jv_object_set(j->result, jv_string("checks_passed"), jv_number(t.passed));
	j->result = set_num(j->result, "max_abs_err", t.max_abs);
	j->result = set_num(j->result, "max_rel_err", t.max_rel);
	j->result = jv_object_set(j->result, jv_string("kernels"), t.kernels);
	jv_free(t.bad_names);
}
