/*
 * evaluate_profile: ca-profile's timing of the candidate (do_profile):
 * the inputs of the timed loops (drawn live under fresh seeds, or shipped
 * as files), the candidate's loop timed by the method of the baselines,
 * timed again when our clock doubts it, and the outputs of timed calls
 * spot-checked against the reference's.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "compare.h"
#include "err.h"
#include "evaluate_impl.h"
#include "json.h"

/*
 * The seed of timed loop call c (warm-up calls counted) when the worker
 * draws the inputs: the timed calls' drawn by draw_seeds, unknown to the
 * record (and so to the candidate) until each is sent live; the warm-up
 * calls', and shipped set c's, from the record's seed.
 */
static unsigned long long call_seed(const struct job *j, int c)
{
	if (j->seeds && c >= 0 && c < j->nseeds)
		return j->seeds[c];
	return j->seed + 1000 + (unsigned)c;
}

/*
 * Draw the timed calls' seeds afresh (fresh_seed: under 2^48, exact as
 * JSON numbers), the warm-up calls' from the record's seed: before the
 * reference digests the loop's inputs, and again before a loop is timed
 * again, so a candidate that saw one loop's seeds cannot use them.
 */
static void draw_seeds(struct job *j)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	j->nseeds = cfg->warmup + cfg->iters;
	free(j->seeds);
	j->seeds = ca_xcalloc((size_t)j->nseeds + 1, sizeof *j->seeds);
	for (int c = 0; c < j->nseeds; c++)
		j->seeds[c] = c < cfg->warmup ? j->seed + 1000 + (unsigned)c : fresh_seed();
}

/* The calls of a timed loop, warm-up included: each has inputs of its own (see ship_warm). */
static int loop_sets(const struct job *j)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	return cfg->warmup + cfg->iters;
}

/*
 * Shipped inputs' warm-up files: two at most, cycled by the warm-up calls
 * (which are not timed; the timed calls' files are the job's nship).
 */
static int ship_warm(const struct job *j)
{
	int w = j->slot->cfg->warmup;
	return w < 2 ? w : 2;
}

/*
 * The shipped files of a loop: the warm-up calls' (tin-w-K) and the timed
 * calls' (tin-t-K) in the trusted directory, where profile_sets writes
 * them; a candidate's loop sees the warm-up files linked into its io
 * directory at its request and each timed call's at its turn
 * (tin-call-K, see struct loop_clock); the reference's, as rv-K in the
 * trusted directory the same way, so both loops pay the same.
 */
void ship_path(const struct job *j, const char *what, int k, char *out, size_t size)
{
	snprintf(out, size, "%s/tin-%s-%d.ten", j->slot->trusted, what, k);
}

/* Remove the files a loop was shown (the sources stay until profile_sets writes new ones). */
void ship_unreveal(const struct job *j)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	char path[PATHLEN];
	if (!j->ship)
		return;
	for (int k = 0; k < cfg->iters; k++) {
		snprintf(path, sizeof path, "%s/tin-call-%d.ten", j->io, k);
		unlink(path);
		snprintf(path, sizeof path, "%s/rv-%d.ten", j->slot->trusted, k);
		unlink(path);
	}
	for (int k = 0; k < ship_warm(j); k++) {
		snprintf(path, sizeof path, "%s/tin-w-%d.ten", j->io, k);
		unlink(path);
	}
}

/* req (consumed) to run on the slot's CPU when it has one (see slot_pick_cpu). */
jv with_cpu(const struct slot *s, jv req)
{
	return s->cpu >= 0 ? set_num(req, "cpu", s->cpu) : req;
}

/*
 * The timing request for a method (shipped input sets already written),
 * and, for the candidate's loop (mode "candidate"), the warm-up files
 * shipped to it now; ours set up to send the timed calls' seeds or files
 * live. NULL when a warm-up file cannot be put in place.
 */
