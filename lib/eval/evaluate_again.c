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
 * quiet and idle (reference_loop). A reference that died or did not
 * answer is not asked again (it is restarted for the next record).
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
#include <unistd.h>

#include "evaluate_impl.h"
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
	int again = once(j, arg, reply, &beside);
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
	for (; (again = once(j, arg, reply, &alone)) > 0 && ca_proc_now() < until; tries++) {
		jv_free(alone);
		alone = jv_invalid();
		usleep(200 * 1000);
	}
	if (again < 0)
		goto out;
	double held = -1, need = -1;
	if (again > 0) {
		reference_kept(j, jv_copy(why), "it failed beside the candidate and %d time(s) over %d s with the candidate "
			"killed", tries, FREED_WAIT_S);
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
