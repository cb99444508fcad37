/*
 * evaluate_again: a reference request that failed beside the candidate,
 * asked again to find whose the failure is.
 *
 * The reference shares the machine with the record's candidate: the
 * GPU's memory above all. A candidate that takes nearly all of it at
 * import (and keeps it: stopped between our requests, its memory stays
 * held) makes the reference run out of memory in the very first check.
 * Recorded as the reference's failure, that is an evaluator fault and a
 * reward of null, where its wrong outputs would have earned -1: a policy
 * learns to hold the memory whenever it is unsure. So a request the
 * reference answered with a failure (it ran and raised: out of memory,
 * say), while this record's candidate is alive, is asked again:
 *
 *   1. beside the candidate as it is: passing now, the failure came and
 *      went (a neighbour's peak, or a candidate that lets go of what it
 *      held), and the record goes on with this reply;
 *   2. failing again, with the candidate killed (its memory, its CUDA
 *      context and what it queued go with it; asked until it passes, for
 *      a few seconds, while the driver frees them): passing now, the failure
 *      was the candidate's doing and its record fails (stage "run");
 *      failing still, it is the reference's, as before (stage
 *      "reference", an evaluator fault).
 *
 * On a GPU step 2 blames the candidate only when killing it freed more
 * than the request needs twice over (at least 1 GiB): a candidate using
 * about what the reference uses, on a GPU that neighbours fill, is not
 * the cause; nor is anyone while a candidate of another slot is running
 * (its load is not under our control), as in evaluate_idle.c.
 *
 * The same holds for the timed loops of its baselines (a correct
 * candidate's null would leave it out of a group whose other answers
 * are faster: better than its 1), each try a whole loop with the GPU
 * quiet and idle (reference_loop).
 *
 * So does a reference that died or did not answer in time beside the
 * candidate (reference_gone): a candidate that keeps the machine from it
 * (its CPUs, the GPU's time) would otherwise earn the null of a
 * reference that timed out. Before each try it is started afresh and
 * given the record's model again (reference_revive: the task, at the
 * sizes --shapes gave it, its weights checked to be those the candidate
 * loaded). One that did not answer blames the candidate only when, with
 * it killed, it answers within half its limit: a reference that is
 * merely near its limit stays the evaluator's fault.
 *
 * A reference that ran out of disk where the candidate's own files fill
 * half of it or more is not asked either: the candidate filled it
 * (candidate_filled_disk in evaluate_files.c), stage "run".
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "evaluate_impl.h"
#include "hash.h"
#include "json.h"
#include "proc.h"

enum { GIB = 1 << 30 };

/*
 * How long after the candidate's death its memory may take to be free
 * (t0150 on an H100: asked at once, the reference still found the 77.6
 * GiB cheat/starve took in use).
 */
enum { FREED_WAIT_S = 5 };

/* A request to ask again: the request, and how long its answer may take. */
struct request {
	jv req;
	double timeout;
};

/* Send the request again (with "mem": reference_send); as reference_answer. */
static int ask(struct job *j, void *arg, jv *reply, jv *why)
{
	struct request *r = arg;
	*why = jv_invalid();
	if (reference_send(j, jv_copy(r->req), r->timeout) != 0)
		return -1;
	return reference_answer(j, r->timeout, reply, why);
}

/*
 * Whether the candidate's death freed what the reference lacked: the
 * GPU's free memory before the request beside it (beside, its failure)
 * and after its death (alone, the reply that passed) differ by at least
 * twice what the request reserved at its peak, and 1 GiB. On the CPU
 * (no such numbers) its death is the only change: yes. The amounts go in
 * held_gib and need_gib (-1 when not known).
 */
