/*
 * evaluate_idle: the GPU idle around every timed loop of the reference's.
 *
 * Stopping a candidate's processes (evaluate_worker.c: between our
 * requests, always) does not stop the GPU work they queued: a candidate
 * can leave seconds of kernels behind its reply, the reference's loop
 * then shares the GPU with them, time slice by time slice, and reads
 * slow; an inflated baseline is a speedup the candidate did not earn, and
 * the cache keeps it for every later candidate of the task. So before the
 * loop (the GPU's lock held) the reference worker probes the GPU (its
 * "idle" request: the round trip of a one-element kernel) and waits while
 * it is busy, at most idle_wait_s ($CA_EVAL_IDLE_S, 10 s by default; 0
 * turns the probes off): work no running process adds drains. Still busy,
 * the record's candidate is killed (its CUDA context, and what it queued,
 * go with it) and the GPU probed again: idle now, the work was the
 * candidate's and its record fails (stage "timing"); still busy, the work
 * is someone else's and the record is the evaluator's fault (stage
 * "gpu"): a loop timed beside it would be no baseline. While a candidate
 * of another slot runs a request (a load), whose the work is cannot be
 * told: the record's candidate is not blamed (stage "gpu"). After the loop a
 * probe that does not wait: busy then, work came during the loop (another
 * process's, or a candidate loading beside it: loads are not under the
 * lock), and the loop is run once more, then not kept (stage "gpu").
 */
#include <stdio.h>
#include <stdlib.h>

#include "evaluate_impl.h"

/*
 * After the candidate is killed: how long its context may take to go
 * (bench/probe-idle.py, an H100: the GPU idle 0.065-0.075 s after the
 * kill, its queued kernels dropped, whether it was stopped first or not).
 * Short: with several slots on the GPU, work of another slot's candidate
 * that happened to end meanwhile would be blamed on this one.
 */
enum { KILLED_WAIT_S = 3 };

static double idle_wait_s(void)
{
	const char *env = getenv("CA_EVAL_IDLE_S");
	return env && *env ? strtod(env, NULL) : 10;
}

/* Whether the reference's loops are probed at all: on a GPU, with a wait. */
static int probing(const struct job *j)
{
	return j->slot->gpu >= 0 && idle_wait_s() > 0;
}

struct probe {
	int idle;
	double waited_s, probe_us;
};

/* The reference's "idle" request, waiting at most wait seconds; -1 with the record failed (stage "reference"). */
static int probe_gpu(struct job *j, double wait, struct probe *p)
{
	jv req = set_num(set_str(jv_object(), "op", "idle"), "wait_s", wait);
	jv reply;
	if (reference_call(j, req, wait + j->slot->cfg->timeout_s, &reply) != 0)
		return -1;
	p->idle = ca_json_bool(reply, "idle") == 1;
	p->waited_s = p->probe_us = 0;
	ca_json_number(reply, "waited_s", &p->waited_s);
	ca_json_number(reply, "probe_us", &p->probe_us);
	jv_free(reply);
	/* What the record's reference loops waited for the GPU, in all (profile.gpu_wait_s). */
	if (p->waited_s >= 0.01) {
		double sum = 0;
		ca_json_number(j->result, "gpu_wait_s", &sum);
		j->result = set_num(j->result, "gpu_wait_s", sum + p->waited_s);
	}
	return 0;
}

/* Before the loop: 0 with the GPU idle, else -1 with the record failed. */
static int idle_before(struct job *j)
{
	double wait = idle_wait_s();
	struct probe p;
	if (!probing(j))
		return 0;
	if (probe_gpu(j, wait, &p) != 0)
		return -1;
	if (p.idle)
		return 0;
	char msg[512];
	int others = candidates_running(j->slot->gpu);
	if (others > 0) {
		/* A candidate of another slot is running (loading): whose the work is cannot be told. */
		snprintf(msg, sizeof msg, "the GPU stayed busy for %g s while %d candidate(s) of other slots ran "
			"(a kernel's round trip: %.0f us): not timed", wait, others, p.probe_us);
		job_fail(j, "gpu", msg);
		return -1;
	}
	worker_stop(&j->cand, 0);
	double busy_us = p.probe_us;
	if (probe_gpu(j, KILLED_WAIT_S, &p) != 0)
		return -1;
	if (p.idle) {
		snprintf(msg, sizeof msg, "its GPU work ran on for more than %g s after its processes were stopped "
			"(a kernel's round trip beside it: %.0f us), and stopped when it was killed: the reference "
			"cannot be timed beside it", wait, busy_us);
		job_fail(j, "timing", msg);
	} else {
		snprintf(msg, sizeof msg, "the GPU stayed busy for %g s with work that is neither the reference's nor "
			"the candidate's (another process's? a kernel's round trip: %.0f us): not timed", wait + KILLED_WAIT_S,
			p.probe_us);
		job_fail(j, "gpu", msg);
	}
	return -1;
}

/* After the loop: 1 when the GPU is idle still, 0 when not, -1 with the record failed. */
static int idle_after(struct job *j, double *probe_us)
{
	struct probe p = {1, 0, 0};
	if (probing(j) && probe_gpu(j, 0, &p) != 0)
		return -1;
	*probe_us = p.probe_us;
	return p.idle;
}

/* A loop's run, as reference_loop takes it. */
struct loop_run {
	int (*run)(struct job *j, void *arg, jv *reply);
	void *arg;
};

/*
 * One timed loop of the reference's, run (its request sent and its reply
 * into *reply: 0; 1 when the reference answered that it failed, its
 * answer in *why; or -1 with the record failed), with the GPU quiet and
 * ours (timed_loop_begin), the candidate stopped (as it is between
 * requests) and the GPU idle before and after. A loop that other work
 * came beside is run once more (a candidate of another slot loading, its
 * weights going to the GPU, is brief); beside other work again, the
 * record fails (stage "gpu"). As again_try.
 */
static int loop_once(struct job *j, void *arg, jv *reply, jv *why)
{
	struct loop_run *l = arg;
	*reply = *why = jv_invalid();
	for (int attempt = 0;; attempt++) {
		timed_loop_begin(j->slot);
		if (idle_before(j) != 0) {
			timed_loop_end(j->slot);
			return -1;
		}
		double probe_us = 0;
		int rc = l->run(j, l->arg, reply);
		int idle = rc == 0 ? idle_after(j, &probe_us) : 1;
		timed_loop_end(j->slot);
		if (rc > 0) {
			*why = *reply;
			*reply = jv_invalid();
			return 1;
		}
		if (rc != 0)
			return -1;
		if (idle == 1)
			return 0;
		jv_free(*reply);
		*reply = jv_invalid();
		if (idle < 0)
			return -1;
		if (attempt == 1) {
			char msg[256];
			snprintf(msg, sizeof msg, "other work came to the GPU while the reference was timed, twice (a "
				"kernel's round trip after its loop: %.0f us): its loops are not kept", probe_us);
			job_fail(j, "gpu", msg);
			return -1;
		}
	}
}

/*
 * A timed loop of the reference's (loop_once); one the reference failed
 * beside the candidate is run again (reference_again_with). 0 with
 * *reply, or -1 with the record failed.
 */
int reference_loop(struct job *j, int (*run)(struct job *j, void *arg, jv *reply), void *arg, jv *reply)
{
	struct loop_run l = {run, arg};
	jv why;
	int rc = loop_once(j, &l, reply, &why);
	return rc > 0 ? reference_again_with(j, loop_once, &l, why, reply) : rc;
}
