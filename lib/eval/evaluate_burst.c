/*
 * evaluate_burst: a second clock on the candidate's time, ours alone.
 *
 * The timed loop's verdict (clock_verdict) holds the reported median to
 * half of what our clock saw between the worker's lines, less the
 * reference's loop work around each call. That work (flush, digests,
 * copies, the lines themselves) is noisy, so the half is needed, and a
 * clock patched to report two thirds of the truth passed it (on the
 * H200 a matmul reported 1788 us for 2685, judged against 1443).
 *
 * A burst sends no line between calls: N calls back to back, each with
 * its draw, L2 flush, one synchronize and the sums of its output, and
 * the whole request clocked from here (see ca_runner's Worker.op_burst).
 * The reference and the candidate run it on the same fresh inputs,
 * ROUNDS times in turn, and each role's fastest burst is kept (a busy
 * moment only lengthens one). The two differ by N times
 * the difference of their calls, with the loop's own work alike in both,
 * so the candidate's call takes the reference's reported time plus
 * (candidate - reference) / N, and its reported median may fall short of
 * that by the tolerance only. Every burst's outputs are checked against
 * the reference's on the same inputs by their digests, so no call can be
 * skipped.
 *
 * On a GPU only: on the CPU the loop's own work per call (draws and sums
 * of the inputs and outputs, milliseconds of Python and torch on a shared
 * CPU) varied between bursts of one candidate by more than its calls
 * (relu_mid on a 2-core machine: 9 to 49 ms implied for a 24 ms call).
 * There $CA_EVAL_CPU_BURSTS runs them for the tests, outputs checked,
 * times kept and not judged.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "evaluate_impl.h"
#include "json.h"
#include "proc.h"

#define ROUNDS 3
#define MAX_CALLS 64

/*
 * What an honest candidate's reported median may fall short of the
 * implied time by: a fraction of it and some microseconds. A burst is
 * host-bound where calls are short, so a candidate's launch path (its
 * Python, ctypes) counts there and not in its device window: on the
 * H200, honest candidates reported 0.81-1.0 of the implied time, and
 * 57 us against 83 on a 60 us call (t0150, relu_pos).
 */
#define TOL 0.2
#define ABS_US 50.0

/*
 * How many calls a burst makes: enough for about 50 ms of the reference's
 * work, so that the request's own cost and its noise are small per call;
 * 4 to MAX_CALLS.
 */
static int burst_calls(const struct loop_overhead *ref, double eager_us)
{
	double per = (isfinite(eager_us) ? eager_us * 1e-6 : 0) + (isfinite(ref->ready) ? ref->ready : 0) +
		(isfinite(ref->inputs) ? ref->inputs : 0);
	int n = per > 0 ? (int)ceil(0.05 / per) : 4;
	return n < 4 ? 4 : n > MAX_CALLS ? MAX_CALLS : n;
}

/* The burst's request for one role: its seeds, or the files it reads. */
static jv burst_request(const struct job *j, const unsigned long long *seeds, int n, int cand)
{
	jv keys = jv_array();
	for (int k = 0; k < n; k++) {
		char path[PATHLEN];
		if (!j->ship) {
			keys = jv_array_append(keys, jv_number((double)seeds[k]));
			continue;
		}
		if (cand)
			snprintf(path, sizeof path, "%s/tin-b-%d.ten", j->io, k);
		else
			ship_path(j, "b", k, path, sizeof path);
		keys = jv_array_append(keys, jv_string(path));
	}
	jv req = jv_object_set(set_str(jv_object(), "op", "burst"), jv_string(j->ship ? "inputs" : "seeds"), keys);
	/* The reference's read of the files we wrote is checked against what we wrote. */
	return with_cpu(j->slot, jv_object_set(req, jv_string("in_digests"), jv_bool(j->ship && !cand)));
}

/*
 * Shipped inputs: the reference writes each call's file (digests into
 * *written) and the candidate is shown a copy (not a link: what it writes
 * there must not reach the reference's). 0, or -1 with the record failed.
 */
