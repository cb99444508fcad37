/*
 * evaluate_worker: one worker process, lib/py/ca_runner.py, the trusted
 * reference or a candidate inside ca-sandbox: its environment and command
 * line, its start and ready line, the request and reply lines (with the
 * {"timing": ...} lines of a timed loop noted on our clock and answered),
 * and its end, told as a fault {"stage", "error"} when it failed. The
 * process and its lines are lib/runner's; what they mean here is ours.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "evaluate_impl.h"
#include "json.h"
#include "paths.h"
#include "proc.h"
#include "runner.h"
#include "sandbox.h"

extern char **environ;

static void free_strv(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

static char **strv_push(char **v, size_t *n, const char *s)
{
	v = ca_xrealloc(v, (*n + 2) * sizeof *v);
	v[(*n)++] = ca_xstrdup(s);
	v[*n] = NULL;
	return v;
}

/*
 * Where the workers' Python keeps bytecode when torch has none of its own
 * ($CA_PYCACHE for the runner, which then sets sys.pycache_prefix; see
 * _bytecode in ca_runner.py): $CA_CACHE/pycache, written by the trusted
 * reference only and read by candidates through a read-only mount, so a
 * torch installed without bytecode (as on the H200 image: no .pyc for its
 * 2,141 .py) is compiled once, not at every worker's start (import torch
 * took 8.2 s there, 4.8 s again). Resolved once, before the slots'
 * threads start; "" when it cannot be made, or $CA_EVAL_NO_PYCACHE is set.
 */
static char pycache[PATHLEN];

static void pycache_resolve(void)
{
	if (getenv("CA_EVAL_NO_PYCACHE") && *getenv("CA_EVAL_NO_PYCACHE"))
		return;
	char dir[PATHLEN];
	snprintf(dir, sizeof dir, "%s/pycache", ca_paths_cache());
	struct stat st;
	if (ca_paths_mkdirs(dir, 0755) == 0 && lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
		snprintf(pycache, sizeof pycache, "%s", dir);
}

/* What every worker's command line uses, resolved once, before any slot's thread looks it up. */
void workers_prepare(void)
{
	ca_paths_cache();
	ca_paths_python();
	ca_paths_pydir();
	pycache_resolve();
}

static char **make_env(const struct slot *s, int candidate)
{
	size_t n = 0;
	char **env = NULL;
	char buf[PATHLEN];
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) && strncmp(*e, "CA_CUPTI_LIB=", 13) &&
				strncmp(*e, "CA_KERNELS_LIB=", 15) && strncmp(*e, "PYTHONPYCACHEPREFIX=", 20) &&
				strncmp(*e, "CA_PYCACHE=", 11) && strncmp(*e, "CA_NVCC=", 8) &&
				strncmp(*e, "CA_EVAL_WARM_COMPILE=", 21))
			env = strv_push(env, &n, *e);
	if (s->gpu >= 0) {
		snprintf(buf, sizeof buf, "CUDA_VISIBLE_DEVICES=%d", s->gpu);
		env = strv_push(env, &n, buf);
	}
	char *cupti = ca_runner_cupti_env();
	if (cupti) {
		env = strv_push(env, &n, cupti);
		free(cupti);
	}
	/* A candidate's torch extension builds compile through ca-nvcc (see ca-nvcc(1)), unless CA_NVCC_PARALLEL=0. */
	const char *parallel = getenv("CA_NVCC_PARALLEL");
	snprintf(buf, sizeof buf, "%s/ca-nvcc", ca_paths_bindir());
	if (candidate && access(buf, X_OK) == 0 && !(parallel && strcmp(parallel, "0") == 0)) {
		char val[PATHLEN + 16];
		snprintf(val, sizeof val, "CA_NVCC=%s", buf);
		env = strv_push(env, &n, val);
	}
	/* A reference that will time torch.compile imports its compiler early (ca_runner.py, _warm_imports). */
	if (!candidate && warm_compile_wanted(s->cfg))
		env = strv_push(env, &n, "CA_EVAL_WARM_COMPILE=1");
	env = strv_push(env, &n, "PYTHONDONTWRITEBYTECODE=1");
	if (pycache[0]) {
		/* A candidate reads the bytecode the reference wrote there; it writes none. */
		char val[PATHLEN + 32];
		snprintf(val, sizeof val, "CA_PYCACHE=%s", pycache);
		env = strv_push(env, &n, val);
	}
	env = strv_push(env, &n, "PYTHONUNBUFFERED=1");
	return env;
}