static int freed_enough(jv beside, jv alone, double *held_gib, double *need_gib)
{
	double before = 0, after = 0, peak = 0;
	*held_gib = *need_gib = -1;
	if (ca_json_number(beside, "gpu_free", &before) != 1 || ca_json_number(alone, "gpu_free", &after) != 1 ||
	    ca_json_number(alone, "gpu_peak", &peak) != 1)
		return 1;
	*held_gib = (after - before) / GIB;
	*need_gib = peak / GIB;
	return after - before >= 2 * peak && after - before >= GIB;
}

/*
 * The reference's failure (why, consumed) recorded as its own, with what
 * asking again found (how, printf-style) after its error: a record that
 * blames the evaluator says why the candidate was not blamed.
 */
static void reference_kept(struct job *j, jv why, const char *how, ...)
{
	char *error = ca_json_strdup(why, "error"), note[256], msg[1024];
	va_list ap;
	va_start(ap, how);
	vsnprintf(note, sizeof note, how, ap);
	va_end(ap);
	snprintf(msg, sizeof msg, "%.700s (asked again: %s)", error ? error : "unknown failure", note);
	free(error);
	reference_failed(j, jv_object_set(why, jv_string("error"), jv_string(msg)));
}

/*
 * A reference that ran out of disk (why, its failure, borrowed) on a disk
 * the candidate filled (candidate_filled_disk): the record fails as the
 * candidate's (stage "run"), 1. Asking again would find the disk as full.
 */
static int filled_disk(struct job *j, jv why)
{
	char *error = ca_json_strdup(why, "error"), filled[256], msg[1024];
	int err = !error ? 0 : strstr(error, strerror(ENOSPC)) ? ENOSPC : strstr(error, strerror(EDQUOT)) ? EDQUOT : 0;
	int yes = err && candidate_filled_disk(j->cand.dir, err, filled, sizeof filled);
	if (yes) {
		snprintf(msg, sizeof msg, "the reference failed (%.400s): %s", error, filled);
		job_fail(j, "run", msg);
	}
	free(error);
	return yes;
}

/*
 * The requests that made the reference's model (j->ref_state), req
 * (consumed) the newest, answered in seconds: a "task" starts them over,
 * a "resize" to other sizes follows the task, one back to the task's own
 * (sizes null) leaves the task alone.
 */
void reference_state(struct job *j, jv req, double seconds)
{
	char *op = ca_json_strdup(req, "op");
	jv sizes = ca_json_get(req, "sizes");
	jv made = jv_object_set(jv_object_set(jv_object(), jv_string("req"), req), jv_string("s"), jv_number(seconds));
	if (op && !strcmp(op, "task")) {
		jv_free(j->ref_state);
		j->ref_state = JV_ARRAY_1(made);
	} else if (jv_is_valid(j->ref_state)) {
		jv task = jv_array_get(j->ref_state, 0);
		if (jv_get_kind(sizes) == JV_KIND_NULL) {
			jv_free(made);
			j->ref_state = JV_ARRAY_1(task);
		} else {
			j->ref_state = JV_ARRAY_2(task, made);
		}
	} else {
		jv_free(made);
	}
	jv_free(sizes);
	free(op);
}

/* Whether a failure (borrowed) is of this stage: "timeout", "crash". */
static int stage_is(jv fault, const char *name)
{
	char *stage = ca_json_strdup(fault, "stage");
	int yes = stage && !strcmp(stage, name);
	free(stage);
	return yes;
}

/*
 * A reference that died or did not answer (fault, consumed) while this
 * record's candidate runs, or while a failure is asked again: 1 with *why
 * the fault, to be asked again as a failure is (started afresh first).
 * Otherwise (its model not yet made, the candidate gone, or a broken
 * protocol) the reference's fault is recorded: -1.
 */
int reference_gone(struct job *j, jv fault, jv *why)
{
	int again = (stage_is(fault, "timeout") || stage_is(fault, "crash")) && jv_is_valid(j->ref_state) &&
		(j->ask_mem || j->cand.run.running);
	*why = jv_invalid();
	if (!again) {
		reference_failed(j, fault);
		return -1;
	}
	*why = fault;
	return 1;
}

