/*
 * ca-filter: the paper's rubric for synthesized tasks.
 *
 * Adds "filter" to every task: executable in eager mode and under
 * torch.compile with agreeing outputs, deterministic, not degenerate, an
 * eager time within bounds on the GPU, and structurally unlike every
 * KernelBench problem. Similarity and the static stochastic-op check are
 * done here in C (lib/pylex); the torch checks run in warm Python workers
 * (lib/py/ca_synth.py worker, through lib/runner), -j of them, each
 * owned by a thread of lib/pool, each task under a wall-clock limit. A
 * worker that crashes or runs out of time is killed with its whole process
 * group and restarted; the task gets the reason, never lost.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "file.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "paths.h"
#include "proc.h"
#include "pool.h"
#include "pylex.h"
#include "runner.h"
#include "sandbox.h"

extern char **environ;

static const char usage_text[] =
	"usage: ca-filter [-hu] [--against FILE] [--atol X] [--device auto|cpu|cuda] [--drop] [--fingerprint]\n"
	"                 [--gpus LIST] [-j N] [--max-ms X] [--max-sim X] [--min-ms X] [--no-compile]\n"
	"                 [--progress] [--rtol X] [--sandbox]\n"
	"                 [--sandbox-user UID] [--seed N] [--timeout S] [file ...]\n";

struct config {
	const char *against, *device, *sandbox_user;
	double atol, rtol, min_ms, max_ms, max_sim, timeout_s;
	long long seed, jobs;
	int drop, compile, sandbox;
	char **gpus;
	size_t ngpus;
};

/* A torch worker, owned by one thread of the pool. */
struct worker {
	struct ca_runner run;
	int up;             /* its hello was read: torch, gpu and cuda say what it has */
	int log_fd, index;
	double started;     /* when it was started, for its hello's time limit */
	char torch[64], gpu[128];
	int cuda;
	char **env;
	char **argv;  /* with --sandbox: the ca-sandbox command line, built once */
};

static struct config cfg = {
	.device = "auto", .atol = 1e-2, .rtol = 1e-2, .min_ms = 1, .max_ms = 100,
	.max_sim = 0.9, .timeout_s = 300, .seed = 42, .jobs = 0, .compile = 1,
};
static struct ca_pylex_index *refs;
static const char *refs_why;  /* why similarity is skipped, when refs is empty */
static struct worker *workers;
static long long accepted, rejected;  /* counted as written, one thread at a time */
/* Worker starts that failed since the last one that succeeded, by any thread. */
static _Atomic long long start_failures;
/* What the pool is given with a task, as against an error record passed through. */
static int task_mark;
#define TASK ((void *)&task_mark)
/* Seconds a worker may take to say hello (import torch, start CUDA, warm up). */
#define HELLO_TIMEOUT_S 600
static char lock_path[PATH_MAX];
/* --sandbox: the workers' directories, and the directory of the lock file they may only read. */
static char sandbox_root[PATH_MAX], sandbox_bin[PATH_MAX];
/* SIGTERM or SIGINT: stop reading, mark the tasks in flight, write what was read. */
static volatile sig_atomic_t stop_signal;

static void on_stop(int sig)
{
	stop_signal = sig;
}

/* ---------------------------------------------------------------- references */

static void load_references(void)
{
	char path[PATH_MAX];
	refs = ca_pylex_index_new();
	if (cfg.against) {
		snprintf(path, sizeof path, "%s", cfg.against);
	} else {
		snprintf(path, sizeof path, "%s/data/kernelbench-fingerprints.ndjson", ca_paths_share());
		if (access(path, R_OK) != 0) {
			refs_why = "no reference set (give --against FILE; the default data/kernelbench-fingerprints.ndjson is missing)";
			ca_err_warn("%s: similarity check skipped", path);
			return;
		}
	}
	char *files[] = {path};
	struct ca_ndjson_reader *r = ca_ndjson_open(1, files);
	jv rec;
	while (ca_ndjson_next_valid(r, &rec, NULL) != CA_NDJSON_EOF) {
		char name[512];
		double level, num;
		char *id = ca_json_strdup(rec, "id");
		char *pname = ca_json_strdup(rec, "name");
		if (ca_json_number(rec, "level", &level) == 1 && ca_json_number(rec, "num", &num) == 1)
			snprintf(name, sizeof name, "kernelbench/L%.0f/%.0f%s%s", level, num, pname ? " " : "", pname ? pname : "");
		else if (id)
			snprintf(name, sizeof name, "%s", id);
		else
			snprintf(name, sizeof name, "%s:%ld", ca_ndjson_name(r), ca_ndjson_line(r));
		free(id);
		free(pname);
		char *fp = ca_json_strdup(rec, "fingerprint");
		if (!fp) {
			char *code = ca_json_strdup(rec, "code");
			const char *why = "no code or fingerprint field";
			if (code)
				fp = ca_pylex_fingerprint(code, strlen(code), 0, &why);
			free(code);
			if (!fp)
				ca_ndjson_warn(r, "reference skipped: %s", why);
		}
		if (fp)
			ca_pylex_index_add(refs, name, fp);
		free(fp);
		jv_free(rec);
	}
	if (ca_ndjson_status(r) != CA_EXIT_OK)
		ca_err_die(CA_EXIT_SYSTEM, "%s: cannot read the reference set", path);
	ca_ndjson_close(r);
	if (ca_pylex_index_size(refs) == 0)
		refs_why = "the reference set is empty";
}

/* ---------------------------------------------------------------- static checks */