/*
 * Whether the reference prepares torch.compile while the candidate builds
 * (its imports, then the record's model: reference_warm): in a profile
 * that times it, unless CA_EVAL_WARM_COMPILE=0.
 */
int warm_compile_wanted(const struct ca_eval_config *cfg)
{
	const char *env = getenv("CA_EVAL_WARM_COMPILE");
	return cfg->mode == CA_EVAL_PROFILE && !cfg->no_compile && !(env && !strcmp(env, "0"));
}

/* A fault of a worker, as a record says it: {"stage", "error"}. */
static jv fault_of(const char *stage, const char *error)
{
	return jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string(stage)),
		jv_string("error"), jv_string(error));
}

static void forget_stopped(struct worker *w)
{
	free(w->stopped);
	w->stopped = NULL;
	w->nstopped = 0;
}

/*
 * A candidate runs only while a request of ours is in flight: from its
 * load on (hold), its whole process tree, its sandbox and whatever it
 * forked, is stopped when its reply is in and continued when the next
 * request goes. An idle candidate cannot run work of its own beside a
 * timed loop, the reference's (an inflated baseline is a speedup it did
 * not earn, and the cache keeps it for every later candidate of the
 * task) nor another slot's, of this process or another. (What it queued
 * on the GPU before it is stopped runs on: see evaluate_idle.c.)
 */
static void worker_hold(struct worker *w, int stop)
{
	if (w->hold && w->run.running && w->held != stop) {
		if (stop) {
			w->nstopped = ca_proc_signal_tree_found(w->run.co.proc.pid, SIGSTOP, &w->stopped);
		} else {
			/* A stopped tree forks nothing: the same processes, in the same order, without a scan of /proc. */
			for (int i = 0; i < w->nstopped; i++)
				kill(w->stopped[i], SIGCONT);
			forget_stopped(w);
		}
		w->held = stop;
		candidates_running_add(w->gpu, stop ? -1 : 1);
	}
}

/*
 * A held worker continued now, before a request that our clock times
 * from its send: the continue and the stop after the reply (two scans of
 * /proc, milliseconds on a busy host) are then outside the clock, which
 * ends at replied_at.
 */
void worker_wake(struct worker *w)
{
	worker_hold(w, 0);
}

/* A candidate about to be sent its load: held between requests from now on. */
void worker_hold_from_now(struct worker *w)
{
	if (!w->hold) {
		w->hold = 1;
		w->held = 0;
		candidates_running_add(w->gpu, 1);
	}
}

/*
 * A held worker's processes killed, all of them: killing its process
 * group misses those that left it (a session of their own), which would
 * live on, stopped or spinning, when no sandbox's PID namespace ends
 * with it. Those stopped are known; a running tree is found in /proc.
 */
static void kill_tree(struct worker *w)
{
	if (!w->hold)
		return;
	if (w->held) {
		for (int i = 0; i < w->nstopped; i++)
			kill(w->stopped[i], SIGKILL);
	} else {
		ca_proc_signal_tree(w->run.co.proc.pid, SIGKILL);
	}
}

/*
 * Stop a worker: asked to exit, given grace seconds, then killed; with
 * grace 0 killed at once (nothing of a worker's is kept but its replies,
 * and a Python process tearing down CUDA takes tenths of a second).
 */
void worker_stop(struct worker *w, double grace)
{
	if (w->run.running) {
		quiet_done(w->run.co.proc.out, w->run.co.proc.pid);
		if (grace <= 0)
			kill_tree(w);
		if (grace > 0) {
			worker_hold(w, 0);  /* to read its exit request; a kill needs no continue */
			ca_coproc_write(&w->run.co, "{\"op\":\"exit\"}", 13);
			ca_runner_close(&w->run, grace);
		} else {
			ca_runner_kill(&w->run);
		}
	}
	ca_runner_forget(&w->run);
	free_strv(w->argv);
	free_strv(w->env);
	w->argv = w->env = NULL;
	if (w->hold && !w->held)
		candidates_running_add(w->gpu, -1);
	w->hold = w->held = 0;
	w->posted_until = 0;
	forget_stopped(w);
}