jv time_request(struct job *j, const char *mode, const char *keep_prefix, jv keep, struct loop_clock *ours,
		const unsigned long long *live)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	int candidate = !strcmp(mode, "candidate");
	jv inputs = jv_array();
	/*
	 * Shipped as files, or drawn by the worker before each call under the
	 * call's seed: the warm-up calls' named here, the timed calls' sent
	 * live during the loop (see struct loop_clock).
	 */
	for (int k = 0; k < (j->ship ? ship_warm(j) : cfg->warmup); k++) {
		if (!j->ship) {
			inputs = jv_array_append(inputs, jv_number((double)call_seed(j, k)));
			continue;
		}
		char from[PATHLEN], in[PATHLEN];
		ship_path(j, "w", k, from, sizeof from);
		snprintf(in, sizeof in, "%s/tin-w-%d.ten", j->io, k);
		if (candidate && reveal_file(from, in) != 0) {
			int saved = errno;  /* whose fault it was, for the caller */
			jv_free(inputs);
			jv_free(keep);
			errno = saved;
			return jv_invalid();
		}
		inputs = jv_array_append(inputs, jv_string(candidate ? in : from));
	}
	ours->live = j->ship ? NULL : live;
	ours->ship = j->ship;
	ours->nship = j->nship;
	ours->nlive = cfg->iters;
	ours->nsent = 0;
	snprintf(ours->ship_from, sizeof ours->ship_from, "%s/tin-t-", j->slot->trusted);
	if (candidate)
		snprintf(ours->ship_to, sizeof ours->ship_to, "%s/tin-call-", j->io);
	else
		snprintf(ours->ship_to, sizeof ours->ship_to, "%s/rv-", j->slot->trusted);
	jv req = set_str(jv_object(), "op", "time");
	req = jv_object_set(req, jv_string(j->ship ? "inputs" : "seeds"), inputs);
	req = set_num(req, "live", cfg->iters);
	req = set_num(req, "warmup", cfg->warmup);
	req = set_num(req, "iters", cfg->iters);
	req = set_str(req, "mode", mode);
	req = jv_object_set(req, jv_string("compile_mode"), cfg->compile_mode ? jv_string(cfg->compile_mode) : jv_null());
	req = jv_object_set(req, jv_string("keep"), keep);
	/* Every mode alike, so the reference's loop does the same copying work as the candidate's. */
	req = jv_object_set(req, jv_string("keep_after"), jv_true());
	req = set_str(req, "keep_prefix", keep_prefix);
	req = jv_object_set(req, jv_string("trace"), jv_bool(strcmp(cfg->device, "cpu") != 0));
	return with_cpu(j->slot, req);
}

jv keep_indices(const struct ca_eval_config *cfg, unsigned long long seed)
{
	jv keep = jv_array();
	int want = cfg->keep < cfg->iters ? cfg->keep : cfg->iters;
	int *chosen = ca_xcalloc((size_t)cfg->iters, sizeof *chosen);
	unsigned long long x = seed * 6364136223846793005ULL + 1442695040888963407ULL;
	if (want > 0) {
		chosen[cfg->iters - 1] = 1;  /* the last call, so work left running shows */
		keep = jv_array_append(keep, jv_number(cfg->iters - 1));
	}
	for (int got = 1; got < want;) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		int i = (int)((x >> 33) % (unsigned long long)cfg->iters);
		if (!chosen[i]) {
			chosen[i] = 1;
			keep = jv_array_append(keep, jv_number(i));
			got++;
		}
	}
	free(chosen);
	return keep;
}

/*
 * The most bytes of shipped input files a loop's timed calls get
 * ($CA_EVAL_SHIP_BYTES; by default 4 GiB or a quarter of what the
 * filesystem of dir has free, whichever is more): every timed call's
 * inputs are a file of their own when they fit, else as many files as fit
 * (--sets at least) are cycled.
 */
static double ship_bytes(const char *dir)
{
	const char *env = getenv("CA_EVAL_SHIP_BYTES");
	double v = env && *env ? strtod(env, NULL) : 0;
	if (v > 0)
		return v;
	struct statvfs vfs;
	double quarter = statvfs(dir, &vfs) == 0 ? (double)vfs.f_bavail * (double)vfs.f_frsize / 4 : 0;
	return quarter > 4.0 * (1 << 30) ? quarter : 4.0 * (1 << 30);
}

/* The reference draws the inputs under seed and writes them to path (0644), nothing run. */
int ship_write(struct job *j, unsigned long long seed, const char *path, jv *digests)
{
	unlink(path);  /* a new file: a link a candidate was shown stays with the old one */
	jv req = set_str(set_num(set_str(jv_object(), "op", "inputs"), "seed", (double)seed), "out", path), reply;
	if (reference_call(j, req, j->slot->cfg->timeout_s * 4, &reply) != 0)
		return -1;
	jv d = ca_json_get(reply, "digest");
	*digests = jv_array_append(*digests, jv_get_kind(d) == JV_KIND_STRING ? d : (jv_free(d), jv_null()));
	note_drawn_on(j, reply);
	jv_free(reply);
	chmod(path, 0644);
	return 0;
}

/*
 * The timing loop's inputs as the reference draws them, their digests
 * into *digests (replaced): when the workers draw them, one set per call
 * of the loop, digested without running the model (the reference's
 * outputs for the spot checks are computed after the candidate's loop,
 * for the calls checked); when shipped, written as files in the trusted
 * directory under the same seeds (see ship_path), for the loops to be
 * shown one at a time: the warm-up calls' (ship_warm), and one per timed
 * call as far as ship_bytes allows (j->nship; the calls past it reuse
 * file call % nship, and so their seeds).
 */