static const char *const stochastic_modules[] = {
	"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "RReLU", NULL,
};
static const char *const stochastic_calls[] = {
	"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "rrelu",
	"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "bernoulli",
	"multinomial", "normal", "poisson", "gumbel_softmax", "uniform_", "normal_", "exponential_",
	"geometric_", "cauchy_", "log_normal_", "random_", "bernoulli_", NULL,
};

static int listed(const char *s, size_t n, const char *const *list)
{
	for (int i = 0; list[i]; i++)
		if (strlen(list[i]) == n && !memcmp(list[i], s, n))
			return 1;
	return 0;
}

/* The next space-separated token at *p: its start, length in *n, *p moved past it. */
static const char *next_token(const char **p, size_t *n)
{
	while (**p == ' ')
		(*p)++;
	const char *t = *p;
	while (**p && **p != ' ')
		(*p)++;
	*n = (size_t)(*p - t);
	return *n ? t : NULL;
}

static int is_token(const char *t, size_t n, const char *want)
{
	return t && strlen(want) == n && !memcmp(t, want, n);
}

/* A numeric literal equal to zero (0, 0.0, 0., .0, 0e0). */
static int zero_literal(const char *t, size_t n)
{
	if (!t || n == 0 || n > 30 || !(isdigit((unsigned char)t[0]) || t[0] == '.'))
		return 0;
	char buf[32], *end;
	memcpy(buf, t, n);
	buf[n] = 0;
	double v = strtod(buf, &end);
	return *end == 0 && v == 0.0;
}

/*
 * A dropout that cannot drop: the call whose arguments start at p (a
 * fingerprint with literals kept) passes p=0 (as a keyword, or as the
 * positional argument at index pos_p), or training=False. nn.Dropout(0.0)
 * is common in KernelBench level 3 and is the identity. p is just past
 * the operator's name (name, namen).
 */
static int inert_dropout(const char *name, size_t namen, const char *p, int pos_p)
{
	size_t n;
	const char *t = next_token(&p, &n);
	/* The fingerprint repeats an API name to weigh it: step over the copies. */
	while (t && n == namen && !memcmp(t, name, n))
		t = next_token(&p, &n);
	if (!is_token(t, n, "("))
		return 0;
	int depth = 1, arg = 0, arg_tokens = 0, inert = 0;
	const char *first = NULL, *kw = NULL;
	size_t firstn = 0, kwn = 0;
	while ((t = next_token(&p, &n)) && depth > 0) {
		if (is_token(t, n, "(") || is_token(t, n, "[") || is_token(t, n, "{"))
			depth++;
		else if (is_token(t, n, ")") || is_token(t, n, "]") || is_token(t, n, "}"))
			depth--;
		int at_end = depth == 0 || (depth == 1 && is_token(t, n, ","));
		if (at_end) {
			/* One argument ended: a lone zero literal in p's place, or p=0 / training=False. */
			if (kw && (is_token(kw, kwn, "p") && zero_literal(first, firstn) && arg_tokens == 1))
				inert = 1;
			else if (kw && is_token(kw, kwn, "training") && is_token(first, firstn, "False") && arg_tokens == 1)
				inert = 1;
			else if (!kw && arg == pos_p && arg_tokens == 1 && zero_literal(first, firstn))
				inert = 1;
			if (!kw)
				arg++;
			kw = first = NULL;
			arg_tokens = 0;
			continue;
		}
		if (depth == 1 && is_token(t, n, "=") && arg_tokens == 1 && first) {
			kw = first;
			kwn = firstn;
			first = NULL;
			arg_tokens = 0;
			continue;
		}
		if (arg_tokens++ == 0) {
			first = t;
			firstn = n;
		}
	}
	return inert;
}

/*
 * Name of a random operator in the class (modules anywhere, calls in
 * forward), or NULL; fp keeps literals, so a dropout with p=0 is passed over.
 */
static char *stochastic_op(const char *fp)
{
	static char found[64];
	int in_forward = 0, depth = 0;
	const char *p = fp, *t, *prev = NULL;
	size_t n, prevn = 0;
	while ((t = next_token(&p, &n))) {
		if (is_token(prev, prevn, "def")) {
			in_forward = is_token(t, n, "forward");
			depth = 0;
		}
		if (in_forward && is_token(t, n, "{"))
			depth++;
		if (in_forward && is_token(t, n, "}") && --depth == 0)
			in_forward = 0;
		int module = listed(t, n, stochastic_modules), call = in_forward && listed(t, n, stochastic_calls);
		if (is_token(prev, prevn, ".") && (module || call) &&
		    !(memmem(t, n, "ropout", 6) && inert_dropout(t, n, p, module ? 0 : 1))) {
			snprintf(found, sizeof found, "%.*s", (int)n, t);
			return found;
		}
		prev = t;
		prevn = n;
	}
	return NULL;
}

/* ---------------------------------------------------------------- workers */

