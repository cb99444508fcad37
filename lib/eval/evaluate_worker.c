/*
 * evaluate_worker: one worker process, lib/py/ca_runner.py, the trusted
 * reference or a candidate inside ca-sandbox: its environment and command
 * line, its start and ready line, the request and reply lines (with the
 * {"timing": ...} lines of a timed loop noted on our clock and answered),
 * and its end, told as a fault {"stage", "error"} when it failed.
 */
#include <errno.h>
#include <fcntl.h>
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
				strncmp(*e, "CA_PYCACHE=", 11))
			env = strv_push(env, &n, *e);
	if (s->gpu >= 0) {
		snprintf(buf, sizeof buf, "CUDA_VISIBLE_DEVICES=%d", s->gpu);
		env = strv_push(env, &n, buf);
	}
	snprintf(buf, sizeof buf, "%s/libca-cupti.so", ca_paths_bindir());
	if (access(buf, R_OK) == 0) {
		char val[PATHLEN + 16];
		snprintf(val, sizeof val, "CA_CUPTI_LIB=%s", buf);
		env = strv_push(env, &n, val);
	}
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
 * Stop a worker: asked to exit, given grace seconds, then killed; with
 * grace 0 killed at once (nothing of a worker's is kept but its replies,
 * and a Python process tearing down CUDA takes tenths of a second).
 */
void worker_stop(struct worker *w, double grace)
{
	if (w->running) {
		quiet_done(w->co.proc.out, w->co.proc.pid);
		if (grace > 0)
			ca_coproc_write(&w->co, "{\"op\":\"exit\"}", 13);
		else
			ca_proc_kill(&w->co.proc, SIGKILL);
		ca_coproc_close(&w->co, grace);
		w->running = 0;
	}
	jv_free(w->hello);
	w->hello = jv_invalid();
	free_strv(w->argv);
	free_strv(w->env);
	w->argv = w->env = NULL;
}

/*
 * Kill a worker without waiting for it to die, at the end of a run: the
 * reference, with its CUDA context, took 0.14 to 0.33 s to exit on the
 * H200, a tenth of a single shot's wall time spent after its record was
 * out.
 */
void worker_abandon(struct worker *w)
{
	if (w->running) {
		quiet_done(w->co.proc.out, w->co.proc.pid);
		ca_coproc_abandon(&w->co);
		w->running = 0;
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
	} else if (!jv_is_valid(w->hello) && (status == 126 || status == 127)) {
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

/* The worker is gone (EPIPE on write or read): *fault says how it ended. */
static int worker_gone(struct worker *w, jv *fault)
{
	const char *stage = "crash";
	int status = ca_coproc_close(&w->co, 2);
	w->running = 0;
	char *msg = describe_exit(w, status, &stage);
	*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string(stage)),
		jv_string("error"), jv_string(msg));
	free(msg);
	return -1;
}

/* Send req (consumed) to a worker; -1 with *fault when it is gone. */
int worker_send(struct worker *w, jv req, jv *fault)
{
	if (!w->running) {
		jv_free(req);
		*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string("crash")),
			jv_string("error"), jv_string("worker is not running"));
		return -1;
	}
	jv dumped = jv_dump_string(req, 0);
	int rc = ca_coproc_write(&w->co, jv_string_value(dumped), (size_t)jv_string_length_bytes(jv_copy(dumped)));
	jv_free(dumped);
	return rc == 0 ? 0 : worker_gone(w, fault);
}