static int profile_sets(struct job *j, jv *digests)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	jv_free(*digests);
	*digests = jv_array();
	gpu_lock(s, LOCK_SH);
	int rc = 0;
	if (!j->ship) {
		jv seeds = jv_array();
		for (int c = 0; c < loop_sets(j); c++)
			seeds = jv_array_append(seeds, jv_number((double)call_seed(j, c)));
		jv req = jv_object_set(set_str(jv_object(), "op", "digests"), jv_string("seeds"), seeds), reply;
		if (reference_call(j, req, cfg->timeout_s * 4, &reply) != 0) {
			gpu_lock(s, LOCK_UN);
			return -1;
		}
		jv d = ca_json_get(reply, "digests");
		if (jv_get_kind(d) == JV_KIND_ARRAY) {
			jv_free(*digests);
			*digests = d;
		} else {
			jv_free(d);
		}
		note_drawn_on(j, reply);
		jv_free(reply);
		gpu_lock(s, LOCK_UN);
		return 0;
	}
	char path[PATHLEN];
	for (int k = 0; k < ship_warm(j) && rc == 0; k++) {
		ship_path(j, "w", k, path, sizeof path);
		rc = ship_write(j, call_seed(j, k), path, digests);
	}
	j->nship = cfg->iters;
	jv_free(j->ship_digests);
	j->ship_digests = jv_array();
	for (int k = 0; k < j->nship && rc == 0; k++) {
		ship_path(j, "t", k, path, sizeof path);
		rc = ship_write(j, call_seed(j, cfg->warmup + k), path, &j->ship_digests);
		struct stat st;
		if (rc == 0 && k == 0 && stat(path, &st) == 0 && st.st_size > 0) {
			double fit = floor(ship_bytes(s->trusted) / (double)st.st_size);
			if (fit < cfg->iters)
				j->nship = fit > cfg->sets ? (int)fit : cfg->sets < cfg->iters ? cfg->sets : cfg->iters;
		}
	}
	gpu_lock(s, LOCK_UN);
	return rc;
}

/*
 * The reference's output on timed call index's inputs (into ref_out, or
 * with ref_digest as "out_digest" and "out_numel" in *reply): drawn again
 * under the call's seed, or, shipped, read from the call's file in the
 * trusted directory, whose inputs' digest must still be the one written
 * (a candidate that shares our uid could write through the link it was
 * shown). 0, or -1 with the record failed.
 */
static int reference_on_call(struct job *j, int index, const char *ref_out, jv *reply)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	jv req = set_str(jv_object(), "op", "inputs");
	int k = j->nship > 0 ? index % j->nship : 0;
	char path[PATHLEN];
	if (j->ship) {
		ship_path(j, "t", k, path, sizeof path);
		req = set_str(req, "inputs", path);
	} else {
		req = set_num(req, "seed", (double)call_seed(j, cfg->warmup + index));
	}
	req = ref_out ? set_str(req, "ref_out", ref_out) : jv_object_set(req, jv_string("ref_digest"), jv_true());
	gpu_lock(s, LOCK_SH);
	int rc = reference_call(j, req, cfg->timeout_s * 4, reply);
	gpu_lock(s, LOCK_UN);
	if (rc != 0)
		return -1;
	if (j->ship) {
		jv want = jv_array_get(jv_copy(j->ship_digests), k);
		int same = digest_matches(*reply, "digest", -1, want);
		jv_free(want);
		if (!same) {
			char msg[256];
			snprintf(msg, sizeof msg, "timed call %d: its shipped inputs were changed during the loop", index);
			job_fail(j, "spot-check", msg);
			jv_free(*reply);
			*reply = jv_invalid();
			return -1;
		}
	}
	return 0;
}

/*
 * How many times a candidate's loop that our clock doubts is timed again.
 * On the H200 (session 8, bench/probe-bound.sh) a quarter of an honest
 * 268 us relu's first loops fell below the bound (its loop's own work,
 * ~3 ms a call, varies by as much as the call) and about one retimed loop
 * in five again: with three retimes that is a few honest failures in a
 * thousand, with five a few in a hundred thousand. A patched clock gains
 * little from the extra loops: one that reports a tenth fails them all,
 * and one that reports a little under half passes some loop either way.
 */
#define RETIMES 5

/*
 * With the spot checks named before the loop (every output kept would not
 * fit), the digests the ticks carried are what is left to check the other
 * calls by: want calls that were not named, picked now from getrandom, each
 * compared with the reference's output on the same inputs. An output
 * within tolerance (|c - r| <= atol + rtol |r| per element) has sums that
 * differ by at most n atol + rtol sum|r| (sum and sum of magnitudes) and
 * (2 atol + 2 atol rtol) sum|r| + n atol^2 + (2 rtol + rtol^2) sum r^2 (sum
 * of squares), plus rounding: a call whose work was skipped fails that.
 * 0 when they agree, else -1 with the record failed.
 */