static char **worker_env(int index)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = ca_xcalloc(n + 6, sizeof *env);
	size_t k = 0;
	/* Workers compile in parallel already; inductor's own pool of
	 * compile processes per worker would oversubscribe the cores. */
	if (!getenv("TORCHINDUCTOR_COMPILE_THREADS"))
		env[k++] = ca_xstrdup("TORCHINDUCTOR_COMPILE_THREADS=1");
	for (size_t i = 0; i < n; i++) {
		if (cfg.ngpus && !strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21))
			continue;
		if (!strncmp(environ[i], "CA_SYNTH_TIMING_LOCK=", 21) || !strncmp(environ[i], "CA_CUPTI_LIB=", 13))
			continue;
		env[k++] = ca_xstrdup(environ[i]);
	}
	char buf[PATH_MAX + 64];
	if (cfg.ngpus) {
		snprintf(buf, sizeof buf, "CUDA_VISIBLE_DEVICES=%s", cfg.gpus[(size_t)index % cfg.ngpus]);
		env[k++] = ca_xstrdup(buf);
	}
	snprintf(buf, sizeof buf, "CA_SYNTH_TIMING_LOCK=%s", lock_path);
	env[k++] = ca_xstrdup(buf);
	/* The workload check times with ca-profile's loop, CUPTI's window included (see ca_runner.time_model). */
	char *cupti = strcmp(cfg.device, "cpu") != 0 ? ca_runner_cupti_env() : NULL;
	if (cupti)
		env[k++] = cupti;
	env[k] = NULL;
	return env;
}

static void tail_of_log(struct worker *w, char *out, size_t n)
{
	out[0] = '\0';
	struct stat st;
	if (w->log_fd < 0 || fstat(w->log_fd, &st) < 0 || st.st_size == 0)
		return;
	off_t from = st.st_size > (off_t)(n - 1) ? st.st_size - (off_t)(n - 1) : 0;
	ssize_t got = pread(w->log_fd, out, n - 1, from);
	if (got <= 0)
		return;
	out[got] = '\0';
	/* the last non-empty line is what matters (a Python exception's summary) */
	char *end = out + got;
	while (end > out && (end[-1] == '\n' || end[-1] == ' '))
		*--end = '\0';
	char *nl = strrchr(out, '\n');
	if (nl)
		memmove(out, nl + 1, strlen(nl + 1) + 1);
}

/*
 * --sandbox: the worker runs in ca-sandbox(1), as ca-verify runs candidates:
 * its own directory (the only writable place besides a private /tmp), no
 * network, the GPU only when the device may be one, the lock file for GPU
 * timing readable (flock needs no more) and a clean environment with what
 * torch needs passed through.
 */
static char **sandbox_argv(struct worker *w, const char *const *cmd)
{
	static const char *const pass[] = {"LD_LIBRARY_PATH=", "PYTHON", "CUDA_HOME=", "CUDA_VISIBLE_DEVICES=",
	                                   "NVIDIA_", "CA_SYNTH_", "CA_CUPTI_LIB=", "TORCH", "TRITON_", "OMP_NUM_THREADS=", NULL};
	char dir[PATH_MAX + 32], lock_dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/w%d", sandbox_root, w->index);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
		ca_err_warn_sys("%s", dir);
		return NULL;
	}
	struct ca_sandbox sb;
	ca_sandbox_init(&sb);
	sb.gpu = strcmp(cfg.device, "cpu") != 0;
	sb.dir = dir;
	if (cfg.sandbox_user)
		sb.uid = strtoll(cfg.sandbox_user, NULL, 10);  /* checked as an option */
	const char *ro[] = {ca_paths_pydir(), lock_dir};
	sb.ro = ro;
	sb.nro = 1;
	if (lock_path[0]) {
		snprintf(lock_dir, sizeof lock_dir, "%s", lock_path);
		char *slash = strrchr(lock_dir, '/');
		if (slash && slash != lock_dir)
			*slash = '\0';
		sb.nro = 2;
	}
	return ca_runner_sandboxed(&sb, cmd, w->env, pass);
}

/*
 * Workers start in parallel and in the background: spawn_worker only
 * launches the interpreter; its hello (after importing torch, starting
 * CUDA and, for GPU runs, warming torch.compile up) is awaited by the
 * worker's thread when its first task comes. So the start-up of all -j
 * workers overlaps, and overlaps whatever feeds ca-filter (ca-crawl |
 * ca-compose).
 */
static int spawn_worker(struct worker *w)
{
	static char script[PATH_MAX];
	const char *python = ca_paths_python();
	snprintf(script, sizeof script, "%s/ca_synth.py", ca_paths_pydir());
	/* torch.compile's first use in a process is slow; on a GPU the worker
	 * pays it before its hello, while the workers start together. */
	const char *plain[] = {python, script, "worker", cfg.compile && strcmp(cfg.device, "cpu") ? "--warm" : NULL, NULL};
	const char *const *argv = plain;
	if (!w->env)
		w->env = worker_env(w->index);
	if (cfg.sandbox) {
		if (!w->argv)
			w->argv = sandbox_argv(w, plain);
		if (!w->argv) {
			start_failures++;
			return -1;
		}
		argv = (const char *const *)w->argv;
	}
	if (w->log_fd < 0) {
		char tmpl[] = "/tmp/ca-filter-log.XXXXXX";
		w->log_fd = mkstemp(tmpl);
		if (w->log_fd >= 0) {
			unlink(tmpl);
			fcntl(w->log_fd, F_SETFL, O_APPEND);
		}
	}
	if (w->log_fd >= 0 && ftruncate(w->log_fd, 0) != 0)
		ca_err_warn_sys("worker log");
	ca_runner_init(&w->run);
	w->run.gone_grace_s = 5;
	w->up = 0;
	if (ca_runner_start(&w->run, argv, (const char *const *)w->env, NULL, w->log_fd) < 0) {
		ca_err_warn_sys("cannot start %s", argv[0]);
		start_failures++;
		return -1;
	}
	w->started = ca_proc_now();
	return 0;
}

/*
 * Wait for a started worker's hello, in slices so that a signal is seen:
 * at most HELLO_TIMEOUT_S from its start. 0 when it is up; -1 (told on
 * stderr, the worker gone) when it is not.
 */