/*
 * Kill a worker without waiting for it to die, at the end of a run: the
 * reference, with its CUDA context, took 0.14 to 0.33 s to exit on the
 * H200, a tenth of a single shot's wall time spent after its record was
 * out.
 */
void worker_abandon(struct worker *w)
{
	if (w->run.running) {
		quiet_done(w->run.co.proc.out, w->run.co.proc.pid);
		ca_runner_abandon(&w->run);
	}
	worker_stop(w, 0);
}

/* Describe how a worker ended, with the tail of its log. (malloc'd) */
static char *describe_exit(struct worker *w, int status, const char **stage)
{
	char head[256];
	char *tail = log_tail(w->log, 1500);
	if (status == CA_PROC_TIMEOUT_STATUS) {
		*stage = "timeout";
		snprintf(head, sizeof head, "killed at the wall-clock limit");
	} else if (status == 125) {
		*stage = "sandbox";
		snprintf(head, sizeof head, "the sandbox failed to start it (status 125)");
	} else if (!jv_is_valid(w->run.hello) && (status == 126 || status == 127)) {
		/* Nothing of the candidate's ran yet: the interpreter itself could not be run. */
		*stage = "start";
		snprintf(head, sizeof head, "the Python interpreter (CA_PYTHON) could not be run (status %d); a candidate's "
			"runs as the sandbox user, who must be able to read it and every directory above it", status);
	} else if (status > 128) {
		*stage = "crash";
		snprintf(head, sizeof head, "killed by signal %d (%s)", status - 128, strsignal(status - 128));
	} else {
		*stage = "crash";
		snprintf(head, sizeof head, "exited with status %d", status);
	}
	size_t len = strlen(head) + strlen(tail) + 8;
	char *msg = ca_xmalloc(len);
	snprintf(msg, len, "%s%s%s", head, *tail ? ": " : "", tail);
	free(tail);
	return msg;
}

/* The worker is gone (its output closed, reaped by lib/runner): *fault says how it ended. */
static int worker_gone(struct worker *w, jv *fault)
{
	const char *stage = "crash";
	char *msg = describe_exit(w, w->run.status, &stage);
	*fault = fault_of(stage, msg);
	free(msg);
	return -1;
}

/* Send req (consumed) to a worker, a posted request's reply read first; -1 with *fault when it is gone. */
int worker_send(struct worker *w, jv req, jv *fault)
{
	if (worker_settle(w, fault) != 0) {
		jv_free(req);
		return -1;
	}
	if (!w->run.running) {
		jv_free(req);
		*fault = fault_of("crash", "worker is not running");
		return -1;
	}
	worker_hold(w, 0);
	return ca_runner_send(&w->run, req) == CA_RUNNER_OK ? 0 : worker_gone(w, fault);
}

/*
 * Post req (consumed): its reply is not waited for now, but read and
 * dropped before the worker's next request, at most timeout_s from now,
 * so the work runs beside ours (the reference's torch.compile while the
 * candidate builds). Meanwhile the worker counts as starting: a timed
 * loop on its GPU waits for it (quiet_loop_begin), and it is not posted
 * while one runs there. -1 with *fault when it is gone.
 */
int worker_post(struct worker *w, jv req, double timeout_s, jv *fault)
{
	quiet_before_start(w->gpu);
	w->limit_s = timeout_s;
	if (worker_send(w, req, fault) != 0)
		return -1;
	w->posted_until = ca_proc_now() + timeout_s;
	quiet_started(w->run.co.proc.out, w->run.co.proc.pid, w->gpu);
	return 0;
}

/* The posted request's reply, read and dropped; -1 with *fault when the worker died or did not answer by then. */
int worker_settle(struct worker *w, jv *fault)
{
	if (!w->posted_until)
		return 0;
	double until = w->posted_until;
	int out = w->run.co.proc.out;
	pid_t pid = w->run.co.proc.pid;
	w->posted_until = 0;
	jv reply;
	int rc = worker_recv(w, until, &reply, fault, NULL);
	quiet_done(out, pid);  /* as registered: a worker stopped on a fault may have dropped its pipe */
	jv_free(reply);
	return rc;
}