static int digest_spot_checks(struct job *j, const struct loop_clock *ours, jv named)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	int iters = cfg->iters, nnamed = 0;
	char *taken = ca_xcalloc((size_t)iters, 1);
	jv_array_foreach(named, k, x) {
		(void)k;
		int i = (int)jv_number_value(x);
		if (i >= 0 && i < iters && !taken[i]) {
			taken[i] = 1;
			nnamed++;
		}
		jv_free(x);
	}
	int want = cfg->keep < iters - nnamed ? cfg->keep : iters - nnamed, rc = 0;
	for (int got = 0; got < want && rc == 0;) {
		int index = (int)(random_u64() % (unsigned long long)iters);
		if (taken[index])
			continue;
		taken[index] = 1;
		got++;
		jv reply;
		if (reference_on_call(j, index, NULL, &reply) != 0) {
			rc = -1;
			break;
		}
		double ref[DIGEST_LEN], n = NAN;
		jv d = ca_json_get(reply, "out_digest");
		digest_from(d, ref);
		jv_free(d);
		ca_json_number(reply, "out_numel", &n);
		jv_free(reply);
		if (!(isfinite(ref[0]) && isfinite(ref[1]) && isfinite(ref[2]) && isfinite(n)))
			continue;  /* a reference output that is not finite cannot be judged this way */
		const double *c = ours->digests[index];
		if (!digest_within(&cfg->tol, ref, n, c)) {
			char msg[1024], ct[384], rt[384];
			digest_text(c, ct, sizeof ct);
			digest_text(ref, rt, sizeof rt);
			snprintf(msg, sizeof msg, "timed call %d: the digest its tick carried (%s) is not within tolerance of "
				"the reference's output on the same inputs (%s, over %.0f elements); the call was picked after "
				"the loop", index, ct, rt, n);
			job_fail(j, "spot-check", msg);
			rc = -1;
		}
	}
	free(taken);
	return rc;
}

/*
 * A loop the profile did not pass: the median the candidate reported is
 * no measurement, so it leaves candidate_us (where the reward reads one)
 * for reported_us.
 */
static void distrust_reported_time(struct job *j)
{
	jv reported = ca_json_get(j->result, "candidate_us");
	if (!jv_is_valid(reported))
		return;
	j->result = jv_object_delete(j->result, jv_string("candidate_us"));
	j->result = jv_object_set(j->result, jv_string("reported_us"), reported);
}

/*
 * The candidate's timed loop as our clock judged it: what the steps of
 * do_profile pass on to each other.
 */
struct candidate_loop {
	struct loop_clock ours;         /* our clock around the judged loop */
	jv named;                       /* the calls to check named before the loop (keep_indices) */
	jv reply;                       /* the worker's reply to the judged loop */
	struct loop_overhead overhead;  /* the reference's, the loop judged against */
	double wall_per_call, call_us, bound_us;  /* see clock_verdict */
	struct burst burst;             /* the bursts, our clock alone (evaluate_burst.c) */
	int clock_bad;
	char clock_msg[512];
	int retimed;                    /* how many times the loop was timed again */
	struct ca_proc_usage used;      /* what the candidate's processes used in the loop's request (-v) */
	double request_s;               /* and how long it took */
};

/* One timed loop of the candidate's; 0 with cl->reply, else -1 with the record failed. */
static int candidate_loop_run(struct job *j, struct candidate_loop *cl)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	char prefix[PATHLEN];
	snprintf(prefix, sizeof prefix, "%s/kept-", j->io);
	loop_clock_reset(&cl->ours);
	jv req = time_request(j, "candidate", prefix, jv_copy(cl->named), &cl->ours, j->seeds + cfg->warmup);
	if (!jv_is_valid(req)) {
		char why[512];
		job_fail(j, placing_failed(j->cand.dir, errno, "the shipped inputs", why, sizeof why), why);
		return -1;
	}
	/* For -v: whether a doubted loop's worker faulted pages in or ran short of CPU (two walks of /proc). */
	struct ca_proc_usage before = {0, 0, 0}, after = {0, 0, 0};
	if (cfg->verbose)
		ca_proc_tree_usage(j->cand.run.co.proc.pid, &before);
	timed_loop_begin(s);
	double t0 = ca_proc_now();
	int rc = candidate_call(j, req, cfg->timeout_s * 10, &cl->reply, &cl->ours);
	cl->request_s = ca_proc_now() - t0;
	timed_loop_end(s);
	if (cfg->verbose)
		ca_proc_tree_usage(j->cand.run.co.proc.pid, &after);
	cl->used = (struct ca_proc_usage){after.minflt - before.minflt, after.majflt - before.majflt, after.cpu_s - before.cpu_s};
	ship_unreveal(j);
	if (rc != 0) {
		if (jv_get_kind(cl->reply) == JV_KIND_OBJECT)
			jv_free(cl->reply);
		cl->reply = jv_invalid();
		return -1;
	}
	return 0;
}

/* Whether the candidate's loop drew the inputs the reference digested (digests borrowed); always when shipped. */
static int drew_same_inputs(const struct job *j, jv reply, jv digests)
{
	int same = 1;
	for (int k = 0; k < loop_sets(j) && !j->ship; k++) {
		jv want = jv_array_get(jv_copy(digests), k);
		same = same && digest_matches(reply, "digests", k, want);
		jv_free(want);
	}
	return same;
}