static int await_hello(struct worker *w)
{
	enum ca_runner_result res;
	double deadline = w->started + HELLO_TIMEOUT_S;
	w->run.gone_grace_s = 0;
	for (;;) {
		double left = deadline - ca_proc_now();
		res = ca_runner_hello(&w->run, left < 0 ? 0 : left < 0.25 ? left : 0.25);
		if (res != CA_RUNNER_TIMEOUT || left <= 0.25 || stop_signal)
			break;
	}
	if (res == CA_RUNNER_TIMEOUT && stop_signal) {
		ca_runner_kill(&w->run);  /* not needed any more: no message */
		return -1;
	}
	if (res != CA_RUNNER_OK && res != CA_RUNNER_MALFORMED) {
		char tail[512];
		if (res == CA_RUNNER_TIMEOUT)
			ca_runner_kill(&w->run);
		ca_runner_close(&w->run, 0);
		tail_of_log(w, tail, sizeof tail);
		ca_err_warn("torch worker did not start%s: %s", res == CA_RUNNER_TIMEOUT ? " in time" : "",
			tail[0] ? tail : "no hello line");
		start_failures++;
		return -1;
	}
	jv h = res == CA_RUNNER_OK ? ca_json_get(w->run.hello, "hello") : jv_invalid();
	if (jv_get_kind(h) != JV_KIND_OBJECT) {
		jv_free(h);
		ca_runner_forget(&w->run);
		ca_runner_close(&w->run, 0);
		ca_err_warn("torch worker sent no hello");
		start_failures++;
		return -1;
	}
	char *t = ca_json_strdup(h, "torch");
	char *g = ca_json_strdup(h, "gpu");
	snprintf(w->torch, sizeof w->torch, "%s", t ? t : "?");
	snprintf(w->gpu, sizeof w->gpu, "%s", g ? g : "");
	free(t);
	free(g);
	w->cuda = ca_json_bool(h, "cuda") == 1;
	jv_free(h);
	w->up = 1;
	w->run.gone_grace_s = 5;  /* a checker that closed its output may still be saying why */
	start_failures = 0;
	return 0;
}

/*
 * The thread's worker up and idle: started again when it died (unless
 * every start since the last good one, by any thread, failed), its hello
 * awaited. -1 when it cannot be had, or on a signal.
 */
static int worker_up(struct worker *w)
{
	while (!stop_signal) {
		if (w->up && w->run.running)
			return 0;
		if (!w->run.running) {
			if (start_failures > cfg.jobs)
				return -1;
			ca_runner_forget(&w->run);
			if (spawn_worker(w) != 0)
				continue;
		}
		if (await_hello(w) == 0)
			return 0;
	}
	return -1;
}

/* ---------------------------------------------------------------- results */

static const char *const check_names[] = {"executable", "compile", "deterministic", "non_degenerate", "workload",
                                          "decontaminated", NULL};

/* Complete the filter object: ok, and checks in a fixed order. */
static jv finish_filter(jv f)
{
	jv checks = ca_json_get(f, "checks");
	if (jv_get_kind(checks) != JV_KIND_OBJECT) {
		jv_free(checks);
		checks = jv_object();
	}
	jv ordered = jv_object();
	int ok = 1, any = 0;
	for (int i = 0; check_names[i]; i++) {
		jv v = jv_object_get(jv_copy(checks), jv_string(check_names[i]));
		if (!jv_is_valid(v)) {
			jv_free(v);
			v = jv_null();
		}
		if (jv_get_kind(v) == JV_KIND_FALSE)
			ok = 0;
		if (jv_get_kind(v) == JV_KIND_TRUE)
			any = 1;
		ordered = jv_object_set(ordered, jv_string(check_names[i]), v);
	}
	jv_free(checks);
	jv reasons = ca_json_get(f, "reasons");
	if (jv_get_kind(reasons) == JV_KIND_ARRAY && jv_array_length(jv_copy(reasons)) > 0)
		ok = 0;
	if (jv_get_kind(reasons) != JV_KIND_ARRAY)
		f = jv_object_set(f, jv_string("reasons"), jv_array());
	jv_free(reasons);
	jv out = jv_object();
	out = jv_object_set(out, jv_string("ok"), ok && any ? jv_true() : jv_false());
	out = jv_object_set(out, jv_string("checks"), ordered);
	jv_object_foreach(f, k, v)
	{
		if (!strcmp(jv_string_value(k), "checks") || !strcmp(jv_string_value(k), "ok"))
			jv_free(k), jv_free(v);
		else
			out = jv_object_set(out, k, v);
	}
	jv_free(f);
	return out;
}

/* text appended to f's array key, which is made when f has none. */
static jv append_text(jv f, const char *key, const char *text)
{
	jv list = ca_json_get(f, key);
	if (jv_get_kind(list) != JV_KIND_ARRAY) {
		jv_free(list);
		list = jv_array();
	}
	list = jv_array_append(list, jv_string(text));
	return jv_object_set(f, jv_string(key), list);
}

/* Each string of the array key of answer (borrowed) appended to f's. */
static jv append_texts(jv f, jv answer, const char *key)
{
	jv list = ca_json_get(answer, key);
	if (jv_get_kind(list) == JV_KIND_ARRAY) {
		jv_array_foreach(list, i, text)
		{
			if (jv_get_kind(text) == JV_KIND_STRING)
				f = append_text(f, key, jv_string_value(text));
			jv_free(text);
		}
	}
	jv_free(list);
	return f;
}