static int burst_ship(struct job *j, const unsigned long long *seeds, int n, jv *written)
{
	gpu_lock(j->slot, LOCK_SH);
	int rc = 0;
	for (int k = 0; k < n && rc == 0; k++) {
		char from[PATHLEN], to[PATHLEN], why[512];
		ship_path(j, "b", k, from, sizeof from);
		snprintf(to, sizeof to, "%s/tin-b-%d.ten", j->io, k);
		rc = ship_write(j, seeds[k], from, written);
		unlink(to);
		if (rc == 0 && reveal_copy(from, to) != 0) {
			job_fail(j, placing_failed(j->cand.dir, errno, "a burst's shipped inputs", why, sizeof why), why);
			rc = -1;
		}
	}
	gpu_lock(j->slot, LOCK_UN);
	return rc;
}

static void burst_unship(const struct job *j, int n)
{
	for (int k = 0; k < n && j->ship; k++) {
		char path[PATHLEN];
		ship_path(j, "b", k, path, sizeof path);
		unlink(path);
		snprintf(path, sizeof path, "%s/tin-b-%d.ten", j->io, k);
		unlink(path);
	}
}

/* The reference's burst (reference_loop's run): its request, timed on our clock. */
struct ref_burst {
	const unsigned long long *seeds;
	int n;
	double *secs;
};

static int ref_burst_run(struct job *j, void *arg, jv *reply)
{
	struct ref_burst *b = arg;
	double timeout = j->slot->cfg->timeout_s * 10, t0 = ca_proc_now();
	jv why;
	if (reference_send(j, burst_request(j, b->seeds, b->n, 0), timeout) != 0)
		return -1;
	int rc = reference_answer(j, timeout, reply, &why);
	*b->secs = ca_proc_now() - t0;
	if (rc > 0)
		*reply = why;  /* reference_loop runs the burst again */
	return rc;
}

/* One role's burst on our clock: the seconds into *secs. 0, or -1 with the record failed. */
static int burst_run(struct job *j, const unsigned long long *seeds, int n, int cand, double *secs, jv *reply)
{
	if (!cand) {
		struct ref_burst b = {seeds, n, secs};
		return reference_loop(j, ref_burst_run, &b, reply);
	}
	timed_loop_begin(j->slot);
	worker_wake(&j->cand);
	double t0 = ca_proc_now();
	int rc = candidate_call(j, burst_request(j, seeds, n, 1), j->slot->cfg->timeout_s * 10, reply, NULL);
	*secs = (rc == 0 ? j->cand.replied_at : ca_proc_now()) - t0;
	timed_loop_end(j->slot);
	return rc;
}

/* Entry k of the digests of reply (digest_from); the count of entries. */
static int digest_at(jv reply, int k, double d[DIGEST_LEN])
{
	jv a = ca_json_get(reply, "digests");
	int n = jv_get_kind(a) == JV_KIND_ARRAY ? jv_array_length(jv_copy(a)) : 0;
	jv e = k < n ? jv_array_get(jv_copy(a), k) : jv_invalid();
	digest_from(e, d);
	jv_free(e);
	jv_free(a);
	return n;
}

/*
 * The candidate's burst against the reference's on the same inputs:
 * every output's digest within tolerance (inputs the candidate drew
 * otherwise give other outputs) and, shipped, the reference's inputs
 * those we wrote. 0, or -1 with the record failed.
 */