/*
 * Our clock doubts the reported time. The loop's own work can take
 * longer in a busy moment than it did on the reference (other slots
 * starting workers or loading on the same GPU), so wait a moment, the
 * GPU's lock released, and time again, judging the new loop; a patched
 * clock fails every time. 0 when the next loop can be timed.
 */
static int retime(struct job *j, struct candidate_loop *cl, jv *digests)
{
	jv_free(cl->reply);
	cl->reply = jv_invalid();
	cl->retimed++;
	j->result = jv_object_set(j->result, jv_string("retimed"), jv_true());
	struct timespec pause = {0, 250000000L * (cl->retimed < 3 ? cl->retimed : 3)};
	while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
		;
	/*
	 * New seeds for the new loop (this one's were sent to the
	 * candidate), digested by the reference; and the reference's
	 * overhead measured again, beside the new loop, both on the CPU
	 * that is the fastest now.
	 */
	draw_seeds(j);
	slot_pick_cpu(j->slot);
	if (profile_sets(j, digests) != 0)
		return -1;
	/*
	 * Judged against the overhead measured now. Not the least
	 * of those measured: a ready line read late shrinks the
	 * reference's call phase too (its overhead there came out
	 * negative on a busy CPU), and the least would then hold
	 * every later loop to it; an honest candidate failed all
	 * four loops that way (t0154, beside make asan).
	 */
	return fresh_overhead(j, &cl->overhead);
}

/*
 * The candidate drew other inputs than the reference: ship them, time
 * the baselines that way too (their overhead is what our clock
 * subtracts), and then the candidate again. 0 when it can be.
 */
static int ship_inputs(struct job *j, struct candidate_loop *cl, jv *digests)
{
	jv_free(cl->reply);
	cl->reply = jv_invalid();
	j->ship = 1;
	j->result = jv_object_set(j->result, jv_string("inputs_shipped"), jv_true());
	return profile_sets(j, digests) != 0 || profile_baselines(j, &cl->overhead) != 0 ? -1 : 0;
}

/*
 * The bursts' verdict on a loop our clock between the lines accepted
 * (see evaluate_burst.c; on a GPU only): 0 when the reported median is plausible, 1
 * when not (the reason in cl->clock_msg), -1 with the record failed.
 */
static int burst_judge(struct job *j, struct candidate_loop *cl)
{
	double median = NAN, eager_us = NAN;
	int on_cpu = !strcmp(j->slot->cfg->device, "cpu");
	const char *cpu_bursts = getenv("CA_EVAL_CPU_BURSTS");
	if (on_cpu && !(cpu_bursts && *cpu_bursts))
		return 0;
	ca_json_number(cl->reply, "median_us", &median);
	ca_json_number(j->result, "eager_us", &eager_us);
	if (burst_time(j, &cl->overhead, &cl->burst) != 0)
		return -1;
	/* On the CPU (tests only) the bursts' outputs are checked and their numbers kept; their time is not judged. */
	return !on_cpu && burst_verdict(&cl->burst, median, eager_us, cl->clock_msg, sizeof cl->clock_msg) != 0;
}

/* -v: how our clock judged a timed loop, one line. */
static void print_loop(const struct job *j, const struct candidate_loop *cl)
{
	double median = NAN;
	ca_json_number(cl->reply, "median_us", &median);
	char cpu[32] = "any cpu";
	if (j->slot->cpu >= 0)
		snprintf(cpu, sizeof cpu, "cpu %d", j->slot->cpu);
	ca_err_warn("%s: timed loop %d on %s: reported %.1f us a call; our clock %.1f us a call beyond the reference's loop "
		"(median), bound %.1f us; the reference's overhead a call %.1f us (call phase %.1f, inputs %.1f); "
		"the candidate's processes: %lld page faults (%lld major), %.0f ms of CPU in %.0f ms: %s",
		j->id, cl->retimed + 1, cpu, median, cl->call_us, cl->bound_us, cl->overhead.call * 1e6, cl->overhead.ready * 1e6,
		cl->overhead.inputs * 1e6, cl->used.minflt, cl->used.majflt, cl->used.cpu_s * 1e3, cl->request_s * 1e3,
		cl->clock_bad ? cl->clock_msg : "accepted");
}

/*
 * The candidate, timed the same way as the baselines, until a loop on
 * the inputs the reference digested is judged: one our clock accepts, or
 * the last of RETIMES timed again. 0, or -1 with the record failed.
 */