static jv add_reason(jv f, const char *reason) { return append_text(f, "reasons", reason); }
static jv add_skipped(jv f, const char *what) { return append_text(f, "skipped", what); }

static jv set_check(jv f, const char *name, jv value)
{
	jv checks = ca_json_get(f, "checks");
	if (jv_get_kind(checks) != JV_KIND_OBJECT) {
		jv_free(checks);
		checks = jv_object();
	}
	checks = jv_object_set(checks, jv_string(name), value);
	return jv_object_set(f, jv_string("checks"), checks);
}

/* Merge the worker's answer (consumed) into the pending filter f; the finished filter. */
static jv complete(jv f, struct worker *w, jv answer)
{
	jv checks = ca_json_get(answer, "checks");
	if (jv_get_kind(checks) == JV_KIND_OBJECT) {
		jv_object_foreach(checks, k, v) f = set_check(f, jv_string_value(k), v), jv_free(k);
	}
	jv_free(checks);
	jv reasons = ca_json_get(answer, "reasons");
	int answered_reasons = jv_get_kind(reasons) == JV_KIND_ARRAY && jv_array_length(jv_copy(reasons)) > 0;
	jv_free(reasons);
	f = append_texts(f, answer, "reasons");
	f = append_texts(f, answer, "skipped");
	double eager, compiled;
	int has_eager = ca_json_number(answer, "eager_ms", &eager) == 1;
	f = jv_object_set(f, jv_string("eager_ms"), has_eager ? jv_number(round(eager * 1e4) / 1e4) : jv_null());
	f = jv_object_set(f, jv_string("compile_ms"), ca_json_number(answer, "compile_ms", &compiled) == 1 ?
	                  jv_number(round(compiled * 1e4) / 1e4) : jv_null());
	f = ca_json_copy_field(f, answer, "output_shape", JV_KIND_ARRAY);
	jv c = ca_json_path(answer, "checks.executable");
	int ran = jv_get_kind(c) == JV_KIND_TRUE;
	jv_free(c);
	if (w && w->cuda && strcmp(cfg.device, "cpu")) {
		if (!has_eager && ran && !answered_reasons) {
			f = set_check(f, "workload", jv_false());
			f = add_reason(f, "workload: no eager time was measured");
		} else if (!has_eager) {
			/* not timed: the task was rejected before (or did not run) */
			f = set_check(f, "workload", jv_null());
			if (ran)
				f = add_skipped(f, "workload: the task was already rejected");
		} else if (eager < cfg.min_ms || eager > cfg.max_ms) {
			char why[160];
			snprintf(why, sizeof why, "workload: eager time %.4g ms is outside [%g, %g] ms", eager, cfg.min_ms, cfg.max_ms);
			f = set_check(f, "workload", jv_false());
			f = add_reason(f, why);
		} else {
			f = set_check(f, "workload", jv_true());
		}
	} else {
		f = set_check(f, "workload", jv_null());
		f = add_skipped(f, "workload: needs a GPU (checked on the cpu)");
	}
	double secs;
	if (ca_json_number(answer, "check_s", &secs) == 1)
		f = jv_object_set(f, jv_string("seconds"), jv_number(secs));
	if (w) {
		f = jv_object_set(f, jv_string("device"), jv_string(w->cuda && strcmp(cfg.device, "cpu") ? "cuda" : "cpu"));
		if (w->gpu[0] && strcmp(cfg.device, "cpu"))
			f = jv_object_set(f, jv_string("gpu"), jv_string(w->gpu));
		f = jv_object_set(f, jv_string("torch"), jv_string(w->torch));
	}
	jv_free(answer);
	return finish_filter(f);
}

/*
 * The worker died (timed_out 0), ran out of time on its task (1) or was
 * stopped by a signal (2): the task's filter f gets the reason.
 */
static jv fail_worker(struct worker *w, jv f, int timed_out)
{
	char tail[400], why[600];
	int status = timed_out ? ca_runner_kill(&w->run) : ca_runner_close(&w->run, 5);
	tail_of_log(w, tail, sizeof tail);
	if (timed_out == 2)
		snprintf(why, sizeof why, "interrupted: ca-filter was stopped before the checks ended");
	else if (timed_out)
		snprintf(why, sizeof why, "timeout: the checks took more than %g s", cfg.timeout_s);
	else if (status > 128)
		snprintf(why, sizeof why, "crash: the checker was killed by signal %d%s%s", status - 128,
		         tail[0] ? ": " : "", tail);
	else
		snprintf(why, sizeof why, "crash: the checker exited with status %d%s%s", status, tail[0] ? ": " : "", tail);
	w->up = 0;
	f = add_reason(f, why);
	f = set_check(f, "executable", jv_false());
	f = jv_object_set(f, jv_string("torch"), jv_string(w->torch));
	return finish_filter(f);
}

/*
 * The answer to the task sent, awaited at most --timeout, in slices so
 * that a signal is seen; the finished filter.
 */
static jv await_answer(struct worker *w, jv f)
{
	double deadline = ca_proc_now() + cfg.timeout_s;
	for (;;) {
		if (stop_signal)
			return fail_worker(w, f, 2);
		double left = deadline - ca_proc_now();
		if (left <= 0)
			return fail_worker(w, f, 1);
		jv answer;
		enum ca_runner_result res = ca_runner_read(&w->run, ca_proc_now() + (left < 0.25 ? left : 0.25), &answer);
		if (res == CA_RUNNER_TIMEOUT)
			continue;
		if (res == CA_RUNNER_GONE || res == CA_RUNNER_TOO_LONG)
			return fail_worker(w, f, 0);
		if (res == CA_RUNNER_MALFORMED)
			return finish_filter(add_reason(f, "crash: the checker answered garbage"));
		return complete(f, w, answer);
	}
}