/* Whether two files hold the same bytes (the same SHA-256). */
static int same_content(const char *a, const char *b)
{
	struct ca_sha256 sa, sb;
	unsigned char da[32], db[32];
	ca_sha256_init(&sa);
	ca_sha256_init(&sb);
	if (ca_hash_file(&sa, a) != 0 || ca_hash_file(&sb, b) != 0)
		return 0;
	ca_sha256_final(&sa, da);
	ca_sha256_final(&sb, db);
	return !memcmp(da, db, sizeof da);
}

/*
 * Make the reference's model again in a reference started afresh (made,
 * borrowed, an entry of j->ref_state: the request and the seconds it took
 * then), writing its weights and init inputs beside ours: they must be
 * the ones the candidate was given, or the model would judge it by other
 * numbers. It may take what the checks may, or thrice what it took then.
 * 0, or 1 with *why.
 */
static int remake(struct job *j, jv made, jv *why)
{
	struct slot *s = j->slot;
	static const char *const outs[2] = {"weights_out", "init_out"};
	char *was[2], now[2][PATHLEN], *error = NULL;
	double then = 0, limit = 4 * s->cfg->timeout_s;
	jv req = ca_json_get(made, "req"), reply;
	ca_json_number(made, "s", &then);
	if (limit < 3 * then + 10)
		limit = 3 * then + 10;
	if (limit > s->cfg->load_timeout_s)
		limit = s->cfg->load_timeout_s;
	for (int k = 0; k < 2; k++) {
		was[k] = ca_json_strdup(req, outs[k]);
		snprintf(now[k], sizeof now[k], "%s/again-%s.ten", s->trusted, outs[k]);
		req = set_str(req, outs[k], now[k]);
	}
	gpu_lock(s, LOCK_SH);
	int rc = worker_call(&s->reference, req, limit, &reply, why, NULL) != 0;
	gpu_lock(s, LOCK_UN);
	if (!rc && ca_json_bool(reply, "ok") != 1) {
		*why = reply;
		rc = 1;
	} else if (!rc) {
		jv_free(reply);
		for (int k = 0; k < 2; k++)
			if (!error && (!was[k] || !same_content(was[k], now[k])))
				error = k ? "its init inputs came out other than those the candidate was given"
					: "its weights came out other than those the candidate was given";
		if (error) {
			*why = set_str(set_str(jv_object(), "stage", "reference"), "error", error);
			rc = 1;
		}
	}
	for (int k = 0; k < 2; k++) {
		unlink(now[k]);
		free(was[k]);
	}
	return rc;
}

/*
 * A reference that is gone, started afresh with the record's model
 * (j->ref_state). 0 (also when it is running), or 1 with *why: one that
 * cannot be is a try that failed.
 */
static int reference_revive(struct job *j, jv *why)
{
	struct slot *s = j->slot;
	if (s->reference.run.running)
		return 0;
	int rc = reference_ready(s, why) != 0;
	for (int i = 0; !rc && i < jv_array_length(jv_copy(j->ref_state)); i++) {
		jv made = jv_array_get(jv_copy(j->ref_state), i);
		rc = remake(j, made, why);
		jv_free(made);
	}
	if (rc) {
		/* Killed wherever it stopped: the next try, or the next record, starts it again. */
		worker_stop(&s->reference, 0);
		char *error = ca_json_strdup(*why, "error"), msg[1024];
		snprintf(msg, sizeof msg, "started again to be asked again: %.900s", error ? error : "unknown failure");
		free(error);
		*why = set_str(*why, "error", msg);
	}
	return rc;
}

/*
 * A try (once), the reference started afresh first when it is gone; as
 * again_try. The try's own seconds (not the start's) in *took.
 */