static int time_candidate(struct job *j, struct candidate_loop *cl, jv *digests)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	for (;;) {
		if (candidate_loop_run(j, cl) != 0)
			return -1;
		if (drew_same_inputs(j, cl->reply, *digests)) {
			cl->burst.calls = 0;  /* none for this loop yet */
			cl->clock_bad = clock_verdict(&cl->ours, cl->reply, cfg->iters, &cl->overhead, !strcmp(cfg->device, "cpu"),
				&cl->wall_per_call, &cl->call_us, &cl->bound_us, cl->clock_msg, sizeof cl->clock_msg) != 0;
			if (!cl->clock_bad) {
				int bad = burst_judge(j, cl);
				if (bad < 0)
					return -1;
				cl->clock_bad = bad;
			}
			if (cfg->verbose)
				print_loop(j, cl);
			if (!cl->clock_bad || cl->retimed >= RETIMES)
				return 0;
			if (retime(j, cl, digests) != 0)
				return -1;
		} else if (ship_inputs(j, cl, digests) != 0) {
			return -1;
		}
	}
}

/* How the judged loop (its reply borrowed) was timed, for the record's "method". */
static void timing_method(const struct job *j, jv reply, char *how, size_t size)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	char *clock_kind = ca_json_strdup(reply, "clock");
	int events = clock_kind && !strcmp(clock_kind, "cuda-events");
	int window = clock_kind && !strcmp(clock_kind, "cupti-window");
	free(clock_kind);
	const char *inputs_how = !j->ship ? "inputs drawn afresh under their own seed before every call"
		: j->nship < cfg->iters ? "inputs shipped as files, each timed call's shown to the worker at its turn, cycled"
		: "inputs shipped as files, a file for every timed call, each shown to the worker at its turn";
	snprintf(how, size, "%s; %s", window
		? "the call's device window from CUPTI (first kernel, copy or memset to the last one's end, on any stream), "
		  "at least the host's time to the call's return (CUDA events' span where CUPTI missed work); L2 flushed"
		: events
		? "CUDA events on the current stream around the call, plus the device-wide synchronize's wait beyond an idle one; L2 flushed"
		: "host clock around the call", inputs_how);
}

/*
 * The judged loop's numbers into the result: the reported median (as
 * candidate_us, until a check fails), the method, the kernels CUPTI saw,
 * our clock's time per call and what the loop was held to. *median,
 * *kernel_us, *nbad and *bad_names are for the verdict.
 */
static void note_timing(struct job *j, const struct candidate_loop *cl, double *median, double *kernel_us, int *nbad,
		jv *bad_names)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	double cv = 0, host_us = NAN;
	ca_json_number(cl->reply, "median_us", median);
	ca_json_number(cl->reply, "cv", &cv);
	ca_json_number(cl->reply, "host_median_us", &host_us);
	char how[512];
	timing_method(j, cl->reply, how, sizeof how);
	j->result = set_num(j->result, "candidate_us", *median);
	j->result = set_num(j->result, "cv", cv);
	j->result = set_num(j->result, "host_us", host_us);
	j->result = jv_object_set(j->result, jv_string("iterations"), jv_number(cfg->iters));
	j->result = jv_object_set(j->result, jv_string("warmup"), jv_number(cfg->warmup));
	/* Distinct input sets the loop saw: one per call when drawn; shipped, the files. */
	int nsets = j->ship ? ship_warm(j) + j->nship : loop_sets(j);
	j->result = jv_object_set(j->result, jv_string("input_sets"), jv_number(nsets));
	j->result = set_str(j->result, "method", how);
	jv kl = ca_json_get(cl->reply, "kernels");
	/* Device time of every kernel CUPTI saw in the timed calls (the loop's L2 flushes taken out by the worker). */
	*kernel_us = kernel_sum_us(kl) / cfg->iters;
	j->result = set_num(j->result, "kernel_us", *kernel_us > 0 ? *kernel_us : NAN);
	j->result = jv_object_set(j->result, jv_string("kernels"), top_kernels(kl, cfg->top, nbad, bad_names));
	jv_free(kl);

	/* Our own clock's time per call: the median call between ticks, which one slow call cannot move. */
	j->result = set_num(j->result, "wall_us", isfinite(cl->call_us) ? cl->call_us : cl->wall_per_call);
	/* What the judged loop was held to: the numbers behind a timing verdict. */
	jv clock = jv_object();
	clock = set_num(clock, "min_reported_us", cl->bound_us);
	clock = set_num(clock, "overhead_call_us", cl->overhead.call * 1e6);
	clock = set_num(clock, "overhead_ready_us", cl->overhead.ready * 1e6);
	clock = set_num(clock, "overhead_inputs_us", cl->overhead.inputs * 1e6);
	clock = jv_object_set(clock, jv_string("loops"), jv_number(cl->retimed + 1));
	if (cl->burst.calls > 0) {
		jv burst = jv_object_set(jv_object(), jv_string("calls"), jv_number(cl->burst.calls));
		burst = set_num(burst, "reference_ms", cl->burst.ref_s * 1e3);
		burst = set_num(burst, "candidate_ms", cl->burst.cand_s * 1e3);
		burst = set_num(burst, "implied_us", cl->burst.implied_us);
		burst = set_num(burst, "min_reported_us", cl->burst.bound_us);
		clock = jv_object_set(clock, jv_string("burst"), burst);
	}
	j->result = jv_object_set(j->result, jv_string("clock"), clock);
}