/* The request for the torch checks of code. */
static jv check_request(const char *code, const char *device)
{
	jv req = jv_object();
	req = jv_object_set(req, jv_string("code"), jv_string(code));
	req = jv_object_set(req, jv_string("device"), jv_string(device));
	req = jv_object_set(req, jv_string("compile"), cfg.compile ? jv_true() : jv_false());
	req = jv_object_set(req, jv_string("seed"), jv_number((double)cfg.seed));
	req = jv_object_set(req, jv_string("atol"), jv_number(cfg.atol));
	req = jv_object_set(req, jv_string("rtol"), jv_number(cfg.rtol));
	req = jv_object_set(req, jv_string("timing"), jv_true());
	req = jv_object_set(req, jv_string("min_ms"), jv_number(cfg.min_ms));
	req = jv_object_set(req, jv_string("max_ms"), jv_number(cfg.max_ms));
	return req;
}

/*
 * The torch checks of code on the thread's worker, merged into the
 * pending filter f; the finished filter. A worker that is gone when the
 * task is sent is started again once.
 */
static jv torch_checks(struct worker *w, jv f, const char *code, int *status)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		int up = worker_up(w);
		if (stop_signal)
			return finish_filter(add_reason(f, "interrupted: ca-filter was stopped before the checks ended"));
		if (up != 0) {
			*status = ca_err_worst(*status, CA_EXIT_SYSTEM);
			break;
		}
		const char *device = !strcmp(cfg.device, "auto") ? (w->cuda ? "cuda" : "cpu") : cfg.device;
		if (!strcmp(device, "cuda") && !w->cuda) {
			*status = ca_err_worst(*status, CA_EXIT_SYSTEM);
			return finish_filter(add_reason(f, "device: --device cuda but torch sees no GPU"));
		}
		if (ca_runner_send(&w->run, check_request(code, device)) != CA_RUNNER_OK) {
			w->up = 0;
			continue;
		}
		return await_answer(w, f);
	}
	return finish_filter(add_reason(f, "crash: no torch worker could be started"));
}

/* The pool's work: a task's torch checks, its filter so far in its "filter" field. */
static jv check_task(void *context, long index, jv record, void *data, int *status)
{
	jv f = ca_json_get(record, "filter");
	char *code = ca_json_strdup(record, "code");
	f = torch_checks(context, f, code, status);
	free(code);
	return jv_object_set(record, jv_string("filter"), f);
}

/* The pool's release, in input order: a task counted (and dropped when asked), an error record as it is. */
static int emit(void *ctx, jv record, int status, void *data)
{
	if (data != TASK) {
		ca_pool_write(record);
		return status;
	}
	jv ok = ca_json_path(record, "filter.ok");
	int accept = jv_get_kind(ok) == JV_KIND_TRUE;
	jv_free(ok);
	if (accept)
		accepted++;
	else
		rejected++;
	if (accept || !cfg.drop)
		ca_pool_write(record);
	else
		jv_free(record);
	ca_ndjson_progress_tick();
	return status;
}

/* ---------------------------------------------------------------- records */

/*
 * A task read from the line text[0..len): the checks done here in C, then
 * the torch checks by the pool, unless already rejected; in its turn either
 * way, its other fields written as they came.
 */
static void handle(struct ca_pool *pool, jv record, const char *text, size_t len)
{
	jv parsed = jv_copy(record);
	jv f = jv_object();
	char *code = ca_json_strdup(record, "code");
	if (!code) {
		ca_ndjson_record_warn("record has no code field");
		f = set_check(f, "executable", jv_false());
		f = finish_filter(add_reason(f, "input: no code field"));
		ca_pool_put_done_line(pool, jv_object_set(record, jv_string("filter"), f), CA_EXIT_DATA, parsed, text, len, TASK);
		return;
	}
	const char *why;
	char *fp = ca_pylex_fingerprint(code, strlen(code), 0, &why);
	int rejected_early = 0;
	if (!fp) {
		char reason[160];
		snprintf(reason, sizeof reason, "syntax: %s", why);
		f = add_reason(f, reason);
		f = set_check(f, "executable", jv_false());
		f = jv_object_set(f, jv_string("max_sim"), jv_null());
		rejected_early = 1;
	} else {
		if (refs && ca_pylex_index_size(refs) > 0) {
			const char *nearest = NULL;
			double sim = ca_pylex_index_best(refs, fp, &nearest);
			f = jv_object_set(f, jv_string("max_sim"), jv_number(round(sim * 1e4) / 1e4));
			f = jv_object_set(f, jv_string("nearest"), jv_string(nearest));
			if (sim > cfg.max_sim) {
				char reason[600];
				snprintf(reason, sizeof reason, "contaminated: similarity %.3f to %s exceeds %g", sim, nearest, cfg.max_sim);
				f = add_reason(f, reason);
				f = set_check(f, "decontaminated", jv_false());
				rejected_early = 1;
			} else {
				f = set_check(f, "decontaminated", jv_true());
			}
		} else {
			f = jv_object_set(f, jv_string("max_sim"), jv_null());
			f = add_skipped(f, refs_why ? refs_why : "no reference set");
		}
		char *lit = ca_pylex_fingerprint(code, strlen(code), CA_PYLEX_KEEP_LITERALS, &why);
		const char *op = stochastic_op(lit ? lit : fp);
		free(lit);
		if (op) {
			char reason[160];
			snprintf(reason, sizeof reason, "stochastic: the model uses %s", op);
			f = add_reason(f, reason);
			f = set_check(f, "deterministic", jv_false());
			rejected_early = 1;
		}
		free(fp);
	}
	free(code);
	if (rejected_early) {
		/* Not worth the torch checks; they are marked as not run. */
		f = finish_filter(add_skipped(f, "torch checks: rejected before running"));
		ca_pool_put_done_line(pool, jv_object_set(record, jv_string("filter"), f), CA_EXIT_OK, parsed, text, len, TASK);
	} else {
		ca_pool_put_line(pool, jv_object_set(record, jv_string("filter"), f), parsed, text, len, TASK);
	}
}