/* Stop a worker at a fault in its protocol: *fault gets {"stage","error"}; returns -1. */
static int worker_abort(struct worker *w, const char *stage, const char *error, jv *fault)
{
	ca_proc_kill(&w->co.proc, SIGKILL);
	ca_coproc_close(&w->co, 0);
	w->running = 0;
	*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string(stage)),
		jv_string("error"), jv_string(error));
	return -1;
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
	if (!w->running) {
		*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string("crash")),
			jv_string("error"), jv_string("worker is not running"));
		return -1;
	}
	for (;;) {
		double left = deadline - ca_proc_now();
		char *line = ca_coproc_read_line(&w->co, left > 0 ? left : 0, NULL);
		if (!line) {
			if (errno == ETIMEDOUT) {
				char buf[128];
				snprintf(buf, sizeof buf, "no answer within %g s", w->limit_s);
				return worker_abort(w, "timeout", buf, fault);
			}
			if (errno == EMSGSIZE) {
				return worker_abort(w, "protocol", "reply line too long", fault);
			}
			break;
		}
		jv v = jv_parse(line);
		free(line);
		if (jv_get_kind(v) == JV_KIND_OBJECT) {
			jv timing = ca_json_get(v, "timing");
			int is_timing = jv_get_kind(timing) == JV_KIND_STRING;
			int wants_seed = is_timing && !strcmp(jv_string_value(timing), "seed");
			int wants_input = is_timing && !strcmp(jv_string_value(timing), "input");
			if (ours && (wants_seed || wants_input)) {
				/*
				 * A timed call's seed (or shipped inputs), asked for right
				 * before its draw: given only once the loop started and
				 * every call before it ticked (with its output's digest).
				 */
				if (!(ours->start > 0) || !(wants_seed ? ours->live != NULL : ours->ship) ||
				    ours->nsent >= ours->nlive || ours->nticks != ours->nsent) {
					char buf[256];
					snprintf(buf, sizeof buf, "the worker asked for the %s of timed call %d when it had "
						"marked %d of its %d timed calls", wants_seed ? "seed" : "inputs",
						ours->nsent, ours->nticks, ours->nlive);
					jv_free(timing);
					jv_free(v);
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
						char why[256];
						const char *stage = placing_failed(errno, "a timed call's shipped inputs", why, sizeof why);
						jv_free(timing);
						jv_free(v);
						return worker_abort(w, stage, why, fault);
					}
					seed = jv_object_set(jv_object(), jv_string("input"), jv_string(to));
				}
				if (worker_send(w, seed, fault) != 0) {
					jv_free(timing);
					jv_free(v);
					return -1;
				}
			} else if (is_timing && ours) {
				loop_clock_note(ours, jv_string_value(timing), v);
			}
			double askn = 0;
			int asks = is_timing && !strcmp(jv_string_value(timing), "end") && ca_json_number(v, "ask", &askn) == 1;
			jv_free(timing);
			if (asks) {
				/* The worker kept every call's output: name the ones to check now. */
				jv answer = ours ? loop_clock_choose(ours)
						 : jv_object_set(jv_object(), jv_string("keep"), jv_array());
				if (worker_send(w, answer, fault) != 0) {
					jv_free(v);
					return -1;
				}
			}
			if (is_timing) {
				jv_free(v);
				continue;
			}
			*reply = v;
			return 0;
		}
		jv_free(v);
		return worker_abort(w, "protocol", "malformed reply from the worker", fault);
	}
	return worker_gone(w, fault);
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