/*
 * Whether a call that must be spot-checked is not among the outputs the
 * worker kept (kept borrowed): chosen by us after the loop when the
 * worker kept every call's output (after), else the ones named before it.
 */
static int kept_missing(const struct job *j, const struct candidate_loop *cl, jv kept, int nkept, int after)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	char *required = ca_xcalloc((size_t)cfg->iters, 1);
	if (after) {
		for (int k = 0; k < cl->ours.nasked; k++)
			required[cl->ours.asked[k]] = 1;
	} else {
		jv_array_foreach(cl->named, k, x) {
			(void)k;
			required[(int)jv_number_value(x)] = 1;
			jv_free(x);
		}
	}
	for (int i = 0; i < nkept; i++) {
		jv e = jv_array_get(jv_copy(kept), i);
		double index = -1;
		ca_json_number(e, "index", &index);
		jv_free(e);
		if (index >= 0 && index < cfg->iters)
			required[(int)index] = 0;
	}
	int missing = 0;
	for (int i = 0; i < cfg->iters; i++)
		missing |= required[i];
	free(required);
	return missing;
}

/*
 * Whether the output of timed call index, written after the loop (got),
 * is the one whose digest came with its tick while our clock ran
 * (missing ticks fail the clock check), so its work cannot be left for
 * after the loop, when the checked calls are known. 0, or -1 with the
 * record failed.
 */
static int kept_as_ticked(struct job *j, const struct loop_clock *ours, int index, const char *got)
{
	double mine[3] = {0, 0, 0}, none[3] = {NAN, NAN, NAN};
	const double *theirs = index < ours->nticks ? ours->digests[index] : none;
	int readable = file_digest(got, mine) == 0;
	int finite = isfinite(mine[0]) && isfinite(mine[1]) && isfinite(mine[2]);  /* else the comparison rejects it */
	if (readable && finite && !digest_agrees(mine, theirs)) {
		char msg[512];
		snprintf(msg, sizeof msg, "timed call %d: the output written after the loop (digest %.17g, %.17g, %.17g: "
			"sum, sum of magnitudes, sum of squares) is not the one its tick described while the clock ran "
			"(%.17g, %.17g, %.17g)", index, mine[0], mine[1], mine[2], theirs[0], theirs[1], theirs[2]);
		job_fail(j, "spot-check", msg);
		return -1;
	}
	return 0;
}

/* Spot check entry i of the outputs kept (kept borrowed) against the reference's. 0, or -1 with the record failed. */
static int spot_check(struct job *j, const struct candidate_loop *cl, jv kept, int i, int after)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	jv e = jv_array_get(jv_copy(kept), i);
	double set = -1, index = -1;
	ca_json_number(e, "set", &set);
	ca_json_number(e, "index", &index);
	jv_free(e);
	if (!(set >= 0 && set < loop_sets(j)) || !(index >= 0 && index < cfg->iters)) {
		job_fail(j, "spot-check", "bad kept-output entry from the candidate worker");
		return -1;
	}
	/*
	 * The inputs are ours to know: timed call i is call warmup + i of
	 * the loop, drawn under that call's seed or, shipped, set
	 * (warmup + i) % sets.
	 */
	int call = cfg->warmup + (int)index;
	char ref[PATHLEN], got[PATHLEN];
	snprintf(ref, sizeof ref, "%s/tref-call-%d.ten", s->trusted, call);
	snprintf(got, sizeof got, "%s/kept-%d.ten", j->io, (int)index);
	if (after && cl->ours.nticks == cfg->iters && kept_as_ticked(j, &cl->ours, (int)index, got) != 0)
		return -1;
	/* The reference's output for this call, now that it is known to be checked. */
	jv ref_reply;
	if (reference_on_call(j, (int)index, ref, &ref_reply) != 0)
		return -1;
	jv_free(ref_reply);
	struct ca_compare_result cr;
	int c = ca_compare_files(ref, got, &cfg->tol, &cr);
	unlink(ref);
	if (c != 1) {
		char msg[800];
		snprintf(msg, sizeof msg, "timed call %d: %s", (int)index, cr.message);
		job_fail(j, c < 0 ? "reference" : "spot-check", msg);
		return -1;
	}
	return 0;
}

/*
 * Spot checks of timed calls' outputs: those the worker kept (kept,
 * borrowed), which must include the ones asked for, compared with the
 * reference's; with the checks named before the loop, others by the
 * digests the ticks carried. 0 when they pass, else -1 with the record
 * failed.
 */