/* Every record read goes to the pool, malformed ones as error records; until a signal. The input's status. */
static int read_tasks(struct ca_pool *pool, int nfiles, char **files)
{
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	jv rec;
	int kind;
	while (!stop_signal && (kind = ca_ndjson_next(r, &rec)) != CA_NDJSON_EOF) {
		size_t len;
		const char *text = ca_ndjson_text(r, &len);
		if (kind == CA_NDJSON_BAD)
			ca_pool_put_malformed(pool, r, rec, NULL);
		else
			handle(pool, rec, text, len);
	}
	int status = ca_ndjson_status(r);
	ca_ndjson_close(r);
	return status;
}

/*
 * End of input to every worker first, then one grace period for all: a
 * CUDA worker can take seconds to exit, and waiting for them one after
 * another made -j 8 take half a minute to stop.
 */
static void stop_workers(void)
{
	for (long long i = 0; i < cfg.jobs; i++)
		if (workers[i].up && workers[i].run.running && workers[i].run.co.proc.in >= 0) {
			close(workers[i].run.co.proc.in);
			workers[i].run.co.proc.in = -1;
		}
	double grace_end = ca_proc_now() + 5;
	for (long long i = 0; i < cfg.jobs; i++) {
		struct worker *w = &workers[i];
		if (w->up) {
			double left = grace_end - ca_proc_now();
			ca_runner_close(&w->run, left > 0 ? left : 0);
		} else {
			/* never needed: no point waiting for its hello */
			ca_runner_kill(&w->run);
		}
		ca_runner_forget(&w->run);
		if (w->log_fd >= 0)
			close(w->log_fd);
		if (w->env) {
			for (char **e = w->env; *e; e++)
				free(*e);
			free(w->env);
		}
		ca_sandbox_command_free(w->argv);
	}
}

/* --fingerprint: add the similarity measure's token string instead of checking. */
static jv add_fingerprint(jv record, void *ctx, int *status)
{
	char *code = ca_json_strdup(record, "code");
	const char *why = "no code field";
	char *fp = code ? ca_pylex_fingerprint(code, strlen(code), 0, &why) : NULL;
	free(code);
	if (!fp) {
		ca_ndjson_record_warn("%s", why);
		*status = ca_err_worst(*status, CA_EXIT_DATA);
		return jv_object_set(record, jv_string("fingerprint"), jv_null());
	}
	record = jv_object_set(record, jv_string("fingerprint"), jv_string(fp));
	free(fp);
	return record;
}

static int split_gpus(const char *text)
{
	char *copy = ca_xstrdup(text);
	for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
		long long v;
		const char *why;
		if (ca_parse_long(tok, &v, &why) < 0 || v < 0)
			return -1;
		cfg.gpus = ca_xrealloc(cfg.gpus, (cfg.ngpus + 1) * sizeof *cfg.gpus);
		cfg.gpus[cfg.ngpus++] = ca_xstrdup(tok);
	}
	free(copy);
	return cfg.ngpus ? 0 : -1;
}