/* Stop a worker at a fault in its protocol: *fault gets {"stage","error"}; returns -1. */
static int worker_abort(struct worker *w, const char *stage, const char *error, jv *fault)
{
	kill_tree(w);
	ca_runner_kill(&w->run);
	*fault = fault_of(stage, error);
	return -1;
}

/*
 * A timed call's seed (or shipped inputs), asked for right before its
 * draw: given only once the loop started and every call before it ticked
 * (with its output's digest).
 */
static int answer_draw(struct worker *w, struct loop_clock *ours, int wants_seed, jv *fault)
{
	if (!(ours->start > 0) || !(wants_seed ? ours->live != NULL : ours->ship) ||
	    ours->nsent >= ours->nlive || ours->nticks != ours->nsent) {
		char buf[256];
		snprintf(buf, sizeof buf, "the worker asked for the %s of timed call %d when it had "
			"marked %d of its %d timed calls", wants_seed ? "seed" : "inputs",
			ours->nsent, ours->nticks, ours->nlive);
		return worker_abort(w, "timing", buf, fault);
	}
	jv seed;
	if (wants_seed) {
		seed = jv_object_set(jv_object(), jv_string("seed"), jv_number((double)ours->live[ours->nsent++]));
	} else {
		char from[PATHLEN], to[PATHLEN];
		int k = ours->nsent++;
		snprintf(from, sizeof from, "%s%d.ten", ours->ship_from, k % (ours->nship > 0 ? ours->nship : 1));
		snprintf(to, sizeof to, "%s%d.ten", ours->ship_to, k);
		if (reveal_file(from, to) != 0) {
			char why[512], dir[PATHLEN];
			int err = errno;
			/* ship_to is the candidate's DIR/.ca-io/tin-call-: its directory two levels up. */
			snprintf(dir, sizeof dir, "%s", ours->ship_to);
			for (int up = 0; up < 2 && strrchr(dir, '/'); up++)
				*strrchr(dir, '/') = '\0';
			const char *stage = placing_failed(dir, err, "a timed call's shipped inputs", why, sizeof why);
			return worker_abort(w, stage, why, fault);
		}
		seed = jv_object_set(jv_object(), jv_string("input"), jv_string(to));
	}
	return worker_send(w, seed, fault);
}

/*
 * A {"timing": what} line of a timed loop (v borrowed): noted on ours
 * (which may be NULL), a seed or inputs asked for given, and at the end
 * the spot checks named when the worker asks. -1 with *fault when the
 * worker broke the protocol or is gone.
 */
static int timing_line(struct worker *w, const char *what, jv v, struct loop_clock *ours, jv *fault)
{
	int wants_seed = !strcmp(what, "seed"), wants_input = !strcmp(what, "input");
	if (ours && (wants_seed || wants_input)) {
		if (answer_draw(w, ours, wants_seed, fault) != 0)
			return -1;
	} else if (ours) {
		loop_clock_note(ours, what, v);
	}
	double askn = 0;
	if (!strcmp(what, "end") && ca_json_number(v, "ask", &askn) == 1) {
		/* The worker kept every call's output: name the ones to check now. */
		jv answer = ours ? loop_clock_choose(ours) : jv_object_set(jv_object(), jv_string("keep"), jv_array());
		return worker_send(w, answer, fault);
	}
	return 0;
}

/*
 * Wait for the reply object to a request sent, until the absolute time
 * deadline. On a fault the worker is stopped and *fault gets
 * {"stage","error"}; returns -1. The {"timing": ...} lines of a timed
 * loop are noted in ours (which may be NULL).
 */