static int spot_checks(struct job *j, const struct candidate_loop *cl, jv kept)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	int nkept = jv_get_kind(kept) == JV_KIND_ARRAY ? jv_array_length(jv_copy(kept)) : 0;
	char *chosen = ca_json_strdup(cl->reply, "kept_chosen");
	int after = chosen && !strcmp(chosen, "after") && cl->ours.nasked > 0;
	free(chosen);
	j->result = set_str(j->result, "spot_checks_chosen", after ? "after" : "before");
	if (kept_missing(j, cl, kept, nkept, after)) {
		job_fail(j, "spot-check", "the candidate worker did not return the outputs of the timed calls asked for");
		return -1;
	}
	for (int i = 0; i < nkept; i++)
		if (spot_check(j, cl, kept, i, after) != 0)
			return -1;
	if (!after && cl->ours.nticks == cfg->iters &&
	    digest_spot_checks(j, &cl->ours, cl->named) != 0)
		return -1;
	return 0;
}

/*
 * The verdicts on the time once the outputs passed: no torch fallback in
 * the timed calls (bad_names borrowed), our clock's, and the kernels'
 * time. 0 when all pass, else -1 with the record failed.
 */
static int timing_verdict(struct job *j, const struct candidate_loop *cl, double median, double kernel_us, int nbad,
		jv bad_names)
{
	if (nbad && !j->slot->cfg->allow_torch) {
		char msg[1024];
		jv first = jv_array_get(jv_copy(bad_names), 0);
		snprintf(msg, sizeof msg, "torch fallback in timed calls: %d ATen/torch.compile kernel%s ran, e.g. %.400s",
			nbad, nbad == 1 ? "" : "s", jv_string_value(first));
		jv_free(first);
		job_fail(j, "policy", msg);
		return -1;
	}
	if (cl->clock_bad) {
		job_fail(j, "timing", cl->clock_msg);
		return -1;
	}
	/*
	 * A second witness, from the device: the kernels CUPTI saw. Kernels on
	 * several streams may overlap, so their sum can exceed the time of an
	 * honest call; an eighth of it cannot.
	 */
	if (kernel_us > 0 && median < kernel_us / 8 - 20) {
		char msg[256];
		snprintf(msg, sizeof msg, "self-reported %.1f us per call, but the GPU kernels of the timed calls "
			"ran %.1f us per call: the timer was tampered with", median, kernel_us);
		job_fail(j, "timing", msg);
		return -1;
	}
	return 0;
}

/*
 * ca-profile's timing of a loaded candidate: the loops' inputs, the
 * baselines, the candidate's loop until one is judged, then its numbers,
 * the spot checks and the verdicts, into j->result.
 */
void do_profile(struct job *j)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	jv digests = jv_array();
	if (j->ship)  /* --verify found the candidate's draws differ */
		j->result = jv_object_set(j->result, jv_string("inputs_shipped"), jv_true());
	draw_seeds(j);
	slot_pick_cpu(s);
	if (profile_sets(j, &digests) != 0) {
		jv_free(digests);
		return;
	}
	job_phase(j, "inputs");
	struct candidate_loop cl = {.ours = {0}};
	if (profile_baselines(j, &cl.overhead) != 0) {
		jv_free(digests);
		return;
	}
	job_phase(j, "baselines");

	cl.ours.want = cfg->keep;
	cl.ours.iters = cfg->iters;
	cl.wall_per_call = cl.call_us = cl.bound_us = NAN;
	cl.reply = jv_invalid();
	/* The calls to check named before the loop: what a worker that cannot keep every output writes. */
	cl.named = keep_indices(cfg, j->seed ^ 0x5eed);
	int rc = time_candidate(j, &cl, &digests);
	jv_free(digests);
	if (rc != 0) {
		jv_free(cl.named);
		loop_clock_free(&cl.ours);
		return;
	}
	job_phase(j, "candidate");
	/*
	 * This record's timing is over: the next record's candidate starts
	 * now, beside the spot checks, not once this record is released. A
	 * start takes 2.2 s on the H200, and a timed loop waits for every
	 * start to finish (quiet_loop_begin): in a stream of four, records
	 * 2-4 waited 0.9-1.2 s each for the spare started at release.
	 */
	if (!cfg->adhoc && more_records(s))
		spare_start(s);
	double median = 0, kernel_us = 0;
	int nbad = 0;
	jv bad_names = jv_array();
	note_timing(j, &cl, &median, &kernel_us, &nbad, &bad_names);
	jv kept = ca_json_get(cl.reply, "kept");
	int judged = spot_checks(j, &cl, kept) == 0 && timing_verdict(j, &cl, median, kernel_us, nbad, bad_names) == 0;
	job_phase(j, "spot_checks");
	if (judged && confirm_baselines(j, median) == 0)
		j->result = jv_object_set(j->result, jv_string("ok"), jv_true());
	if (ca_json_bool(j->result, "ok") != 1)
		distrust_reported_time(j);
	if (judged)
		job_phase(j, "baselines_again");
	loop_clock_free(&cl.ours);
	jv_free(cl.named);
	jv_free(cl.reply);
	jv_free(kept);
	jv_free(bad_names);
}