/* The options into cfg; *progress when --progress was given. Whether only fingerprints are asked. */
static int parse_options(int argc, char **argv, int *progress)
{
	static const struct option longopts[] = {
		{"against", required_argument, NULL, 'a'},
		{"atol", required_argument, NULL, 'A'},
		{"device", required_argument, NULL, 'D'},
		{"drop", no_argument, NULL, 'd'},
		{"fingerprint", no_argument, NULL, 'f'},
		{"gpus", required_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'},
		{"jobs", required_argument, NULL, 'j'},
		{"max-ms", required_argument, NULL, 'X'},
		{"max-sim", required_argument, NULL, 'S'},
		{"min-ms", required_argument, NULL, 'm'},
		{"no-compile", no_argument, NULL, 'C'},
		{"progress", no_argument, NULL, 'P'},
		{"rtol", required_argument, NULL, 'R'},
		{"sandbox", no_argument, NULL, 'B'},
		{"sandbox-user", required_argument, NULL, 'U'},
		{"seed", required_argument, NULL, 's'},
		{"timeout", required_argument, NULL, 't'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	int c, fingerprint_only = 0;
	while ((c = getopt_long(argc, argv, "hj:u", longopts, NULL)) != -1) {
		switch (c) {
		case 'a': cfg.against = optarg; break;
		case 'A': cfg.atol = ca_opt_double("--atol", optarg, 0, 1e9); break;
		case 'B': cfg.sandbox = 1; break;
		case 'U':
			ca_opt_long("--sandbox-user", optarg, 0, 4294967294LL);
			cfg.sandbox_user = optarg;
			cfg.sandbox = 1;
			break;
		case 'C': cfg.compile = 0; break;
		case 'd': cfg.drop = 1; break;
		case 'f': fingerprint_only = 1; break;
		case 'D':
			if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
				ca_err_warn("--device: expected auto, cpu or cuda");
				ca_opt_bad_usage();
			}
			cfg.device = optarg;
			break;
		case 'g':
			if (split_gpus(optarg) < 0) {
				ca_err_warn("--gpus: expected a comma-separated list of GPU indices");
				ca_opt_bad_usage();
			}
			break;
		case 'j': cfg.jobs = ca_opt_long("-j", optarg, 1, 256); break;
		case 'm': cfg.min_ms = ca_opt_double("--min-ms", optarg, 0, 1e9); break;
		case 'P': ca_ndjson_set_progress(1), *progress = 1; break;
		case 'R': cfg.rtol = ca_opt_double("--rtol", optarg, 0, 1e9); break;
		case 's': cfg.seed = ca_opt_long("--seed", optarg, 0, (long long)1 << 31); break;
		case 'S': cfg.max_sim = ca_opt_double("--max-sim", optarg, 0, 1); break;
		case 't': cfg.timeout_s = ca_opt_double("--timeout", optarg, 0.001, 1e7); break;
		case 'X': cfg.max_ms = ca_opt_double("--max-ms", optarg, 0, 1e9); break;
		default: ca_opt_common(c, usage_text);
		}
	}
	return fingerprint_only;
}

/*
 * The sandbox's root directory (with --sandbox) and the timing lock: one
 * lock file serialises GPU timing across workers (and across ca-filter
 * processes that share one GPU, given $CA_FILTER_TIMING_LOCK as
 * shared_lock, else NULL). Its descriptor, or -1 (then lock_path is empty).
 */
static int open_timing_lock(const char *shared_lock)
{
	const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	if (cfg.sandbox) {
		snprintf(sandbox_bin, sizeof sandbox_bin, "%s/ca-sandbox", ca_paths_bindir());
		if (access(sandbox_bin, X_OK) != 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s: not found (build it, or leave out --sandbox)", sandbox_bin);
		snprintf(sandbox_root, sizeof sandbox_root, "%s/ca-filter.XXXXXX", tmp);
		if (!mkdtemp(sandbox_root) || chmod(sandbox_root, 0755) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "cannot make a directory in %s", tmp);
	}
	if (shared_lock)
		snprintf(lock_path, sizeof lock_path, "%s", shared_lock);
	else if (cfg.sandbox)
		snprintf(lock_path, sizeof lock_path, "%s/lock/timing", sandbox_root);
	else
		snprintf(lock_path, sizeof lock_path, "%s/ca-filter-timing.%ld.lock", tmp, (long)getpid());
	if (cfg.sandbox && !shared_lock) {
		char dir[PATH_MAX + 8];
		snprintf(dir, sizeof dir, "%s/lock", sandbox_root);
		if (mkdir(dir, 0755) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "%s", dir);
	}
	int lock_fd = open(lock_path, O_CREAT | O_RDWR | O_CLOEXEC, 0644);
	if (lock_fd < 0)
		lock_path[0] = '\0';
	return lock_fd;
}

/* cfg.jobs workers, all started now, while the input is still coming; their pool contexts. */
static void **start_workers(void)
{
	workers = ca_xcalloc((size_t)cfg.jobs, sizeof *workers);
	void **contexts = ca_xcalloc((size_t)cfg.jobs, sizeof *contexts);
	for (long long i = 0; i < cfg.jobs; i++) {
		ca_runner_init(&workers[i].run);
		workers[i].log_fd = -1;
		workers[i].index = (int)i;
		contexts[i] = &workers[i];
	}
	for (long long i = 0; i < cfg.jobs; i++)
		spawn_worker(&workers[i]);
	return contexts;
}

int main(int argc, char **argv)
{
	int progress = 0;
	ca_err_init(argv[0]);
	if (parse_options(argc, argv, &progress))
		return ca_ndjson_map(argc - optind, argv + optind, add_fingerprint, NULL);
	if (cfg.jobs == 0) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		cfg.jobs = n < 1 ? 1 : n > 16 ? 16 : n;
	}
	load_references();
	const char *shared_lock = getenv("CA_FILTER_TIMING_LOCK");
	if (shared_lock && !*shared_lock)
		shared_lock = NULL;
	int lock_fd = open_timing_lock(shared_lock);
	void **contexts = start_workers();
	struct sigaction sa = {0};
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	/* A task is read when a worker is free for it, as the workers ask. */
	struct ca_pool_config pc = {.workers = (int)cfg.jobs, .contexts = contexts, .work = check_task, .release = emit};
	struct ca_pool *pool = ca_pool_start(&pc);
	int exit_status = read_tasks(pool, argc - optind, argv + optind);
	exit_status = ca_err_worst(exit_status, ca_pool_finish(pool));
	ca_ndjson_progress_done();
	stop_workers();
	free(contexts);
	if (lock_fd >= 0) {
		close(lock_fd);
		if (!shared_lock)
			unlink(lock_path);
	}
	if (sandbox_root[0])
		ca_file_remove_tree(sandbox_root);
	ca_pylex_index_free(refs);
	if (stop_signal) {
		ca_err_warn("stopped by signal %d; every record read was written", (int)stop_signal);
		exit_status = 128 + stop_signal;
	}
	ca_free_strings(cfg.gpus, cfg.ngpus);
	if (isatty(2) || progress)
		ca_err_warn("%lld accepted, %lld rejected", accepted, rejected);
	return ca_err_finish(exit_status);
}