static int burst_agrees(struct job *j, jv ref, jv cand, jv written, int n)
{
	for (int k = 0; k < n; k++) {
		jv want = j->ship ? jv_array_get(jv_copy(written), k) : jv_null();
		int same = !j->ship || digest_matches(ref, "in_digests", k, want);
		jv_free(want);
		if (!same) {
			char msg[256];
			snprintf(msg, sizeof msg, "burst call %d: its shipped inputs were changed", k);
			job_fail(j, "spot-check", msg);
			return -1;
		}
		double r[DIGEST_LEN], c[DIGEST_LEN], numel = NAN;
		digest_at(ref, k, r);
		if (digest_at(cand, k, c) != n) {
			job_fail(j, "spot-check", "the candidate worker's burst did not digest every call");
			return -1;
		}
		jv ne = jv_array_get(ca_json_get(ref, "numel"), k);
		if (jv_get_kind(ne) == JV_KIND_NUMBER)
			numel = jv_number_value(ne);
		jv_free(ne);
		if (!(isfinite(r[0]) && isfinite(r[1]) && isfinite(r[2]) && isfinite(numel)))
			continue;  /* a reference output that is not finite cannot be judged this way */
		if (!digest_within(&j->slot->cfg->tol, r, numel, c)) {
			char msg[1024], ct[384], rt[384];
			digest_text(c, ct, sizeof ct);
			digest_text(r, rt, sizeof rt);
			snprintf(msg, sizeof msg, "burst call %d: the output's digest (%s) is not within tolerance of the "
				"reference's on the same inputs (%s, over %.0f elements)", k, ct, rt, numel);
			job_fail(j, "spot-check", msg);
			return -1;
		}
	}
	return 0;
}

/*
 * Time ROUNDS bursts of each role on fresh inputs, each role's fastest
 * into b. 0, or -1 with the record
 * failed (a worker's fault, or outputs that disagree).
 */
int burst_time(struct job *j, const struct loop_overhead *ref, struct burst *b)
{
	double eager_us = NAN;
	ca_json_number(j->result, "eager_us", &eager_us);
	int n = burst_calls(ref, eager_us);
	unsigned long long seeds[MAX_CALLS];
	for (int k = 0; k < n; k++)
		seeds[k] = fresh_seed();
	*b = (struct burst){n, INFINITY, INFINITY, NAN, NAN};
	jv written = jv_array();
	int rc = j->ship ? burst_ship(j, seeds, n, &written) : 0;
	for (int r = 0; r < ROUNDS && rc == 0; r++) {
		double rs = 0, cs = 0;
		jv rr = jv_invalid(), cr = jv_invalid();
		/* The reference first in even rounds, the candidate in odd: neither always follows an idle moment. */
		int first = r % 2;
		rc = burst_run(j, seeds, n, first, first ? &cs : &rs, first ? &cr : &rr);
		if (rc == 0)
			rc = burst_run(j, seeds, n, !first, first ? &rs : &cs, first ? &rr : &cr);
		if (rc == 0)
			rc = burst_agrees(j, rr, cr, written, n);
		if (jv_is_valid(rr))
			jv_free(rr);
		if (jv_is_valid(cr))
			jv_free(cr);
		if (rc == 0) {  /* a burst that failed is no time */
			b->ref_s = rs < b->ref_s ? rs : b->ref_s;
			b->cand_s = cs < b->cand_s ? cs : b->cand_s;
		}
	}
	burst_unship(j, n);
	jv_free(written);
	return rc;
}

/*
 * The bursts' verdict on the reported median (b's implied time and bound
 * filled): 0 when it is plausible, else -1 with the reason in msg.
 */
int burst_verdict(struct burst *b, double reported_us, double eager_us, char *msg, size_t size)
{
	if (!(b->calls > 0 && isfinite(b->ref_s) && isfinite(b->cand_s) && isfinite(eager_us)))
		return 0;
	b->implied_us = eager_us + (b->cand_s - b->ref_s) / b->calls * 1e6;
	b->bound_us = (1 - TOL) * b->implied_us - ABS_US;
	if (!(reported_us < b->bound_us))
		return 0;
	snprintf(msg, size, "self-reported %.1f us per call, but %d calls back to back took %.3f ms on our clock against "
		"the reference's %.3f ms on the same inputs (%.1f us per call), which implies %.1f us: the timer was tampered with",
		reported_us, b->calls, b->cand_s * 1e3, b->ref_s * 1e3, eager_us, b->implied_us);
	return -1;
}