/* Start a worker; the ready line goes to w->hello. -1 with *fault on failure. */
int worker_start(struct slot *s, struct worker *w, int candidate, jv *fault)
{
	const struct ca_eval_config *cfg = s->cfg;
	char runner[PATHLEN], buf[PATHLEN + 64];
	size_t n = 0;
	snprintf(runner, sizeof runner, "%s/ca_runner.py", ca_paths_pydir());
	quiet_before_start(s->gpu);
	w->env = make_env(s, candidate);
	w->argv = NULL;
	w->hello = jv_invalid();
	if (candidate && cfg->sandbox) {
		char sandbox[PATHLEN];
		snprintf(sandbox, sizeof sandbox, "%s/ca-sandbox", ca_paths_bindir());
		if (access(sandbox, X_OK) != 0) {
			*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string("sandbox")),
				jv_string("error"), jv_string("ca-sandbox not found next to this program "
					"(build it, or pass --no-sandbox to run candidates unconfined)"));
			return -1;
		}
		w->argv = strv_push(w->argv, &n, sandbox);
		if (s->gpu >= 0)
			w->argv = strv_push(w->argv, &n, "--gpu");
		w->argv = strv_push(w->argv, &n, "--dir");
		w->argv = strv_push(w->argv, &n, w->dir);
		snprintf(buf, sizeof buf, "%lld", cfg->fsize_mb);
		w->argv = strv_push(w->argv, &n, "--fsize");
		w->argv = strv_push(w->argv, &n, buf);
		w->argv = strv_push(w->argv, &n, "--hide");
		w->argv = strv_push(w->argv, &n, s->trusted);
		if (cfg->sandbox_user) {
			w->argv = strv_push(w->argv, &n, "--user");
			w->argv = strv_push(w->argv, &n, cfg->sandbox_user);
		}
		w->argv = strv_push(w->argv, &n, "--nproc");
		w->argv = strv_push(w->argv, &n, "4096");
		w->argv = strv_push(w->argv, &n, "--ro");
		w->argv = strv_push(w->argv, &n, ca_paths_pydir());
		if (pycache[0]) {
			w->argv = strv_push(w->argv, &n, "--ro");
			w->argv = strv_push(w->argv, &n, pycache);
		}
		snprintf(buf, sizeof buf, "%.0f", cfg->load_timeout_s + (cfg->checks + 4) * cfg->timeout_s + 60);
		w->argv = strv_push(w->argv, &n, "--time");
		w->argv = strv_push(w->argv, &n, buf);
		for (char **e = w->env; *e; e++)
			/* The driver's libraries are often found only through LD_LIBRARY_PATH. */
			if (!strncmp(*e, "CA_CUPTI_LIB=", 13) || !strncmp(*e, "PYTHON", 6) || !strncmp(*e, "CA_PYCACHE=", 11) ||
					!strncmp(*e, "LD_LIBRARY_PATH=", 16) || !strncmp(*e, "NVIDIA_", 7) ||
					!strncmp(*e, "CUDA_HOME=", 10)) {
				w->argv = strv_push(w->argv, &n, "--env");
				w->argv = strv_push(w->argv, &n, *e);
			}
		w->argv = strv_push(w->argv, &n, "--");
	}
	w->argv = strv_push(w->argv, &n, ca_paths_python());
	w->argv = strv_push(w->argv, &n, "-B");
	w->argv = strv_push(w->argv, &n, runner);
	w->argv = strv_push(w->argv, &n, "--role");
	w->argv = strv_push(w->argv, &n, candidate ? "candidate" : "reference");
	w->argv = strv_push(w->argv, &n, "--device");
	w->argv = strv_push(w->argv, &n, cfg->device);

	snprintf(w->log, sizeof w->log, "%s/%s-%ld.log", s->root, candidate ? "candidate" : "reference", ++s->serial);
	int logfd = open(w->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (logfd < 0) {
		*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string("system")),
			jv_string("error"), jv_string("cannot create a worker log"));
		return -1;
	}
	fchmod(logfd, 0666);
	ca_coproc_init(&w->co, (const char *const *)w->argv);
	w->co.proc.env = (const char *const *)w->env;
	w->co.proc.cwd = candidate ? w->dir : NULL;
	w->co.proc.err_mode = CA_PROC_FD;
	w->co.proc.err = logfd;
	w->co.proc.die_with_parent = 1;
	int rc = ca_coproc_start_prepared(&w->co);
	int saved = errno;
	close(logfd);
	if (rc != 0) {
		snprintf(buf, sizeof buf, "cannot start %s: %s", w->argv[0], strerror(saved));
		*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string("system")),
			jv_string("error"), jv_string(buf));
		return -1;
	}
	w->running = 1;
	quiet_started(w->co.proc.out, w->co.proc.pid, s->gpu);
	return 0;
}

/* Wait for the ready line of a started worker. */
int worker_ready(struct worker *w, double timeout_s, jv *fault)
{
	if (jv_is_valid(w->hello))
		return 0;
	char *line = w->running ? ca_coproc_read_line(&w->co, timeout_s, NULL) : NULL;
	if (w->running)
		quiet_done(w->co.proc.out, w->co.proc.pid);
	if (!line) {
		const char *stage = "start";
		char *msg;
		if (w->running && errno == ETIMEDOUT) {
			ca_proc_kill(&w->co.proc, SIGKILL);
			ca_coproc_close(&w->co, 0);
			msg = ca_xstrdup("the worker did not start in time");
			stage = "timeout";
		} else {
			int status = w->running ? ca_coproc_close(&w->co, 2) : 1;
			msg = describe_exit(w, status, &stage);
			if (!strcmp(stage, "crash"))
				stage = "start";
		}
		w->running = 0;
		*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string(stage)),
			jv_string("error"), jv_string(msg));
		free(msg);
		return -1;
	}
	jv v = jv_parse(line);
	free(line);
	if (jv_get_kind(v) != JV_KIND_OBJECT || ca_json_bool(v, "ready") != 1) {
		char *err = jv_get_kind(v) == JV_KIND_OBJECT ? ca_json_strdup(v, "error") : NULL;
		jv_free(v);
		ca_coproc_close(&w->co, 1);
		w->running = 0;
		*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string("start")),
			jv_string("error"), jv_string(err ? err : "the worker did not say it was ready"));
		free(err);
		return -1;
	}
	w->hello = v;
	return 0;
}