static int try_again(struct job *j, again_try *once, void *arg, jv *reply, jv *why, double *took)
{
	*reply = *why = jv_invalid();
	*took = 0;
	if (reference_revive(j, why) != 0)
		return 1;
	double t0 = ca_proc_now();
	int rc = once(j, arg, reply, why);
	*took = ca_proc_now() - t0;
	return rc;
}

/*
 * What failed with why (consumed), tried again by once as above. 0 with
 * *reply when it passed beside the candidate; -1 with the record failed,
 * the reference's failure or the candidate's.
 */
int reference_again_with(struct job *j, again_try *once, void *arg, jv why, jv *reply)
{
	jv beside = jv_invalid(), alone = jv_invalid();
	int rc = -1;
	*reply = jv_invalid();
	if (filled_disk(j, why))
		goto out;
	if (!j->cand.run.running) {
		reference_kept(j, jv_copy(why), "not, the candidate was gone");
		goto out;
	}
	j->ask_mem = 1;
	double took = 0;
	int again = try_again(j, once, arg, reply, &beside, &took);
	if (again <= 0) {
		rc = again;  /* passed now (0), or the reference is gone, recorded (-1) */
		goto out;
	}
	int mine = j->cand.hold && !j->cand.held;  /* ours, running its own request of this check */
	if (candidates_running(j->slot->gpu) > mine) {
		/* A candidate of another slot is running: whose the failure is cannot be told. */
		reference_kept(j, jv_copy(why), "it failed beside the candidate, and a candidate of another slot was running");
		goto out;
	}
	worker_stop(&j->cand, 0);
	/* Its memory goes with its CUDA context, a moment after its death: asked until it passes, FREED_WAIT_S. */
	double until = ca_proc_now() + FREED_WAIT_S;
	int tries = 1;
	for (;; tries++) {
		again = try_again(j, once, arg, reply, &alone, &took);
		if (again <= 0 || ca_proc_now() >= until)
			break;
		jv_free(alone);
		alone = jv_invalid();
		usleep(200 * 1000);
	}
	if (again < 0)
		goto out;
	double held = -1, need = -1, limit = j->slot->reference.limit_s;
	if (again > 0) {
		reference_kept(j, jv_copy(why), "it failed beside the candidate and %d time(s) over %d s with the candidate "
			"killed", tries, FREED_WAIT_S);
		goto out;
	}
	if (stage_is(why, "timeout") && took > limit / 2) {
		reference_kept(j, jv_copy(why), "it did not answer beside the candidate, and with the candidate killed "
			"answered in %.1f s, more than half its %g s: too near its limit to blame the candidate", took, limit);
		goto out;
	}
	if (!freed_enough(beside, *reply, &held, &need)) {
		reference_kept(j, jv_copy(why), "it failed beside the candidate and passed with it killed, whose death "
			"freed %.1f GiB of the GPU's memory; the request needs %.1f GiB, at least 1 GiB and twice that "
			"blame the candidate", held, need);
		goto out;
	}
	char *error = ca_json_strdup(why, "error"), msg[1024], amounts[128] = "";
	if (held >= 0)
		snprintf(amounts, sizeof amounts, " (its death freed %.1f GiB of the GPU's memory; the request needs %.1f GiB)",
			held, need);
	snprintf(msg, sizeof msg, "the reference failed beside the candidate (%.400s), again with the candidate stopped, "
		"and passed once it was killed%s: the candidate kept from the reference what it needs to run",
		error ? error : "unknown failure", amounts);
	free(error);
	job_fail(j, "run", msg);
out:
	j->ask_mem = 0;
	if (rc != 0) {
		jv_free(*reply);
		*reply = jv_invalid();
	}
	jv_free(why);
	jv_free(beside);
	jv_free(alone);
	return rc;
}

/* req (consumed), sent, failed with why (consumed): asked again. As reference_again_with. */
int reference_again(struct job *j, jv req, double timeout, jv why, jv *reply)
{
	struct request r = {req, timeout};
	int rc = reference_again_with(j, ask, &r, why, reply);
	jv_free(req);
	return rc;
}