int worker_recv(struct worker *w, double deadline, jv *reply, jv *fault, struct loop_clock *ours)
{
	*reply = jv_invalid();
	if (!w->run.running) {
		*fault = fault_of("crash", "worker is not running");
		return -1;
	}
	for (;;) {
		jv v;
		enum ca_runner_result res = ca_runner_read(&w->run, deadline, &v);
		if (res == CA_RUNNER_TIMEOUT) {
			char buf[128];
			snprintf(buf, sizeof buf, "no answer within %g s", w->limit_s);
			return worker_abort(w, "timeout", buf, fault);
		}
		if (res == CA_RUNNER_TOO_LONG)
			return worker_abort(w, "protocol", "reply line too long", fault);
		if (res == CA_RUNNER_GONE)
			return worker_gone(w, fault);
		if (res != CA_RUNNER_OK || jv_get_kind(v) != JV_KIND_OBJECT) {
			jv_free(v);
			return worker_abort(w, "protocol", "malformed reply from the worker", fault);
		}
		jv timing = ca_json_get(v, "timing");
		if (jv_get_kind(timing) != JV_KIND_STRING) {
			jv_free(timing);
			w->replied_at = ca_proc_now();
			worker_hold(w, 1);
			*reply = v;
			return 0;
		}
		int rc = timing_line(w, jv_string_value(timing), v, ours, fault);
		jv_free(timing);
		jv_free(v);
		if (rc != 0)
			return -1;
	}
}

/* Which of two workers has something to say first, waiting until deadline: 0 (a), 1 (b), or -1 when neither had by then. */
int worker_first(struct worker *a, struct worker *b, double deadline)
{
	struct ca_coproc *cs[2] = {&a->run.co, &b->run.co};
	double left = deadline - ca_proc_now();
	return ca_coproc_wait_any(cs, 2, left > 0 ? left : 0);
}

/* Send req (consumed) and wait for the reply, at most timeout_s. */
int worker_call(struct worker *w, jv req, double timeout_s, jv *reply, jv *fault, struct loop_clock *ours)
{
	*reply = jv_invalid();
	w->limit_s = timeout_s;
	if (worker_send(w, req, fault) != 0)
		return -1;
	return worker_recv(w, ca_proc_now() + timeout_s, reply, fault, ours);
}

/*
 * A candidate's command inside ca-sandbox: its private directory, the
 * trusted files hidden, the runner and the bytecode cache read-only, a
 * wall-clock limit beyond every request's, what the GPU's libraries
 * need from the environment (the driver's are often found only through
 * LD_LIBRARY_PATH), and what decides how fast torch runs, as the
 * reference has it: a CUDA_LAUNCH_BLOCKING=1 or a thread count left in
 * the operator's shell would otherwise slow the reference alone, a
 * speedup the candidate did not earn (ca-verify(1), ENVIRONMENT).
 */
static char **sandboxed(const struct slot *s, const struct worker *w, const char *const *cmd)
{
	static const char *const pass[] = {"CA_CUPTI_LIB=", "PYTHON", "CA_PYCACHE=", "LD_LIBRARY_PATH=", "NVIDIA_",
		"CUDA_HOME=", "CA_NVCC=", "CA_LIGHT_HEADERS=", "OMP_NUM_THREADS=", "MKL_NUM_THREADS=",
		"CUDA_LAUNCH_BLOCKING=", "CUDA_DEVICE_MAX_CONNECTIONS=", "CUDA_MODULE_LOADING=", "PYTORCH_CUDA_ALLOC_CONF=",
		"PYTORCH_NO_CUDA_MEMORY_CACHING=", "CUBLAS_WORKSPACE_CONFIG=", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=", NULL};
	const struct ca_eval_config *cfg = s->cfg;
	struct ca_sandbox sb;
	ca_sandbox_init(&sb);
	sb.gpu = s->gpu >= 0;
	sb.dir = w->dir;
	sb.fsize_mb = cfg->fsize_mb;
	const char *hide[] = {s->trusted};
	sb.hide = hide;
	sb.nhide = 1;
	if (cfg->sandbox_user)
		sb.uid = strtoll(cfg->sandbox_user, NULL, 10);  /* checked as an option */
	sb.nproc = 4096;
	const char *ro[] = {ca_paths_pydir(), pycache};
	sb.ro = ro;
	sb.nro = pycache[0] ? 2 : 1;
	sb.time_s = nearbyint(cfg->load_timeout_s + (cfg->checks + 4) * cfg->timeout_s + 60);
	return ca_runner_sandboxed(&sb, cmd, w->env, pass);
}

/* The worker's command line: the runner, in ca-sandbox for a candidate unless --no-sandbox. -1 with *fault. */
static int worker_argv(struct slot *s, struct worker *w, int candidate, jv *fault)
{
	const struct ca_eval_config *cfg = s->cfg;
	char runner[PATHLEN];
	snprintf(runner, sizeof runner, "%s/ca_runner.py", ca_paths_pydir());
	const char *cmd[] = {ca_paths_python(), "-B", runner, "--role", candidate ? "candidate" : "reference",
		"--device", cfg->device, NULL};
	if (candidate && cfg->sandbox) {
		char sandbox[PATHLEN];
		snprintf(sandbox, sizeof sandbox, "%s/ca-sandbox", ca_paths_bindir());
		if (access(sandbox, X_OK) != 0) {
			*fault = fault_of("sandbox", "ca-sandbox not found next to this program "
				"(build it, or pass --no-sandbox to run candidates unconfined)");
			return -1;
		}
		w->argv = sandboxed(s, w, cmd);
		return 0;
	}
	size_t n = 0;
	for (int i = 0; cmd[i]; i++)
		w->argv = strv_push(w->argv, &n, cmd[i]);
	return 0;
}

/* Start a worker; the ready line goes to w->run.hello. -1 with *fault on failure. */
int worker_start(struct slot *s, struct worker *w, int candidate, jv *fault)
{
	char buf[PATHLEN + 64];
	quiet_before_start(s->gpu);
	w->gpu = s->gpu;
	w->hold = w->held = 0;
	w->stopped = NULL;
	w->nstopped = 0;
	w->env = make_env(s, candidate);
	w->argv = NULL;
	ca_runner_init(&w->run);
	if (worker_argv(s, w, candidate, fault) != 0)
		return -1;
	snprintf(w->log, sizeof w->log, "%s/%s-%ld.log", s->root, candidate ? "candidate" : "reference", ++s->serial);
	int logfd = open(w->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (logfd < 0) {
		*fault = fault_of("system", "cannot create a worker log");
		return -1;
	}
	fchmod(logfd, 0666);
	int rc = ca_runner_start(&w->run, (const char *const *)w->argv, (const char *const *)w->env,
		candidate ? w->dir : NULL, logfd);
	int saved = errno;
	close(logfd);
	if (rc != 0) {
		snprintf(buf, sizeof buf, "cannot start %s: %s", w->argv[0], strerror(saved));
		*fault = fault_of("system", buf);
		return -1;
	}
	quiet_started(w->run.co.proc.out, w->run.co.proc.pid, s->gpu);
	return 0;
}

/* Wait for the ready line of a started worker. */
int worker_ready(struct worker *w, double timeout_s, jv *fault)
{
	if (jv_is_valid(w->run.hello))
		return 0;
	int was_running = w->run.running;
	int out = w->run.co.proc.out;
	pid_t pid = w->run.co.proc.pid;
	enum ca_runner_result res = was_running ? ca_runner_hello(&w->run, timeout_s) : CA_RUNNER_GONE;
	if (was_running)
		quiet_done(out, pid);
	if (res == CA_RUNNER_TIMEOUT) {
		ca_runner_kill(&w->run);
		*fault = fault_of("timeout", "the worker did not start in time");
		return -1;
	}
	if (res == CA_RUNNER_GONE || res == CA_RUNNER_TOO_LONG) {
		const char *stage = "start";
		int status = !was_running ? 1 : res == CA_RUNNER_GONE ? w->run.status : ca_runner_close(&w->run, 2);
		char *msg = describe_exit(w, status, &stage);
		*fault = fault_of(!strcmp(stage, "crash") ? "start" : stage, msg);
		free(msg);
		return -1;
	}
	jv v = w->run.hello;
	if (res != CA_RUNNER_OK || jv_get_kind(v) != JV_KIND_OBJECT || ca_json_bool(v, "ready") != 1) {
		char *err = res == CA_RUNNER_OK && jv_get_kind(v) == JV_KIND_OBJECT ? ca_json_strdup(v, "error") : NULL;
		ca_runner_forget(&w->run);
		ca_runner_close(&w->run, 1);
		*fault = fault_of("start", err ? err : "the worker did not say it was ready");
		free(err);
		return -1;
	}
	return 0;
}
