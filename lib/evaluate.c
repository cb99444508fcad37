/* evaluate: see evaluate.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "compare.h"
#include "err.h"
#include "evaluate.h"
#include "file.h"
#include "hash.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "paths.h"
#include "proc.h"
#include "tensor.h"

extern char **environ;

enum { PATHLEN = PATH_MAX + 64, MAX_SPARES = 8 };

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
	cfg->build_timeout_s = 300;
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

/* ------------------------------------------------------------------ kernel policy */

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

void ca_eval_baseline_key(const char *task_sha, const char *gpu, const char *torch_version,
		const char *method, int warmup, int iters, int sets, char hex[65])
{
	struct ca_sha256 s;
	char num[64];
	ca_sha256_init(&s);
	/*
	 * 7: on a GPU with CUPTI, the call's device window (the host's
	 * launch latency before the first kernel left out); 6: shipped
	 * inputs a file per timed call, each shown at its turn
	 * (sets: how many distinct files); 5: every timed call's seed asked
	 * for and sent live, so the round
	 * trip is in the loop's overhead (4: inputs drawn afresh before every
	 * call and each output digested; 3: sets cycled, every timed output
	 * copied for checks chosen after the loop; 2: CUDA events without; 1:
	 * the host clock); old entries are not mixed in.
	 */
	ca_sha256_string(&s, "ca-baseline-7");
	ca_sha256_string(&s, task_sha);
	ca_sha256_string(&s, gpu ? gpu : "cpu");
	ca_sha256_string(&s, torch_version ? torch_version : "");
	ca_sha256_string(&s, method);
	snprintf(num, sizeof num, "%d/%d/%d", warmup, iters, sets);
	ca_sha256_string(&s, num);
	ca_sha256_final_hex(&s, hex);
}

/* ------------------------------------------------------------------ files */

static int write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	size_t off = 0;
	while (off < len) {
		ssize_t n = write(fd, data + off, len - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			return -1;
		}
		off += (size_t)n;
	}
	return close(fd);
}

static char *read_file(const char *path, size_t cap, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	char *buf = ca_xmalloc(cap + 1);
	size_t n = fread(buf, 1, cap, fp);
	fclose(fp);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

/* The last lines of a log file, at most max bytes, or "" (malloc'd). */
static char *log_tail(const char *path, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ca_xstrdup("");
	off_t end = lseek(fd, 0, SEEK_END);
	off_t start = end > (off_t)max ? end - (off_t)max : 0;
	char *buf = ca_xmalloc(max + 1);
	ssize_t n = pread(fd, buf, max, start);
	close(fd);
	if (n < 0)
		n = 0;
	buf[n] = '\0';
	char *p = buf;
	if (start > 0 && (p = strchr(buf, '\n')))
		p++;
	else
		p = buf;
	/* Keep it printable. */
	for (char *q = p; *q; q++)
		if ((unsigned char)*q < 32 && *q != '\n' && *q != '\t')
			*q = '?';
	size_t l = strlen(p);
	while (l && (p[l - 1] == '\n' || p[l - 1] == ' '))
		p[--l] = '\0';
	char *out = ca_xstrdup(p);
	free(buf);
	return out;
}

static int mkdir_mode(const char *path, mode_t mode)
{
	if (mkdir(path, mode) != 0 && errno != EEXIST)
		return -1;
	return chmod(path, mode);
}

/* A relative path that stays inside its directory. */
static int safe_relative(const char *name)
{
	if (!*name || name[0] == '/' || strlen(name) > 512)
		return 0;
	const char *p = name;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		if (*p == '/')
			p++;
	}
	return 1;
}

/* Write candidate.files (consumed) into dir; NULL, or why in why. */
static const char *write_files(const char *dir, jv files, char *why, size_t why_len)
{
	const char *failed = NULL;
	jv_object_foreach(files, key, value) {
		const char *name = jv_string_value(key);
		char path[PATHLEN];
		if (!failed && (jv_get_kind(value) != JV_KIND_STRING || !safe_relative(name))) {
			snprintf(why, why_len, "candidate.files: bad entry %s", name);
			failed = why;
		}
		if (!failed) {
			snprintf(path, sizeof path, "%s/%s", dir, name);
			for (char *sl = path + strlen(dir) + 1; (sl = strchr(sl, '/')); sl++) {
				*sl = '\0';
				mkdir_mode(path, 0777);
				*sl = '/';
			}
			if (write_file(path, jv_string_value(value), (size_t)jv_string_length_bytes(jv_copy(value))) != 0) {
				snprintf(why, why_len, "cannot write %s: %s", path, strerror(errno));
				failed = why;
			}
		}
		jv_free(key);
		jv_free(value);
	}
	jv_free(files);
	return failed;
}

static int chmod_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D)
		chmod(path, 0777);
	else if (flag == FTW_F)
		chmod(path, (st->st_mode & 0111) ? 0755 : 0644);
	return 0;
}

/* Whether dir/kernels holds sources ca-build must compile. */
static int has_kernel_sources(const char *dir)
{
	char path[PATHLEN];
	snprintf(path, sizeof path, "%s/kernels", dir);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	struct dirent *e;
	int found = 0;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if ((n > 3 && !strcmp(e->d_name + n - 3, ".cu")) || (n > 4 && !strcmp(e->d_name + n - 4, ".cpp")))
			found = 1;
	}
	closedir(d);
	return found;
}

/* ------------------------------------------------------------------ workers */

struct worker {
	struct ca_coproc co;
	int running;
	char log[PATHLEN];
	char dir[PATHLEN];       /* candidate: its private workspace */
	jv hello;                /* the ready line */
	char **argv;
	char **env;
	double limit_s;          /* of the request in flight, for messages */
};

struct pool;
struct slot;
/* Whether the slot's stream may still bring records (see struct pool). */
static int more_records(struct slot *s);

struct slot {
	const struct ca_eval_config *cfg;
	struct pool *pool;       /* the stream's records (NULL for a server: more may come) */
	int index;
	int gpu;                 /* -1 for cpu */
	char root[PATHLEN];      /* private temp root (0711) */
	char trusted[PATHLEN];   /* reference files, hidden from candidates (0700) */
	struct worker reference;
	struct worker spare[MAX_SPARES];  /* candidate workers started ahead, oldest first */
	int nspares;             /* how many to keep started */
	long serial;
	pthread_t thread;
	int lock_fd;             /* the GPU's lock file (see gpu_lock), -1 on the CPU */
};

/*
 * Timed calls must have the GPU to themselves: ca-profile holds the GPU's
 * lock file exclusively around each timed loop, and the checks of
 * ca-verify (and the input draws of ca-profile) hold it shared, so in
 * `ca-verify | ca-profile`, or with several slots on one GPU, checks wait
 * while a loop is timed. op: LOCK_SH, LOCK_EX or LOCK_UN.
 */
static void gpu_lock(struct slot *s, int op)
{
	if (s->lock_fd >= 0)
		while (flock(s->lock_fd, op) != 0 && errno == EINTR)
			;
}

/*
 * Quiet loops. A worker's start-up (Python, torch, CUDA's context: seconds
 * of CPU, and driver work on the GPU) beside a timed loop lengthens the
 * loop's own work and delays our reading of its lines, and the reference's
 * overhead that our clock subtracts may have been measured without one:
 * on the H200 (t0150, three slots, spares starting as records finished)
 * honest/sum failed "timer tampered" in all four of its loops, and a
 * patched clock passed. So, within this process, a worker does not start
 * while a loop is timed, and a timed loop first waits until the workers
 * starting have said they are up (their first line is there, or they are
 * gone), each wait at most quiet_wait_s ($CA_EVAL_QUIET_S, 6 s by default;
 * 0 turns it off); by GPU, so that the slots of several GPUs do not wait
 * for each other. Workers are known by their stdout pipe and pid,
 * registered when started and dropped when their hello is read or they
 * are stopped, under quiet_mu.
 */
enum { MAX_STARTING = 256 };
static pthread_mutex_t quiet_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t quiet_cv = PTHREAD_COND_INITIALIZER;
static struct {
	int fd;
	pid_t pid;
	int gpu;
} starting[MAX_STARTING];
static int nstarting;
static int ntiming[1025];  /* by GPU + 1 (0: the CPU) */

static double quiet_wait_s(void)
{
	const char *env = getenv("CA_EVAL_QUIET_S");
	return env && *env ? strtod(env, NULL) : 6;
}

/* Wait on quiet_cv (quiet_mu held) at most ms milliseconds. */
static void quiet_nap(int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&quiet_cv, &quiet_mu, &ts);
}

static int quiet_index(int gpu)
{
	return gpu < 0 ? 0 : gpu < 1024 ? gpu + 1 : 1024;
}

/* Before a worker is started on gpu (-1: the CPU): not while a loop is timed there. */
static void quiet_before_start(int gpu)
{
	double until = ca_proc_now() + quiet_wait_s();
	pthread_mutex_lock(&quiet_mu);
	while (ntiming[quiet_index(gpu)] > 0 && ca_proc_now() < until)
		quiet_nap(10);
	pthread_mutex_unlock(&quiet_mu);
}

static void quiet_started(int fd, pid_t pid, int gpu)
{
	pthread_mutex_lock(&quiet_mu);
	if (fd >= 0 && nstarting < MAX_STARTING) {
		starting[nstarting].fd = fd;
		starting[nstarting].pid = pid;
		starting[nstarting].gpu = quiet_index(gpu);
		nstarting++;
	}
	pthread_mutex_unlock(&quiet_mu);
}

/* The worker with this pipe and pid is up, or gone: no longer starting. */
static void quiet_done(int fd, pid_t pid)
{
	pthread_mutex_lock(&quiet_mu);
	for (int i = 0; i < nstarting; i++)
		if (starting[i].fd == fd && starting[i].pid == pid) {
			starting[i] = starting[--nstarting];
			break;
		}
	pthread_cond_broadcast(&quiet_cv);
	pthread_mutex_unlock(&quiet_mu);
}

/*
 * Before a timed loop (before its GPU lock): new starts wait, and this
 * waits for the starts in flight, a worker whose first line is there (or
 * whose pipe closed) counting as up.
 */
static void quiet_loop_begin(int gpu)
{
	double until = ca_proc_now() + quiet_wait_s();
	int at = quiet_index(gpu);
	pthread_mutex_lock(&quiet_mu);
	ntiming[at]++;
	for (;;) {
		int left = 0;
		for (int i = 0; i < nstarting;) {
			struct pollfd p = {starting[i].fd, POLLIN, 0};
			if (poll(&p, 1, 0) != 0) {
				starting[i] = starting[--nstarting];
				continue;
			}
			left += starting[i].gpu == at;
			i++;
		}
		if (left == 0 || ca_proc_now() >= until)
			break;
		quiet_nap(5);
	}
	pthread_mutex_unlock(&quiet_mu);
}

static void quiet_loop_end(int gpu)
{
	pthread_mutex_lock(&quiet_mu);
	ntiming[quiet_index(gpu)]--;
	pthread_cond_broadcast(&quiet_cv);
	pthread_mutex_unlock(&quiet_mu);
}

/* Around every timed loop, the reference's and the candidate's: quiet, and the GPU to itself. */
static void timed_loop_begin(struct slot *s)
{
	quiet_loop_begin(s->gpu);
	gpu_lock(s, LOCK_EX);
}

static void timed_loop_end(struct slot *s)
{
	gpu_lock(s, LOCK_UN);
	quiet_loop_end(s->gpu);
}

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
static void worker_stop(struct worker *w, double grace)
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
static void worker_abandon(struct worker *w)
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
static int worker_send(struct worker *w, jv req, jv *fault)
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

/*
 * Our own clock around a worker's timed loop: when its lines
 * {"timing":"start"}, {"timing":"ready"} (a timed call's inputs are in
 * place), {"timing":"tick"} (one after each timed call) and
 * {"timing":"end"} arrived. readies[i] is noted only when it comes
 * between tick i - 1 and tick i, so the phases of call i are
 * readies[i] - ticks[i - 1] (its inputs) and ticks[i] - readies[i] (the
 * call, its flush and its output's digest).
 */
struct loop_clock {
	double start, end;
	double *ticks, *readies;
	int nticks, nreadies, cap;
	/*
	 * The spot checks chosen after the loop (a worker that kept every
	 * timed call's output asks with its end line): want of iters calls,
	 * the last always among them; asked[0..nasked) what was answered.
	 */
	int want, iters;
	int asked[64], nasked;
	/*
	 * Each tick carries the digest of its call's output (sum, sum of
	 * magnitudes, sum of squares, float64): a kept output written later
	 * must match the digest sent while our clock ran, so the work cannot
	 * be left for after the loop; with the checks named before the loop,
	 * calls picked after it are compared with the reference's
	 * (digest_spot_checks).
	 */
	double (*digests)[3];  /* digests[i]: tick i's (NAN where it sent none) */
	/*
	 * The timed calls' seeds, live[0..nlive) (NULL when the loop's inputs
	 * are shipped as files), sent one at a time as the worker asks with
	 * {"timing":"seed"} right before each call's draw: call k's only once
	 * the loop started and calls 0..k-1 ticked, so that no call's inputs
	 * can be drawn before the calls before it are done (nsent so far; set
	 * to 0 with live before each loop, not by loop_clock_reset).
	 */
	const unsigned long long *live;
	int nlive, nsent;
	/*
	 * Shipped inputs (the candidate's draws differed from the reference's),
	 * live the same way: timed call k's file is ship_from + (k % nship) +
	 * ".ten" in the trusted directory, put at ship_to + k + ".ten" (a hard
	 * link, else a copy) only when the worker asks with {"timing": "input"}
	 * under the same rule as a seed, and the answer {"input": path} names
	 * it; ship 0 when the loop draws. nlive counts these calls too.
	 */
	int ship, nship;
	char ship_from[PATHLEN], ship_to[PATHLEN];
};

/*
 * 64 bits from the kernel's random source (the clock and pid mixed when
 * getrandom fails): what nothing in a worker's process can predict.
 */
static unsigned long long random_u64(void)
{
	unsigned long long v = 0;
	if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
		v = (unsigned long long)(ca_proc_now() * 1e9) * 1000003ULL ^ (unsigned long long)getpid();
	return v;
}

/*
 * Put the file from at to (replacing what is there): a hard link, which
 * costs microseconds whatever the size, else a copy. 0, or -1.
 */
static int reveal_file(const char *from, const char *to)
{
	unlink(to);
	if (link(from, to) == 0)
		return 0;
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
	if (in >= 0)
		out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out >= 0) {
		char buf[1 << 16];
		ssize_t n;
		rc = 0;
		while ((n = read(in, buf, sizeof buf)) != 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 || write(out, buf, (size_t)n) != n) {
				rc = -1;
				break;
			}
		}
		if (close(out) != 0)
			rc = -1;
	}
	int saved = errno;
	if (in >= 0)
		close(in);
	if (rc != 0)
		unlink(to);
	errno = saved;
	return rc;
}

/*
 * Whose fault it is that a file could not be put in the candidate's
 * directory once its code ran (errno err): a full disk or an I/O error is
 * the evaluator's ("system"); anything else -- the directory made
 * unwritable, removed, or a file put where ours goes -- is the
 * candidate's doing ("run"), so it cannot turn its -1 into an evaluator
 * fault. why gets the message.
 */
static const char *placing_failed(int err, const char *what, char *why, size_t size)
{
	int ours = err == ENOSPC || err == EDQUOT || err == EIO || err == ENOMEM || err == EMFILE || err == ENFILE;
	snprintf(why, size, "cannot put %s in the candidate's directory: %s%s", what, strerror(err),
		ours ? "" : " (the candidate changed its directory)");
	return ours ? "system" : "run";
}

/* What a loop clock holds (its ticks, ready lines and digests). */
static void loop_clock_free(struct loop_clock *c)
{
	free(c->ticks);
	free(c->readies);
	free(c->digests);
	c->ticks = c->readies = NULL;
	c->digests = NULL;
}

static void loop_clock_reset(struct loop_clock *c)
{
	c->start = c->end = 0;
	c->nticks = 0;
	c->nreadies = 0;
	c->nasked = 0;
}

/*
 * Choose the calls to check after a timed loop: the last (work left
 * running shows there) and want - 1 others, drawn from the kernel's
 * random source, so that nothing in the worker's process could have
 * predicted them; into c->asked, as the JSON answer.
 */
static jv loop_clock_choose(struct loop_clock *c)
{
	jv keep = jv_array();
	int iters = c->iters, want = c->want < iters ? c->want : iters;
	if (want > (int)(sizeof c->asked / sizeof c->asked[0]))
		want = (int)(sizeof c->asked / sizeof c->asked[0]);
	c->nasked = 0;
	if (want <= 0)
		return jv_object_set(jv_object(), jv_string("keep"), keep);
	c->asked[c->nasked++] = iters - 1;
	keep = jv_array_append(keep, jv_number(iters - 1));
	while (c->nasked < want) {
		int i = (int)(random_u64() % (unsigned long long)iters), seen = 0;
		for (int k = 0; k < c->nasked; k++)
			seen |= c->asked[k] == i;
		if (seen)
			continue;
		c->asked[c->nasked++] = i;
		keep = jv_array_append(keep, jv_number(i));
	}
	return jv_object_set(jv_object(), jv_string("keep"), keep);
}

static void loop_clock_note(struct loop_clock *c, const char *what, jv line)
{
	double now = ca_proc_now();
	if (!strcmp(what, "start")) {
		loop_clock_reset(c);
		c->start = now;
	} else if (!strcmp(what, "end")) {
		c->end = now;
	} else if ((!strcmp(what, "tick") || !strcmp(what, "ready")) && c->nticks < 1000000) {
		if (c->nticks == c->cap) {
			c->cap = c->cap ? 2 * c->cap : 64;
			c->ticks = ca_xrealloc(c->ticks, (size_t)c->cap * sizeof *c->ticks);
			c->readies = ca_xrealloc(c->readies, (size_t)c->cap * sizeof *c->readies);
			c->digests = ca_xrealloc(c->digests, (size_t)c->cap * sizeof *c->digests);
		}
		if (!strcmp(what, "ready")) {
			if (c->nreadies == c->nticks)
				c->readies[c->nreadies++] = now;
			return;
		}
		c->ticks[c->nticks] = now;
		jv d = ca_json_get(line, "d");
		int have = jv_get_kind(d) == JV_KIND_ARRAY && jv_array_length(jv_copy(d)) == 3;
		for (int k = 0; k < 3; k++) {
			jv x = have ? jv_array_get(jv_copy(d), k) : jv_invalid();
			c->digests[c->nticks][k] = jv_get_kind(x) == JV_KIND_NUMBER ? jv_number_value(x) : NAN;
			jv_free(x);
		}
		jv_free(d);
		c->nticks++;
	}
}

/*
 * The digest of a tensor file as the worker computes one (sums over every
 * element of every entry, widened to double); 0, or -1 when it cannot be
 * read.
 */
static int file_digest(const char *path, double out[3])
{
	struct ca_tensor_file f;
	char why[256];
	if (ca_tensor_read(path, 0, &f, why, sizeof why) != 0)
		return -1;
	out[0] = out[1] = out[2] = 0;
	for (int e = 0; e < f.count; e++)
		for (uint64_t i = 0; i < f.entries[e].numel; i++) {
			double v = ca_tensor_value(&f.entries[e], i);
			out[0] += v;
			out[1] += fabs(v);
			out[2] += v * v;
		}
	ca_tensor_free(&f);
	return 0;
}

/*
 * Whether a digest computed here matches the worker's: float64 sums taken
 * in another order (torch reduces pairwise, we add in sequence) differ by
 * at most the count times the double epsilon of the sum of magnitudes,
 * under 1e-8 of it for the 36M elements a kept output holds at most
 * (4 GiB over 30 calls), typically 1e-12; the tolerance is 1e-7 of it.
 * A missing (NaN) digest never matches.
 */
static int digest_agrees(const double mine[3], const double theirs[3])
{
	double tol = 1e-7 * mine[1] + 1e-300, tol2 = 1e-7 * mine[2] + 1e-300;
	return fabs(mine[0] - theirs[0]) <= tol && fabs(mine[1] - theirs[1]) <= tol &&
		fabs(mine[2] - theirs[2]) <= tol2;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median_of(double *v, int n)
{
	if (n <= 0)
		return NAN;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The q-quantile (0..1) of v[0..n), sorting v; NAN when n is 0. */
static double quantile_of(double *v, int n, double q)
{
	if (n <= 0)
		return NAN;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return v[(int)(q * (n - 1))];
}

/*
 * The seconds each of the first n timed calls took on our clock (from the
 * previous tick, the first from the start) into out; how many there were.
 */
static int loop_clock_calls(const struct loop_clock *c, double *out, int n)
{
	if (!(c->start > 0))
		return 0;
	int m = c->nticks < n ? c->nticks : n;
	for (int i = 0; i < m; i++)
		out[i] = c->ticks[i] - (i ? c->ticks[i - 1] : c->start);
	return m;
}

/*
 * The two phases of each of the first n timed calls on our clock, in
 * seconds: from the previous tick (the first from the start) to its ready
 * line into inputs[], from there to its tick into call[]. n when every
 * call had both lines, else 0.
 */
static int loop_clock_phases(const struct loop_clock *c, double *inputs, double *call, int n)
{
	if (!(c->start > 0) || c->nticks < n || c->nreadies < n)
		return 0;
	for (int i = 0; i < n; i++) {
		inputs[i] = c->readies[i] - (i ? c->ticks[i - 1] : c->start);
		call[i] = c->ticks[i] - c->readies[i];
	}
	return n;
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
static int worker_recv(struct worker *w, double deadline, jv *reply, jv *fault, struct loop_clock *ours)
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
static int worker_call(struct worker *w, jv req, double timeout_s, jv *reply, jv *fault, struct loop_clock *ours)
{
	*reply = jv_invalid();
	w->limit_s = timeout_s;
	if (worker_send(w, req, fault) != 0)
		return -1;
	return worker_recv(w, ca_proc_now() + timeout_s, reply, fault, ours);
}

/* Start a worker; the ready line goes to w->hello. -1 with *fault on failure. */
static int worker_start(struct slot *s, struct worker *w, int candidate, jv *fault)
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
static int worker_ready(struct worker *w, double timeout_s, jv *fault)
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

/* ------------------------------------------------------------------ slots */

/*
 * Where tensor files go: $CA_EVAL_TMPDIR, else /dev/shm when it is a
 * writable tmpfs with room for large tasks (inputs and outputs of a
 * KernelBench task reach gigabytes, and a disk turns seconds into
 * minutes), else $TMPDIR or /tmp.
 */
static const char *temp_base(void)
{
	const char *env = getenv("CA_EVAL_TMPDIR");
	if (env && *env)
		return env;
	struct statvfs vfs;
	if (access("/dev/shm", W_OK | X_OK) == 0 && statvfs("/dev/shm", &vfs) == 0 &&
			(double)vfs.f_bavail * (double)vfs.f_frsize >= 16e9)
		return "/dev/shm";
	env = getenv("TMPDIR");
	return env && *env ? env : "/tmp";
}

static int slot_open(struct slot *s, const struct ca_eval_config *cfg, int index, int gpu)
{
	memset(s, 0, sizeof *s);
	s->cfg = cfg;
	s->index = index;
	s->gpu = gpu;
	s->reference.hello = jv_invalid();
	for (int i = 0; i < MAX_SPARES; i++)
		s->spare[i].hello = jv_invalid();
	/*
	 * Spare candidates: one start-up (Python, torch, CUDA: seconds) per
	 * candidate is the floor of a record's time, so on a GPU two are kept
	 * starting while records are scored ($CA_EVAL_SPARES to change).
	 */
	const char *env = getenv("CA_EVAL_SPARES");
	s->nspares = env && *env ? atoi(env) : gpu >= 0 ? (cfg->serving ? 4 : 2) : 1;
	if (cfg->adhoc || s->nspares < 1)
		s->nspares = 1;
	if (s->nspares > MAX_SPARES)
		s->nspares = MAX_SPARES;
	snprintf(s->root, sizeof s->root, "%s/ca-eval.XXXXXX", temp_base());
	if (!mkdtemp(s->root))
		return -1;
	chmod(s->root, 0711);
	snprintf(s->trusted, sizeof s->trusted, "%s/trusted", s->root);
	s->lock_fd = -1;
	if (gpu >= 0) {
		/* In a directory of our own (0700): a candidate must not be able to take the lock. */
		char lock[PATHLEN];
		snprintf(lock, sizeof lock, "%s/ca-locks-%ld", temp_base(), (long)geteuid());
		struct stat st;
		if ((mkdir(lock, 0700) == 0 || errno == EEXIST) && lstat(lock, &st) == 0 && S_ISDIR(st.st_mode) &&
				st.st_uid == geteuid() && (st.st_mode & 077) == 0) {
			size_t n = strlen(lock);
			snprintf(lock + n, sizeof lock - n, "/gpu-%d", gpu);
			s->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		}
	}
	return mkdir_mode(s->trusted, 0700);
}

/*
 * At the end of the run: kill the slot's workers, leaving them to the
 * kernel to reap, and remove its directory.
 */
static void slot_close(struct slot *s)
{
	for (int i = 0; i < MAX_SPARES; i++)
		worker_abandon(&s->spare[i]);
	worker_abandon(&s->reference);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	if (s->root[0])
		ca_file_remove_tree(s->root);
}

/* A fresh candidate worker on an empty private directory (the spare if one is ready). */
static int candidate_take(struct slot *s, struct worker *out, jv *fault)
{
	for (int i = 0; i < s->nspares; i++) {
		/* A spare that has died waiting (its sandbox's wall-clock limit) is replaced. */
		if (s->spare[i].running && !jv_is_valid(s->spare[i].hello) && ca_proc_wait_exit(&s->spare[i].co.proc, 0))
			worker_stop(&s->spare[i], 0);
		if (!s->spare[i].running)
			continue;
		*out = s->spare[i];
		memmove(&s->spare[i], &s->spare[i + 1], (size_t)(MAX_SPARES - 1 - i) * sizeof s->spare[0]);
		memset(&s->spare[MAX_SPARES - 1], 0, sizeof s->spare[0]);
		s->spare[MAX_SPARES - 1].hello = jv_invalid();
		return 0;
	}
	memset(out, 0, sizeof *out);
	out->hello = jv_invalid();
	snprintf(out->dir, sizeof out->dir, "%s/ws-%ld", s->root, ++s->serial);
	if (mkdir_mode(out->dir, 0777) != 0) {
		*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string("system")),
			jv_string("error"), jv_string("cannot create the candidate's directory"));
		return -1;
	}
	return worker_start(s, out, 1, fault);
}

/* Start spare candidate workers, so the next records find them up. */
static void spare_start(struct slot *s)
{
	for (int i = 0; i < s->nspares; i++) {
		struct worker *w = &s->spare[i];
		jv fault = jv_invalid();
		if (w->running)
			continue;
		worker_stop(w, 0);
		memset(w, 0, sizeof *w);
		w->hello = jv_invalid();
		snprintf(w->dir, sizeof w->dir, "%s/ws-%ld", s->root, ++s->serial);
		if (mkdir_mode(w->dir, 0777) != 0 || worker_start(s, w, 1, &fault) != 0) {
			ca_file_remove_tree(w->dir);
			w->running = 0;
		}
		jv_free(fault);
	}
}

static void candidate_release(struct slot *s, struct worker *w)
{
	worker_stop(w, 0);
	if (w->dir[0])
		ca_file_remove_tree(w->dir);
	if (!s->cfg->adhoc && more_records(s))
		spare_start(s);
}

static int reference_ready(struct slot *s, jv *fault)
{
	if (!s->reference.running) {
		worker_stop(&s->reference, 0);
		memset(&s->reference, 0, sizeof s->reference);
		s->reference.hello = jv_invalid();
		if (worker_start(s, &s->reference, 0, fault) != 0)
			return -1;
	}
	return worker_ready(&s->reference, s->cfg->load_timeout_s, fault);
}

/* ------------------------------------------------------------------ one record */

struct job {
	struct slot *slot;
	jv result;               /* the verify/profile object being built */
	struct worker cand;
	char task_sha[65];
	char io[PATHLEN];        /* candidate dir/.ca-io: inputs and outputs */
	char kernels_lib[PATHLEN];
	char ext_key[65];        /* torch extensions cache key ("" when the candidate builds none) */
	int loaded;              /* the candidate's ModelNew loaded */
	jv sizes;                /* the task's size globals, {name: value} (ca_runner's size_globals) */
	char task_path[PATHLEN];  /* the task's code where the candidate can read it */
	unsigned long long seed;
	/*
	 * The profile loop's seeds by call, warm-up first (nseeds: warmup +
	 * iters): the warm-up calls' from seed, the timed calls' from
	 * getrandom (see draw_seeds); NULL before the profile.
	 */
	unsigned long long *seeds;
	int nseeds;
	int ship;                /* inputs go as files: the candidate's own draws differed */
	int nship;               /* shipped, the distinct timed calls' files (see profile_sets) */
	jv ship_digests;         /* and their inputs' digests as the reference wrote them */
	jv weights_req;
	double started;
	jv phases;               /* seconds by phase */
	double mark;             /* when the last phase ended */
};

/* A robustness check's inputs: the task's draw under seed moved to dist (ca_runner's robust_inputs). */
struct robust_spec {
	const char *dist;
	int signed_values;       /* a random sign per value; 0: magnitudes with the task's signs */
	unsigned long long seed;
};

static jv set_str(jv o, const char *k, const char *v) { return jv_object_set(o, jv_string(k), jv_string(v)); }
static jv set_num(jv o, const char *k, double v) { return jv_object_set(o, jv_string(k), ca_json_num_or_null(v)); }

/* Charge the time since the last mark to phase name. */
static void phase(struct job *j, const char *name)
{
	double now = ca_proc_now(), prev = 0;
	jv v = jv_object_get(jv_copy(j->phases), jv_string(name));
	if (jv_get_kind(v) == JV_KIND_NUMBER)
		prev = jv_number_value(v);
	jv_free(v);
	j->phases = jv_object_set(j->phases, jv_string(name), jv_number(round((prev + now - j->mark) * 1e4) / 1e4));
	j->mark = now;
}

static void job_fail(struct job *j, const char *stage, const char *error)
{
	j->result = jv_object_set(j->result, jv_string("ok"), jv_false());
	j->result = set_str(j->result, "stage", stage);
	j->result = set_str(j->result, "error", error);
}

/* Merge a fault object {"stage","error"} (consumed) into the result. */
static void job_fault(struct job *j, jv fault, const char *prefix)
{
	char *stage = ca_json_strdup(fault, "stage");
	char *error = ca_json_strdup(fault, "error");
	char msg[4096];
	snprintf(msg, sizeof msg, "%s%s", prefix ? prefix : "", error ? error : "unknown failure");
	job_fail(j, stage ? stage : "crash", msg);
	jv detail = ca_json_get(fault, "detail");
	if (jv_get_kind(detail) == JV_KIND_STRING)
		j->result = jv_object_set(j->result, jv_string("detail"), detail);
	else
		jv_free(detail);
	jv forbidden = ca_json_get(fault, "forbidden");
	if (jv_get_kind(forbidden) == JV_KIND_ARRAY)
		j->result = jv_object_set(j->result, jv_string("forbidden"), forbidden);
	else
		jv_free(forbidden);
	free(stage);
	free(error);
	jv_free(fault);
}

/* A worker's reply (consumed): 0 when ok, else merged as a failure. */
static int reply_ok(struct job *j, jv reply, jv *keep)
{
	if (ca_json_bool(reply, "ok") == 1) {
		if (keep)
			*keep = reply;
		else
			jv_free(reply);
		return 0;
	}
	if (keep)
		*keep = jv_invalid();
	job_fault(j, reply, NULL);
	return -1;
}

static unsigned long long fresh_seed(void)
{
	return random_u64() & ((1ULL << 48) - 1);
}

/* Reference failure: the task itself is broken (or the reference worker died). */
static int reference_call(struct job *j, jv req, double timeout, jv *reply)
{
	jv fault;
	if (worker_call(&j->slot->reference, req, timeout, reply, &fault, NULL) != 0) {
		job_fault(j, fault, "reference: ");
		j->result = set_str(j->result, "stage", "reference");
		return -1;
	}
	if (ca_json_bool(*reply, "ok") != 1) {
		job_fault(j, *reply, "reference: ");
		j->result = set_str(j->result, "stage", "reference");
		*reply = jv_invalid();
		return -1;
	}
	return 0;
}

static int candidate_call(struct job *j, jv req, double timeout, jv *reply, struct loop_clock *ours)
{
	jv fault;
	if (worker_call(&j->cand, req, timeout, reply, &fault, ours) != 0) {
		job_fault(j, fault, NULL);
		return -1;
	}
	return reply_ok(j, *reply, reply);
}

/* Run ca-build on the candidate's directory when it has kernel sources. */
static int job_build(struct job *j)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	const char *dir = j->cand.dir;
	j->kernels_lib[0] = '\0';
	if (!has_kernel_sources(dir))
		return 0;
	char prog[PATHLEN];
	snprintf(prog, sizeof prog, "%s/ca-build", ca_paths_bindir());
	if (access(prog, X_OK) != 0) {
		job_fail(j, "system", "ca-build not found next to this program");
		return -1;
	}
	const char *argv[12];
	int n = 0;
	argv[n++] = prog;
	if (cfg->arch) {
		argv[n++] = "--arch";
		argv[n++] = cfg->arch;
	}
	if (cfg->build_cache) {
		argv[n++] = "--cache";
		argv[n++] = cfg->build_cache;
	}
	argv[n++] = dir;
	argv[n] = NULL;
	struct ca_proc p;
	ca_proc_init(&p, argv);
	p.timeout_s = cfg->build_timeout_s;
	struct ca_buf out = {0}, err = {0};
	int status = ca_proc_capture(&p, NULL, 0, &out, &err, 1 << 20);
	jv v = out.data ? jv_parse(out.data) : jv_invalid();
	if (jv_get_kind(v) != JV_KIND_OBJECT) {
		char msg[2048];
		snprintf(msg, sizeof msg, "ca-build failed (status %d)%s%.1500s", status, err.data ? ": " : "",
			err.data ? err.data : "");
		job_fail(j, "system", msg);
		jv_free(v);
		ca_buf_free(&out);
		ca_buf_free(&err);
		return -1;
	}
	ca_buf_free(&out);
	ca_buf_free(&err);
	jv build = jv_object();
	jv_object_foreach(v, key, value) {
		if (!strcmp(jv_string_value(key), "log"))
			jv_free(value);
		else
			build = jv_object_set(build, jv_copy(key), value);
		jv_free(key);
	}
	j->result = jv_object_set(j->result, jv_string("build"), build);
	if (ca_json_bool(v, "ok") != 1) {
		/*
		 * A build that failed for no reason in the sources (the compiler
		 * killed by a signal we did not send, a full disk: transient, no
		 * limit named) is the evaluator's; a compile error or a limit the
		 * sources ran into is the candidate's.
		 */
		jv limit = ca_json_get(v, "limit");
		int ours = ca_json_bool(v, "transient") == 1 && jv_get_kind(limit) != JV_KIND_STRING;
		jv_free(limit);
		char *log = ca_json_strdup(v, "log");
		job_fail(j, ours ? "system" : "compile", log && *log ? log : "the kernels did not compile");
		free(log);
		jv_free(v);
		return -1;
	}
	char *lib = ca_json_strdup(v, "library");
	char *flavour = ca_json_strdup(v, "flavour");
	jv_free(v);
	if (lib) {
		/* Copy the library into the candidate's own directory: the build cache may be unreadable there. */
		const char *base = strrchr(lib, '/') ? strrchr(lib, '/') + 1 : lib;
		char dst[PATHLEN];
		if (flavour && !strcmp(flavour, "ca"))
			snprintf(dst, sizeof dst, "%s/libkernels.so", j->io);
		else
			snprintf(dst, sizeof dst, "%s/%s", dir, base);
		size_t len;
		char *data = read_file(lib, 1u << 30, &len);
		if (!data || write_file(dst, data, len) != 0) {
			free(data);
			free(lib);
			free(flavour);
			job_fail(j, "system", "cannot copy the built library into the candidate's directory");
			return -1;
		}
		free(data);
		chmod(dst, 0755);
		if (flavour && !strcmp(flavour, "ca"))
			snprintf(j->kernels_lib, sizeof j->kernels_lib, "%s", dst);
	}
	free(lib);
	free(flavour);
	return 0;
}

/* ------------------------------------------------------------------ torch extension builds */

struct hash_walk {
	struct ca_sha256 *h;
	size_t root_len;
	int n;
};
static struct hash_walk *g_hash_walk;  /* nftw has no user pointer; used by one thread at a time */
static pthread_mutex_t hash_walk_lock = PTHREAD_MUTEX_INITIALIZER;

static int hash_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	struct hash_walk *w = g_hash_walk;
	const char *rel = path + w->root_len;
	if (!strncmp(rel, "/.ca-io", 7) || !strncmp(rel, "/.ca-ext", 8))
		return 0;
	if (flag != FTW_F || !S_ISREG(st->st_mode) || st->st_size > (16 << 20) || ++w->n > 2000)
		return 0;
	size_t len;
	char *data = read_file(path, (size_t)st->st_size, &len);
	if (!data)
		return 0;
	ca_sha256_string(w->h, rel);
	ca_sha256_update(w->h, data, len);
	free(data);
	return 0;
}

/*
 * A candidate that builds torch extensions when it is imported (KernelBench's
 * load_inline, or cpp_extension.load) pays tens of seconds per process. The
 * build directory is kept under $CA_CACHE/torch-ext/KEY, KEY the hash of
 * every file of the workspace with the torch version and the GPU, and given
 * to the next process of the same candidate (ca-profile after ca-verify, the
 * same candidate proposed again): only identical workspaces share it.
 */
static void ext_prepare(struct job *j)
{
	struct slot *s = j->slot;
	char path[PATHLEN];
	j->ext_key[0] = '\0';
	snprintf(path, sizeof path, "%s/model_new.py", j->cand.dir);
	size_t len;
	char *src = read_file(path, 16 << 20, &len);
	int builds = src && (strstr(src, "load_inline") || strstr(src, "cpp_extension"));
	free(src);
	if (!builds)
		return;
	struct ca_sha256 h;
	ca_sha256_init(&h);
	ca_sha256_string(&h, "ca-torch-ext-1");
	char *gpu = ca_json_strdup(s->reference.hello, "gpu");
	char *torch = ca_json_strdup(s->reference.hello, "torch");
	ca_sha256_string(&h, gpu ? gpu : "cpu");
	ca_sha256_string(&h, torch ? torch : "");
	free(gpu);
	free(torch);
	struct hash_walk w = {&h, strlen(j->cand.dir), 0};
	pthread_mutex_lock(&hash_walk_lock);
	g_hash_walk = &w;
	nftw(j->cand.dir, hash_entry, 16, FTW_PHYS);
	g_hash_walk = NULL;
	pthread_mutex_unlock(&hash_walk_lock);
	ca_sha256_final_hex(&h, j->ext_key);
	char cached[PATHLEN], dst[PATHLEN];
	snprintf(cached, sizeof cached, "%s/torch-ext/%s", ca_paths_cache(), j->ext_key);
	snprintf(dst, sizeof dst, "%s/.ca-ext", j->cand.dir);
	mkdir_mode(dst, 0777);
	struct stat st;
	if (stat(cached, &st) == 0 && S_ISDIR(st.st_mode)) {
		/* Timestamps kept: ninja decides what to rebuild by them. */
		ca_file_copy_tree(cached, dst, CA_FILE_KEEP_TIMES);
		nftw(dst, chmod_entry, 16, FTW_PHYS);
		j->result = jv_object_set(j->result, jv_string("extension_cached"), jv_true());
	}
}

/* After a loaded candidate has stopped: keep its extension builds for the next process. */
static void ext_save(struct job *j)
{
	if (!j->ext_key[0] || !j->loaded)
		return;
	char cached[PATHLEN], tmp[PATHLEN + 32], src[PATHLEN], dir[PATHLEN];
	snprintf(dir, sizeof dir, "%s/torch-ext", ca_paths_cache());
	snprintf(cached, sizeof cached, "%s/%s", dir, j->ext_key);
	snprintf(src, sizeof src, "%s/.ca-ext", j->cand.dir);
	struct stat st;
	if (stat(cached, &st) == 0 || stat(src, &st) != 0)
		return;
	ca_paths_mkdirs(dir, 0755);
	snprintf(tmp, sizeof tmp, "%s.tmp%ld.%d", cached, (long)getpid(), j->slot->index);
	if (mkdir_mode(tmp, 0755) == 0 && ca_file_copy_tree(src, tmp, CA_FILE_KEEP_TIMES) == 0 && rename(tmp, cached) == 0)
		return;
	ca_file_remove_tree(tmp);
}

/*
 * Everything before the first check: candidate worker, workspace, build,
 * reference task, candidate load. 0 when the candidate is loaded.
 */
static int job_prepare(struct job *j, jv record)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	jv fault;
	char why[1024];
	j->seed = cfg->seed_set ? cfg->seed : fresh_seed();
	j->result = jv_object_set(j->result, jv_string("seed"), jv_number((double)j->seed));
	jv code = ca_json_get(record, "code");
	jv cand = ca_json_get(record, "candidate");
	if (jv_get_kind(code) != JV_KIND_STRING || jv_get_kind(cand) != JV_KIND_OBJECT) {
		job_fail(j, "input", jv_get_kind(code) != JV_KIND_STRING ? "record has no task code (string field \"code\")"
			: "record has no candidate object");
		jv_free(code);
		jv_free(cand);
		return -1;
	}
	ca_sha256_hex(jv_string_value(code), (size_t)jv_string_length_bytes(jv_copy(code)), j->task_sha);
	j->result = set_str(j->result, "task_sha256", j->task_sha);

	/* The candidate process starts now so its Python start-up overlaps the rest. */
	if (candidate_take(s, &j->cand, &fault) != 0) {
		job_fault(j, fault, NULL);
		jv_free(code);
		jv_free(cand);
		return -1;
	}
	snprintf(j->io, sizeof j->io, "%s/.ca-io", j->cand.dir);
	jv files = ca_json_get(cand, "files");
	jv dir = ca_json_get(cand, "dir");
	jv_free(cand);
	int bad = 0;
	if (jv_get_kind(files) == JV_KIND_OBJECT) {
		if (write_files(j->cand.dir, jv_copy(files), why, sizeof why)) {
			job_fail(j, "input", why);
			bad = 1;
		}
	} else if (jv_get_kind(dir) == JV_KIND_STRING) {
		struct stat st;
		if (stat(jv_string_value(dir), &st) != 0 || !S_ISDIR(st.st_mode)) {
			snprintf(why, sizeof why, "candidate.dir %s is not a directory", jv_string_value(dir));
			job_fail(j, "input", why);
			bad = 1;
		} else if (ca_file_copy_tree(jv_string_value(dir), j->cand.dir, 0) != 0) {
			job_fail(j, "input", "cannot copy candidate.dir");
			bad = 1;
		}
	} else {
		job_fail(j, "input", "candidate has neither \"files\" nor \"dir\"");
		bad = 1;
	}
	jv_free(files);
	jv_free(dir);
	char path[PATHLEN];
	snprintf(path, sizeof path, "%s/model_new.py", j->cand.dir);
	if (!bad && access(path, R_OK) != 0) {
		job_fail(j, "input", "the candidate has no model_new.py");
		bad = 1;
	}
	if (bad) {
		jv_free(code);
		return -1;
	}
	mkdir_mode(j->io, 0777);
	nftw(j->cand.dir, chmod_entry, 16, FTW_PHYS);
	phase(j, "workspace");

	double t0 = ca_proc_now();
	if (job_build(j) != 0) {
		jv_free(code);
		return -1;
	}
	double build_s = ca_proc_now() - t0;
	phase(j, "build");

	/*
	 * The reference: load the task, write its weights and init inputs. The
	 * candidate gets the task's code too (for its get_inputs: it draws the
	 * inputs itself, under the same seeds), never the reference's outputs.
	 */
	snprintf(path, sizeof path, "%s/model.py", s->trusted);
	snprintf(j->task_path, sizeof j->task_path, "%s/task.py", j->io);
	size_t code_len = (size_t)jv_string_length_bytes(jv_copy(code));
	if (write_file(path, jv_string_value(code), code_len) != 0 ||
			write_file(j->task_path, jv_string_value(code), code_len) != 0) {
		jv_free(code);
		job_fail(j, "system", "cannot write the task file");
		return -1;
	}
	chmod(j->task_path, 0644);
	jv_free(code);
	if (reference_ready(s, &fault) != 0) {
		job_fault(j, fault, "reference worker: ");
		j->result = set_str(j->result, "stage", "reference");
		return -1;
	}
	char weights[PATHLEN], init[PATHLEN];
	snprintf(weights, sizeof weights, "%s/weights.ten", j->io);
	snprintf(init, sizeof init, "%s/init.ten", j->io);
	jv req = jv_object();
	req = set_str(req, "op", "task");
	req = set_str(req, "path", path);
	req = set_num(req, "seed", (double)j->seed);
	req = set_str(req, "weights_out", weights);
	req = set_str(req, "init_out", init);
	jv reply;
	phase(j, "reference_start");
	/* Loads put weights and modules on the GPU: not while another slot's loop is timed. */
	gpu_lock(s, LOCK_SH);
	int rc = reference_call(j, req, cfg->load_timeout_s, &reply);
	gpu_lock(s, LOCK_UN);
	if (rc != 0)
		return -1;
	jv_free(j->sizes);
	j->sizes = ca_json_get(reply, "sizes");
	jv_free(reply);
	phase(j, "task");
	chmod(weights, 0644);
	chmod(init, 0644);
	jv gpu = ca_json_get(s->reference.hello, "gpu");
	jv torch = ca_json_get(s->reference.hello, "torch");
	j->result = jv_object_set(j->result, jv_string("device"), jv_string(cfg->device));
	j->result = jv_object_set(j->result, jv_string("gpu"), jv_get_kind(gpu) == JV_KIND_STRING ? gpu : (jv_free(gpu), jv_null()));
	/* Which of --gpus ran it (the pool's share per GPU); null on the CPU. */
	j->result = jv_object_set(j->result, jv_string("gpu_index"), s->gpu >= 0 ? jv_number(s->gpu) : jv_null());
	j->result = jv_object_set(j->result, jv_string("torch"), jv_get_kind(torch) == JV_KIND_STRING ? torch : (jv_free(torch), jv_null()));

	/* The candidate: wait for it to be up, then load ModelNew with the reference's weights. */
	double t1 = ca_proc_now();
	if (worker_ready(&j->cand, cfg->load_timeout_s, &fault) != 0) {
		job_fault(j, fault, "candidate worker: ");
		return -1;
	}
	phase(j, "candidate_start");
	ext_prepare(j);
	snprintf(path, sizeof path, "%s/model_new.py", j->cand.dir);
	req = jv_object();
	req = set_str(req, "op", "candidate");
	req = set_str(req, "path", path);
	req = set_str(req, "weights", weights);
	req = set_str(req, "init", init);
	req = set_num(req, "seed", (double)j->seed);
	req = jv_object_set(req, jv_string("allow_torch"), jv_bool(cfg->allow_torch));
	req = jv_object_set(req, jv_string("kernels_lib"), j->kernels_lib[0] ? jv_string(j->kernels_lib) : jv_null());
	req = set_str(req, "task", j->task_path);
	if (j->ext_key[0]) {
		snprintf(path, sizeof path, "%s/.ca-ext", j->cand.dir);
		req = set_str(req, "ext_dir", path);
		req = set_str(req, "ext_key", j->ext_key);
	}
	/* Not under the lock: a candidate's import may build for minutes (load_inline). */
	rc = candidate_call(j, req, cfg->load_timeout_s, &reply, NULL);
	if (rc != 0) {
		if (jv_get_kind(reply) == JV_KIND_OBJECT)
			jv_free(reply);
		return -1;
	}
	jv_free(reply);
	j->loaded = 1;
	phase(j, "load");
	j->result = set_num(j->result, "build_s", build_s);
	j->result = set_num(j->result, "load_s", ca_proc_now() - t1);
	return 0;
}

/* The summed total_us of a kernel list (borrows); 0 without one. */
static double kernel_sum_us(jv kernels)
{
	double sum = 0;
	if (jv_get_kind(kernels) != JV_KIND_ARRAY)
		return 0;
	int n = jv_array_length(jv_copy(kernels));
	for (int i = 0; i < n; i++) {
		jv k = jv_array_get(jv_copy(kernels), i);
		double us = 0;
		if (jv_get_kind(k) == JV_KIND_OBJECT && ca_json_number(k, "total_us", &us) && us > 0)
			sum += us;
		jv_free(k);
	}
	return sum;
}

/* Top kernels of a kernel list (borrowed), with "forbidden" marked; *nbad counts them. */
static jv top_kernels(jv kernels, int top, int *nbad, jv *bad_names)
{
	jv out = jv_array();
	if (jv_get_kind(kernels) != JV_KIND_ARRAY)
		return out;
	int n = jv_array_length(jv_copy(kernels));
	for (int i = 0; i < n; i++) {
		jv k = jv_array_get(jv_copy(kernels), i);
		char *name = jv_get_kind(k) == JV_KIND_OBJECT ? ca_json_strdup(k, "name") : NULL;
		int forbidden = name && ca_eval_kernel_forbidden(name);
		if (forbidden) {
			(*nbad)++;
			if (bad_names && jv_array_length(jv_copy(*bad_names)) < 10)
				*bad_names = jv_array_append(*bad_names, jv_string(name));
		}
		if (i < top && jv_get_kind(k) == JV_KIND_OBJECT) {
			double calls = 0, us = 0;
			ca_json_number(k, "calls", &calls);
			ca_json_number(k, "total_us", &us);
			jv o = jv_object();
			o = set_str(o, "name", name ? name : "?");
			o = set_num(o, "calls", calls);
			o = set_num(o, "total_us", us);
			if (forbidden)
				o = jv_object_set(o, jv_string("forbidden"), jv_true());
			out = jv_array_append(out, o);
		}
		free(name);
		jv_free(k);
	}
	return out;
}

/* ------------------------------------------------------------------ verify */

/* The reference's failure (reply or fault, consumed) merged into the result. */
static void reference_failed(struct job *j, jv why)
{
	job_fault(j, why, "reference: ");
	j->result = set_str(j->result, "stage", "reference");
}

/* Receive the reference's reply to a request sent; -1 after recording the failure. */
static int reference_recv(struct job *j, double timeout, jv *reply)
{
	jv fault;
	if (worker_recv(&j->slot->reference, ca_proc_now() + timeout, reply, &fault, NULL) != 0) {
		reference_failed(j, fault);
		return -1;
	}
	if (ca_json_bool(*reply, "ok") != 1) {
		reference_failed(j, *reply);
		*reply = jv_invalid();
		return -1;
	}
	return 0;
}

/* Where the reference drew the inputs (its reply's "gen", borrowed), into the result. */
static void note_drawn_on(struct job *j, jv reply)
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
static int digest_matches(jv reply, const char *key, int i, jv want)
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
		if (worker_send(&s->reference, req, &fault) != 0) {
			reference_failed(j, fault);
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
		if (reference_recv(j, cfg->timeout_s * 4, &rreply) != 0) {
			jv_free(cfault);
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
		if (worker_recv(&j->cand, sent + cfg->timeout_s, reply, &fault, NULL) != 0) {
			jv_free(want);
			job_fault(j, fault, NULL);
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
	phase(j, "compare");
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
	phase(j, "robust");
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
	int wc = worker_call(&s->reference, req, cfg->load_timeout_s, &reply, &fault, NULL);
	gpu_lock(s, LOCK_UN);
	if (wc != 0) {
		jv_free(sizes);
		reference_failed(j, fault);
		return -1;
	}
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
	phase(j, "shapes");
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
	if (rc != 0 || sr.run == 0)
		return rc;
	/* Back to the benchmark's sizes and models in both workers. */
	jv reply;
	if (reference_call(j, resize_request(j, jv_null(), 1, "", ""), cfg->load_timeout_s, &reply) != 0)
		return -1;
	jv_free(reply);
	reply = jv_invalid();
	rc = candidate_call(j, resize_request(j, jv_null(), 0, "", ""), cfg->load_timeout_s, &reply, NULL);
	jv_free(reply);
	return rc;
}

static void do_verify(struct job *j)
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
		phase(j, "checks");
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

/* ------------------------------------------------------------------ profile */

static jv baseline_load(const char *key)
{
	char path[PATHLEN];
	snprintf(path, sizeof path, "%s/baselines/%s.json", ca_paths_cache(), key);
	size_t len;
	char *text = read_file(path, 1 << 20, &len);
	if (!text)
		return jv_invalid();
	jv v = jv_parse(text);
	free(text);
	if (jv_get_kind(v) != JV_KIND_OBJECT) {
		jv_free(v);
		return jv_invalid();
	}
	return v;
}

static void baseline_store(const char *key, jv v)
{
	char dir[PATHLEN], path[PATHLEN], tmp[PATHLEN + 32];
	snprintf(dir, sizeof dir, "%s/baselines", ca_paths_cache());
	ca_paths_mkdirs(dir, 0755);
	snprintf(path, sizeof path, "%s/%s.json", dir, key);
	snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
	jv text = jv_dump_string(jv_copy(v), 0);
	if (write_file(tmp, jv_string_value(text), (size_t)jv_string_length_bytes(jv_copy(text))) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
	jv_free(text);
}

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
static void ship_path(const struct job *j, const char *what, int k, char *out, size_t size)
{
	snprintf(out, size, "%s/tin-%s-%d.ten", j->slot->trusted, what, k);
}

/* Remove the files a loop was shown (the sources stay until profile_sets writes new ones). */
static void ship_unreveal(const struct job *j)
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

/*
 * The timing request for a method (shipped input sets already written),
 * and, for the candidate's loop (mode "candidate"), the warm-up files
 * shipped to it now; ours set up to send the timed calls' seeds or files
 * live. NULL when a warm-up file cannot be put in place.
 */
static jv time_request(struct job *j, const char *mode, const char *keep_prefix, jv keep, struct loop_clock *ours,
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
	return req;
}

static jv keep_indices(const struct ca_eval_config *cfg, unsigned long long seed)
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

/* Time the reference by mode (eager/compile), from the cache when possible. */
static int baseline(struct job *j, const char *mode, jv *out, int *cached, int fresh)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	char key[65];
	char *gpu = ca_json_strdup(s->reference.hello, "gpu");
	char *torch = ca_json_strdup(s->reference.hello, "torch");
	char method[128];
	/* Drawn and shipped inputs are different loops (a draw costs more than a refill): not mixed. */
	snprintf(method, sizeof method, "%s:%s:%s:%s", mode, !strcmp(mode, "compile") && cfg->compile_mode ? cfg->compile_mode : "default",
		cfg->device, j->ship ? "shipped" : "drawn");
	ca_eval_baseline_key(j->task_sha, gpu, torch, method, cfg->warmup, cfg->iters, j->ship ? j->nship : 0, key);
	free(gpu);
	free(torch);
	*cached = 0;
	if (!cfg->no_cache && !fresh) {
		jv v = baseline_load(key);
		if (jv_is_valid(v)) {
			*out = v;
			*cached = 1;
			return 0;
		}
	}
	char prefix[PATHLEN];
	snprintf(prefix, sizeof prefix, "%s/kept-%s-", s->trusted, mode);
	jv reply;
	struct loop_clock ours = {0};
	ours.want = cfg->keep;
	ours.iters = cfg->iters;
	/*
	 * Its timed calls' seeds (or shipped files) sent live as the
	 * candidate's are, so the round trip is in the overhead our clock
	 * subtracts; seeds of its own (the reference's loop is not checked
	 * against digests), the candidate's files.
	 */
	unsigned long long *live = ca_xcalloc((size_t)cfg->iters + 1, sizeof *live);
	for (int i = 0; i < cfg->iters; i++)
		live[i] = fresh_seed();
	jv req = time_request(j, mode, prefix, keep_indices(cfg, j->seed), &ours, live);
	jv fault;
	timed_loop_begin(s);
	int rc = worker_call(&s->reference, req, cfg->timeout_s * 10 + (strcmp(mode, "compile") ? 0 : 600), &reply, &fault, &ours);
	timed_loop_end(s);
	free(live);
	ship_unreveal(j);
	if (rc != 0) {
		loop_clock_free(&ours);
		job_fault(j, fault, "reference: ");
		j->result = set_str(j->result, "stage", "reference");
		return -1;
	}
	if (ca_json_bool(reply, "ok") != 1) {
		loop_clock_free(&ours);
		job_fault(j, reply, "reference: ");
		j->result = set_str(j->result, "stage", "reference");
		return -1;
	}
	double median = 0, cv = 0;
	ca_json_number(reply, "median_us", &median);
	ca_json_number(reply, "cv", &cv);
	jv times = ca_json_get(reply, "times_us");
	int ntimes = jv_get_kind(times) == JV_KIND_ARRAY ? jv_array_length(jv_copy(times)) : 0;
	double sum = 0;
	double *calls = ca_xcalloc((size_t)cfg->iters + 1, sizeof *calls);
	double *inputs = ca_xcalloc((size_t)cfg->iters + 1, sizeof *inputs);
	double *call_phase = ca_xcalloc((size_t)cfg->iters + 1, sizeof *call_phase);
	int ncalls = loop_clock_calls(&ours, calls, cfg->iters);
	int nphases = ntimes == cfg->iters ? loop_clock_phases(&ours, inputs, call_phase, cfg->iters) : 0;
	for (int i = 0; i < ntimes; i++) {
		jv t = jv_array_get(jv_copy(times), i);
		double us = jv_get_kind(t) == JV_KIND_NUMBER ? jv_number_value(t) : 0;
		sum += us;
		if (i < ncalls)
			calls[i] -= us * 1e-6;  /* what our clock saw of this call beyond its time */
		if (i < nphases)
			call_phase[i] -= us * 1e-6;
		jv_free(t);
	}
	jv_free(times);
	jv v = jv_object();
	v = set_num(v, "median_us", median);
	v = set_num(v, "cv", cv);
	/* Our clock around the timed loop minus the reported call times: the per-batch overhead. */
	v = set_num(v, "overhead_s", ours.start > 0 && ours.end > ours.start ? (ours.end - ours.start) - sum * 1e-6 : 0);
	/*
	 * The same per call, the fastest tenth of the calls: the loop's own
	 * work around each call, taken like the candidate's bound (like with
	 * like: a quiet call of the reference's against a quiet call of the
	 * candidate's).
	 */
	v = set_num(v, "overhead_call_s", ncalls == cfg->iters && ntimes == cfg->iters ? quantile_of(calls, ncalls, 0.1) : NAN);
	/*
	 * And split at the ready lines: the call phase's own work (flush,
	 * digest, copy) and the inputs' phase (the draw), each its fastest
	 * tenth, so that a draw, which can cost more than the call, is judged
	 * on its own (see clock_verdict).
	 */
	v = set_num(v, "overhead_ready_s", nphases ? quantile_of(call_phase, nphases, 0.1) : NAN);
	v = set_num(v, "inputs_s", nphases ? quantile_of(inputs, nphases, 0.1) : NAN);
	free(calls);
	free(inputs);
	free(call_phase);
	loop_clock_free(&ours);
	jv kl = ca_json_get(reply, "kernels");
	int nbad = 0;
	v = jv_object_set(v, jv_string("kernels"), top_kernels(kl, cfg->top, &nbad, NULL));
	jv_free(kl);
	jv_free(reply);
	if (!cfg->no_cache && !fresh)
		baseline_store(key, v);
	*out = v;
	return 0;
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
static int ship_write(struct job *j, unsigned long long seed, const char *path, jv *digests)
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
 * The reference's loop overhead, from its eager baseline, in seconds:
 * per batch, per call (the fastest tenth of what our clock saw beyond
 * each call's time), and split at the ready lines into the call phase's
 * beyond the call's time (ready) and the inputs' phase (inputs). NAN
 * where not measured.
 */
struct loop_overhead {
	double batch, call, ready, inputs;
};

/*
 * Our own clock's verdict on a candidate's timed loop (reply borrowed):
 * the per-call time the whole batch implies, less the reference's
 * overhead per batch, into *wall_per_call; the median call between the
 * worker's ticks, less the reference's overhead per call (its fastest
 * tenth), into *call_us; the least self-reported median that passes
 * the call-by-call bound into *bound_us (NAN without it). Returns 0 when
 * the self-reported median is plausible, else -1 with the reason in msg.
 *
 * The bound is taken from the fastest tenth of the calls between ticks,
 * not their median: the loop's own work around a call (input draw, L2
 * flush, digests, the ticks) runs on a CPU that a busy evaluation pool
 * shares with a dozen starting workers, and the reference's overhead per
 * call comes from a baseline that may have been timed at a quiet moment.
 * Slow moments only lengthen calls; a patched clock cannot make our clock
 * faster. On two H200s under a 200-record pool the median and the batch
 * bound failed 10 of 160 honest candidates (a 649 us call "implied"
 * 1339 us). The whole-batch bound is used only when the worker sent no
 * ticks to time calls by.
 *
 * When every call had its ready line, the bound is, call by call, the
 * call phase less the reference's, plus whatever that call's inputs'
 * phase took beyond the reference's (one and a half times it on the CPU;
 * never less than nothing), and then the fastest tenth: a draw of the inputs can cost more than the call (on the
 * CPU, 30 ms against 5), and a reference whose draws were slowed by a
 * busy moment would otherwise hide a patched clock; work moved before
 * the ready line still counts (on the CPU beyond half a draw).
 *
 * The slack is 5 us, and on the CPU (on_cpu: the device we were told,
 * not what the worker says) also a quarter of the reference's call-phase
 * overhead (a tenth of its whole overhead per call without ready lines):
 * there the loop's own work is milliseconds of Python and torch on a
 * shared CPU, whose noise grows with it (a busy moment doubles it). On a
 * GPU the 5 us stay, as measured on the H200 before the draws came into
 * the loop: a wider slack there would let a patched clock on a 20 us
 * call pass.
 */
static int clock_verdict(const struct loop_clock *ours, jv reply, int iters, const struct loop_overhead *ref,
		int on_cpu, double *wall_per_call, double *call_us, double *bound_us, char *msg, size_t size)
{
	double median = 0;
	ca_json_number(reply, "median_us", &median);
	*wall_per_call = *call_us = NAN;
	if (ours->start > 0 && ours->end > ours->start && iters > 0)
		*wall_per_call = ((ours->end - ours->start) - ref->batch) / iters * 1e6;
	double *calls = ca_xcalloc((size_t)iters + 1, sizeof *calls);
	double *inputs = ca_xcalloc((size_t)iters + 1, sizeof *inputs);
	double *call_phase = ca_xcalloc((size_t)iters + 1, sizeof *call_phase);
	int ncalls = loop_clock_calls(ours, calls, iters);
	double fast_us = NAN, slack_us = 5;
	if (ncalls == iters && ours->nticks == iters && isfinite(ref->call)) {
		*call_us = (median_of(calls, ncalls) - ref->call) * 1e6;
		fast_us = (quantile_of(calls, ncalls, 0.1) - ref->call) * 1e6;
		if (on_cpu)
			slack_us += 0.1 * ref->call * 1e6;
		if (isfinite(ref->ready) && isfinite(ref->inputs) && loop_clock_phases(ours, inputs, call_phase, iters) == iters) {
			/*
			 * Call by call: its call phase less the reference's, plus
			 * what its own inputs' phase took beyond the reference's;
			 * then the fastest tenth. Taken phase by phase (the fastest
			 * tenth of each, then added) a ready line we read late moves
			 * time from one call's call phase to its inputs' phase, and
			 * the two tenths pick different calls, so the time vanished:
			 * on the H200, with three slots on the GPU,
			 * cheat/timer_patch (40 us reported for 268 us of kernels,
			 * our whole-call median 606 us) passed the first loop.
			 */
			for (int i = 0; i < iters; i++) {
				double extra = inputs[i] - (on_cpu ? 1.5 : 1.0) * ref->inputs;
				call_phase[i] = call_phase[i] - ref->ready + (extra > 0 ? extra : 0);
			}
			fast_us = quantile_of(call_phase, iters, 0.1) * 1e6;
			slack_us = 5 + (on_cpu ? 0.25 * ref->ready * 1e6 : 0);
		}
	}
	*bound_us = isfinite(fast_us) ? 0.5 * fast_us - slack_us : NAN;
	free(calls);
	free(inputs);
	free(call_phase);
	if (!isfinite(*wall_per_call)) {
		snprintf(msg, size, "the candidate worker did not mark the end of its timed calls");
		return -1;
	}
	if (!isfinite(ref->call) && median < 0.5 * *wall_per_call - 20) {
		snprintf(msg, size, "self-reported %.1f us per call, but our clock around the timed calls "
			"implies at least %.1f us: the timer was tampered with", median, *wall_per_call);
		return -1;
	}
	if (isfinite(ref->call) && !isfinite(*call_us)) {
		snprintf(msg, size, "the candidate worker marked %d of its %d timed calls", ours->nticks, iters);
		return -1;
	}
	if (isfinite(fast_us) && median < 0.5 * fast_us - slack_us) {
		snprintf(msg, size, "self-reported %.1f us per call, but our clock, call by call, "
			"implies at least %.1f us (its fastest tenth): the timer was tampered with", median, fast_us);
		return -1;
	}
	return 0;
}

/*
 * The eager and compile baselines, timed with the inputs as the candidate
 * gets them (drawn or shipped), into the result; the eager loop's
 * overhead into *overhead.
 */
/* The loop overhead an eager baseline (borrowed) measured. */
static void overhead_of(jv eager, struct loop_overhead *overhead)
{
	*overhead = (struct loop_overhead){0, NAN, NAN, NAN};
	ca_json_number(eager, "overhead_s", &overhead->batch);
	ca_json_number(eager, "overhead_call_s", &overhead->call);
	ca_json_number(eager, "overhead_ready_s", &overhead->ready);
	ca_json_number(eager, "inputs_s", &overhead->inputs);
}

static int profile_baselines(struct job *j, struct loop_overhead *overhead)
{
	const struct ca_eval_config *cfg = j->slot->cfg;
	jv eager, compiled = jv_null();
	int eager_cached = 0, compile_cached = 0;
	if (baseline(j, "eager", &eager, &eager_cached, 0) != 0)
		return -1;
	if (!cfg->no_compile && baseline(j, "compile", &compiled, &compile_cached, 0) != 0) {
		jv_free(eager);
		return -1;
	}
	double eager_us = 0, eager_cv = 0, compile_us = NAN, compile_cv = NAN;
	overhead_of(eager, overhead);
	ca_json_number(eager, "median_us", &eager_us);
	ca_json_number(eager, "cv", &eager_cv);
	if (jv_get_kind(compiled) == JV_KIND_OBJECT) {
		ca_json_number(compiled, "median_us", &compile_us);
		ca_json_number(compiled, "cv", &compile_cv);
	}
	j->result = set_num(j->result, "eager_us", eager_us);
	j->result = set_num(j->result, "eager_cv", eager_cv);
	j->result = jv_object_set(j->result, jv_string("compile_us"), ca_json_num_or_null(compile_us));
	j->result = jv_object_set(j->result, jv_string("compile_cv"), ca_json_num_or_null(compile_cv));
	j->result = jv_object_set(j->result, jv_string("baseline_cached"), jv_bool(eager_cached && (cfg->no_compile || compile_cached)));
	j->result = jv_object_set(j->result, jv_string("eager_kernels"), ca_json_get(eager, "kernels"));
	if (jv_get_kind(compiled) == JV_KIND_OBJECT)
		j->result = jv_object_set(j->result, jv_string("compile_kernels"), ca_json_get(compiled, "kernels"));
	jv_free(eager);
	jv_free(compiled);
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
 * The reference's overhead around its calls measured now, with the eager
 * loop timed again (not from the cache, and not stored there): what a
 * retimed candidate's loop is judged against, so both come from the same
 * moment of a busy machine. The record's eager time stays the first one.
 */
static int fresh_overhead(struct job *j, struct loop_overhead *overhead)
{
	jv eager;
	int cached = 0;
	if (baseline(j, "eager", &eager, &cached, 1) != 0)
		return -1;
	overhead_of(eager, overhead);
	jv_free(eager);
	return 0;
}

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
		double ref[3] = {NAN, NAN, NAN}, n = NAN;
		jv d = ca_json_get(reply, "out_digest");
		for (int k = 0; k < 3 && jv_get_kind(d) == JV_KIND_ARRAY; k++) {
			jv e = jv_array_get(jv_copy(d), k);
			if (jv_get_kind(e) == JV_KIND_NUMBER)
				ref[k] = jv_number_value(e);
			jv_free(e);
		}
		jv_free(d);
		ca_json_number(reply, "out_numel", &n);
		jv_free(reply);
		if (!(isfinite(ref[0]) && isfinite(ref[1]) && isfinite(ref[2]) && isfinite(n)))
			continue;  /* a reference output that is not finite cannot be judged this way */
		const double *c = ours->digests[index];
		double a = cfg->tol.atol, t = cfg->tol.rtol, round = 1e-9 * (ref[1] + fabs(c[1]) + ref[2] + fabs(c[2])) + 1e-300;
		double b01 = n * a + t * ref[1] + round;
		double b2 = (2 * a + 2 * a * t) * ref[1] + n * a * a + (2 * t + t * t) * ref[2] + round;
		if (!(fabs(c[0] - ref[0]) <= b01 && fabs(c[1] - ref[1]) <= b01 && fabs(c[2] - ref[2]) <= b2)) {
			char msg[512];
			snprintf(msg, sizeof msg, "timed call %d: the digest its tick carried (%.9g, %.9g, %.9g: sum, sum of "
				"magnitudes, sum of squares) is not within tolerance of the reference's output on the same inputs "
				"(%.9g, %.9g, %.9g over %.0f elements); the call was picked after the loop", index, c[0], c[1], c[2],
				ref[0], ref[1], ref[2], n);
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

static void do_profile(struct job *j)
{
	struct slot *s = j->slot;
	const struct ca_eval_config *cfg = s->cfg;
	jv reply;
	jv digests = jv_array();
	if (j->ship)  /* --verify found the candidate's draws differ */
		j->result = jv_object_set(j->result, jv_string("inputs_shipped"), jv_true());
	draw_seeds(j);
	if (profile_sets(j, &digests) != 0) {
		jv_free(digests);
		return;
	}
	phase(j, "inputs");
	struct loop_overhead overhead;
	if (profile_baselines(j, &overhead) != 0) {
		jv_free(digests);
		return;
	}
	phase(j, "baselines");

	/* The candidate, timed the same way. */
	char prefix[PATHLEN];
	snprintf(prefix, sizeof prefix, "%s/kept-", j->io);
	struct loop_clock ours = {0};
	ours.want = cfg->keep;
	ours.iters = cfg->iters;
	double wall_per_call = NAN, call_us = NAN, bound_us = NAN;
	char clock_msg[256];
	int clock_bad = 0, retimed = 0;  /* how many times the loop was timed again */
	/* The calls to check named before the loop: what a worker that cannot keep every output writes. */
	jv named = keep_indices(cfg, j->seed ^ 0x5eed);
	for (;;) {
		loop_clock_reset(&ours);
		jv req = time_request(j, "candidate", prefix, jv_copy(named), &ours, j->seeds + cfg->warmup);
		if (!jv_is_valid(req)) {
			char why[256];
			job_fail(j, placing_failed(errno, "the shipped inputs", why, sizeof why), why);
			jv_free(digests);
			jv_free(named);
			loop_clock_free(&ours);
			return;
		}
		timed_loop_begin(s);
		int rc = candidate_call(j, req, cfg->timeout_s * 10, &reply, &ours);
		timed_loop_end(s);
		ship_unreveal(j);
		if (rc != 0) {
			if (jv_get_kind(reply) == JV_KIND_OBJECT)
				jv_free(reply);
			jv_free(digests);
			jv_free(named);
			loop_clock_free(&ours);
			return;
		}
		int same = 1;
		for (int k = 0; k < loop_sets(j) && !j->ship; k++) {
			jv want = jv_array_get(jv_copy(digests), k);
			same = same && digest_matches(reply, "digests", k, want);
			jv_free(want);
		}
		if (same || j->ship) {
			clock_bad = clock_verdict(&ours, reply, cfg->iters, &overhead, !strcmp(cfg->device, "cpu"),
				&wall_per_call, &call_us, &bound_us, clock_msg, sizeof clock_msg) != 0;
			if (!clock_bad || retimed >= RETIMES)
				break;
			/*
			 * Our clock doubts the reported time. The loop's own work can
			 * take longer in a busy moment than it did on the reference
			 * (other slots starting workers or loading on the same GPU),
			 * so wait a moment, the GPU's lock released, and time again,
			 * judging the new loop; a patched clock fails every time.
			 */
			jv_free(reply);
			retimed++;
			j->result = jv_object_set(j->result, jv_string("retimed"), jv_true());
			struct timespec pause = {0, 250000000L * (retimed < 3 ? retimed : 3)};
			while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
				;
			/*
			 * New seeds for the new loop (this one's were sent to the
			 * candidate), digested by the reference; and the reference's
			 * overhead measured again, beside the new loop.
			 */
			draw_seeds(j);
			if (profile_sets(j, &digests) != 0) {
				jv_free(named);
				loop_clock_free(&ours);
				jv_free(digests);
				return;
			}
			/*
			 * Judged against the overhead measured now. Not the least
			 * of those measured: a ready line read late shrinks the
			 * reference's call phase too (its overhead there came out
			 * negative on a busy CPU), and the least would then hold
			 * every later loop to it; an honest candidate failed all
			 * four loops that way (t0154, beside make asan).
			 */
			if (fresh_overhead(j, &overhead) != 0) {
				jv_free(digests);
				jv_free(named);
				loop_clock_free(&ours);
				return;
			}
			continue;
		}
		/*
		 * The candidate drew other inputs than the reference: ship them,
		 * time the baselines that way too (their overhead is what our
		 * clock subtracts), and the candidate again.
		 */
		jv_free(reply);
		j->ship = 1;
		j->result = jv_object_set(j->result, jv_string("inputs_shipped"), jv_true());
		if (profile_sets(j, &digests) != 0 || profile_baselines(j, &overhead) != 0) {
			jv_free(digests);
			jv_free(named);
			loop_clock_free(&ours);
			return;
		}
	}
	jv_free(digests);
	phase(j, "candidate");
	/*
	 * This record's timing is over: the next record's candidate starts
	 * now, beside the spot checks, not once this record is released. A
	 * start takes 2.2 s on the H200, and a timed loop waits for every
	 * start to finish (quiet_loop_begin): in a stream of four, records
	 * 2-4 waited 0.9-1.2 s each for the spare started at release.
	 */
	if (!cfg->adhoc && more_records(s))
		spare_start(s);
	double median = 0, cv = 0, host_us = NAN;
	ca_json_number(reply, "median_us", &median);
	ca_json_number(reply, "cv", &cv);
	ca_json_number(reply, "host_median_us", &host_us);
	char *clock_kind = ca_json_strdup(reply, "clock");
	int events = clock_kind && !strcmp(clock_kind, "cuda-events");
	int window = clock_kind && !strcmp(clock_kind, "cupti-window");
	free(clock_kind);
	j->result = set_num(j->result, "candidate_us", median);
	j->result = set_num(j->result, "cv", cv);
	j->result = set_num(j->result, "host_us", host_us);
	j->result = jv_object_set(j->result, jv_string("iterations"), jv_number(cfg->iters));
	j->result = jv_object_set(j->result, jv_string("warmup"), jv_number(cfg->warmup));
	/* Distinct input sets the loop saw: one per call when drawn; shipped, the files. */
	int nsets = j->ship ? ship_warm(j) + j->nship : loop_sets(j);
	j->result = jv_object_set(j->result, jv_string("input_sets"), jv_number(nsets));
	const char *inputs_how = !j->ship ? "inputs drawn afresh under their own seed before every call"
		: j->nship < cfg->iters ? "inputs shipped as files, each timed call's shown to the worker at its turn, cycled"
		: "inputs shipped as files, a file for every timed call, each shown to the worker at its turn";
	char how[512];
	snprintf(how, sizeof how, "%s; %s", window
		? "the call's device window from CUPTI (first kernel, copy or memset to the last one's end, on any stream), "
		  "at least the host's time to the call's return (CUDA events' span where CUPTI missed work); L2 flushed"
		: events
		? "CUDA events on the current stream around the call, plus the device-wide synchronize's wait beyond an idle one; L2 flushed"
		: "host clock around the call", inputs_how);
	j->result = set_str(j->result, "method", how);
	jv kl = ca_json_get(reply, "kernels");
	/* Device time of every kernel CUPTI saw in the timed calls (the loop's L2 flushes taken out by the worker). */
	double kernel_us = kernel_sum_us(kl) / cfg->iters;
	j->result = set_num(j->result, "kernel_us", kernel_us > 0 ? kernel_us : NAN);
	int nbad = 0;
	jv bad_names = jv_array();
	j->result = jv_object_set(j->result, jv_string("kernels"), top_kernels(kl, cfg->top, &nbad, &bad_names));
	jv_free(kl);

	/* Our own clock's time per call: the median call between ticks, which one slow call cannot move. */
	j->result = set_num(j->result, "wall_us", isfinite(call_us) ? call_us : wall_per_call);
	/* What the judged loop was held to: the numbers behind a timing verdict. */
	jv clock = jv_object();
	clock = set_num(clock, "min_reported_us", bound_us);
	clock = set_num(clock, "overhead_call_us", overhead.call * 1e6);
	clock = set_num(clock, "overhead_ready_us", overhead.ready * 1e6);
	clock = set_num(clock, "overhead_inputs_us", overhead.inputs * 1e6);
	clock = jv_object_set(clock, jv_string("loops"), jv_number(retimed + 1));
	j->result = jv_object_set(j->result, jv_string("clock"), clock);
	/* Spot checks of timed calls' outputs. */
	jv kept = ca_json_get(reply, "kept");
	int nkept = jv_get_kind(kept) == JV_KIND_ARRAY ? jv_array_length(jv_copy(kept)) : 0;
	/*
	 * The calls that must be among them: chosen by us after the loop when
	 * the worker kept every call's output, else the ones named before it.
	 */
	char *chosen = ca_json_strdup(reply, "kept_chosen");
	int after = chosen && !strcmp(chosen, "after") && ours.nasked > 0;
	free(chosen);
	j->result = set_str(j->result, "spot_checks_chosen", after ? "after" : "before");
	char *required = ca_xcalloc((size_t)cfg->iters, 1);
	if (after) {
		for (int k = 0; k < ours.nasked; k++)
			required[ours.asked[k]] = 1;
	} else {
		jv_array_foreach(named, k, x) {
			(void)k;
			required[(int)jv_number_value(x)] = 1;
			jv_free(x);
		}
	}
	jv_free(reply);
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
	if (missing) {
		job_fail(j, "spot-check", "the candidate worker did not return the outputs of the timed calls asked for");
		goto out;
	}
	for (int i = 0; i < nkept; i++) {
		jv e = jv_array_get(jv_copy(kept), i);
		double set = -1, index = -1;
		ca_json_number(e, "set", &set);
		ca_json_number(e, "index", &index);
		jv_free(e);
		if (!(set >= 0 && set < loop_sets(j)) || !(index >= 0 && index < cfg->iters)) {
			job_fail(j, "spot-check", "bad kept-output entry from the candidate worker");
			goto out;
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
		if (after && ours.nticks == cfg->iters) {
			/*
			 * The output written now must be the one whose digest came
			 * with its tick while our clock ran (missing ticks fail the
			 * clock check), so its work cannot be left for after the
			 * loop, when the checked calls are known.
			 */
			double mine[3] = {0, 0, 0}, none[3] = {NAN, NAN, NAN};
			const double *theirs = (int)index < ours.nticks ? ours.digests[(int)index] : none;
			int readable = file_digest(got, mine) == 0;
			int finite = isfinite(mine[0]) && isfinite(mine[1]) && isfinite(mine[2]);  /* else the comparison rejects it */
			if (readable && finite && !digest_agrees(mine, theirs)) {
				char msg[512];
				snprintf(msg, sizeof msg, "timed call %d: the output written after the loop (digest %.17g, %.17g, %.17g: "
					"sum, sum of magnitudes, sum of squares) is not the one its tick described while the clock ran "
					"(%.17g, %.17g, %.17g)", (int)index, mine[0], mine[1], mine[2], theirs[0], theirs[1], theirs[2]);
				job_fail(j, "spot-check", msg);
				goto out;
			}
		}
		/* The reference's output for this call, now that it is known to be checked. */
		jv ref_reply;
		if (reference_on_call(j, (int)index, ref, &ref_reply) != 0)
			goto out;
		jv_free(ref_reply);
		struct ca_compare_result cr;
		int c = ca_compare_files(ref, got, &cfg->tol, &cr);
		unlink(ref);
		if (c != 1) {
			char msg[800];
			snprintf(msg, sizeof msg, "timed call %d: %s", (int)index, cr.message);
			job_fail(j, c < 0 ? "reference" : "spot-check", msg);
			goto out;
		}
	}
	if (!after && ours.nticks == cfg->iters &&
	    digest_spot_checks(j, &ours, named) != 0)
		goto out;
	if (nbad && !cfg->allow_torch) {
		char msg[1024];
		jv first = jv_array_get(jv_copy(bad_names), 0);
		snprintf(msg, sizeof msg, "torch fallback in timed calls: %d ATen/torch.compile kernel%s ran, e.g. %.400s",
			nbad, nbad == 1 ? "" : "s", jv_string_value(first));
		jv_free(first);
		job_fail(j, "policy", msg);
		goto out;
	}
	if (clock_bad) {
		job_fail(j, "timing", clock_msg);
		goto out;
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
		goto out;
	}
	j->result = jv_object_set(j->result, jv_string("ok"), jv_true());
out:
	if (ca_json_bool(j->result, "ok") != 1)
		distrust_reported_time(j);
	phase(j, "spot_checks");
	loop_clock_free(&ours);
	jv_free(named);
	jv_free(kept);
	jv_free(bad_names);
}

/* ------------------------------------------------------------------ dispatch */

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
static void print_phases(jv record, jv phases, double seconds)
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
static const char *gpu_missing(char *why, size_t size)
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

static jv evaluate_record(struct slot *s, jv record, int *status)
{
	const struct ca_eval_config *cfg = s->cfg;
	const char *field = cfg->mode == CA_EVAL_VERIFY ? "verify" : "profile";
	struct job j;
	memset(&j, 0, sizeof j);
	j.slot = s;
	j.result = jv_object();
	j.cand.hello = jv_invalid();
	j.started = ca_proc_now();
	j.mark = j.started;
	j.phases = jv_object();
	j.ship_digests = jv_array();
	j.sizes = jv_invalid();
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
	if (j.cand.dir[0] || j.cand.running)
		candidate_release(s, &j.cand);
	free(j.seeds);
	jv_free(j.ship_digests);
	jv_free(j.sizes);
	phase(&j, "release");
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
static void print_human(const struct ca_eval_config *cfg, jv record)
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

/* ------------------------------------------------------------------ the pool */

struct item {
	jv in, out;
	int done;
	int status;
	struct item *next;  /* pending list, input order */
	struct item *nq;    /* work queue */
};

struct pool {
	const struct ca_eval_config *cfg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct item *queue_head, *queue_tail;  /* waiting for a slot */
	int queued;
	int closed;
	struct item *pending_head, *pending_tail;  /* all not yet written, in input order */
	int status;
	int write_failed;
};

struct thread_arg {
	struct pool *pool;
	struct slot *slot;
};

static int more_records(struct slot *s)
{
	struct pool *p = s->pool;
	if (!p)
		return 1;
	pthread_mutex_lock(&p->lock);
	int more = !p->closed || p->queue_head;
	pthread_mutex_unlock(&p->lock);
	return more;
}

static void emit(struct pool *p, struct item *it)
{
	if (p->cfg->human) {
		print_human(p->cfg, it->out);
		jv_free(it->out);
		fflush(stdout);
	} else if (ca_ndjson_write(it->out) != 0) {
		p->write_failed = 1;
	}
	it->out = jv_invalid();
	p->status = ca_err_worst(p->status, it->status);
}

/* Write what can be written; called with the lock held. */
static void flush_done(struct pool *p)
{
	struct item **link = &p->pending_head, *prev = NULL;
	while (*link) {
		struct item *it = *link;
		if (!it->done) {
			if (!p->cfg->unordered)
				break;
			prev = it;
			link = &it->next;
			continue;
		}
		emit(p, it);
		*link = it->next;
		if (p->pending_tail == it)
			p->pending_tail = prev;
		free(it);
	}
}

static void *slot_thread(void *arg)
{
	struct thread_arg *ta = arg;
	struct pool *p = ta->pool;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		while (!p->queue_head && !p->closed)
			pthread_cond_wait(&p->cond, &p->lock);
		struct item *it = p->queue_head;
		if (!it) {
			pthread_mutex_unlock(&p->lock);
			break;
		}
		p->queue_head = it->nq;
		if (!p->queue_head)
			p->queue_tail = NULL;
		p->queued--;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);

		int status = 0;
		jv out = evaluate_record(ta->slot, it->in, &status);
		it->in = jv_invalid();

		pthread_mutex_lock(&p->lock);
		it->out = out;
		it->status = status;
		it->done = 1;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
	}
	return NULL;
}

static int client_stream(const struct ca_eval_config *cfg, const char *path, int nfiles, char **files);

int ca_eval_stream(const struct ca_eval_config *cfg, int nfiles, char **files)
{
	const char *server = getenv("CA_EVAL_SERVER");
	if (server && *server) {
		int st = client_stream(cfg, server, nfiles, files);
		if (st >= 0)
			return st;
	}
	char why[512];
	struct ca_eval_config none;
	if (strcmp(cfg->device, "cpu") && gpu_missing(why, sizeof why)) {
		/* Said once, at once; every record then gets it without a worker started. */
		ca_err_warn("%s", why);
		none = *cfg;
		none.no_gpu_why = why;
		cfg = &none;
	}
	int nslots = cfg->ngpus > 0 ? cfg->ngpus : 1;
	struct slot *slots = ca_xcalloc((size_t)nslots, sizeof *slots);
	struct thread_arg *args = ca_xcalloc((size_t)nslots, sizeof *args);
	struct pool p;
	memset(&p, 0, sizeof p);
	p.cfg = cfg;
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond, NULL);
	/* Resolve the shared paths once, before any thread looks them up. */
	ca_paths_cache();
	ca_paths_python();
	ca_paths_pydir();
	pycache_resolve();
	for (int i = 0; i < nslots; i++) {
		int gpu = strcmp(cfg->device, "cpu") ? (cfg->ngpus > 0 ? cfg->gpus[i] : 0) : -1;
		if (slot_open(&slots[i], cfg, i, gpu) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "cannot create a temporary directory");
		args[i].pool = &p;
		args[i].slot = &slots[i];
		slots[i].pool = &p;
		/* Start the reference worker and a spare candidate now: both take seconds. */
		jv fault;
		if (!cfg->no_gpu_why && worker_start(&slots[i], &slots[i].reference, 0, &fault) != 0)
			jv_free(fault);
		if (!cfg->no_gpu_why)
			spare_start(&slots[i]);
		if (pthread_create(&slots[i].thread, NULL, slot_thread, &args[i]) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "cannot start a worker thread");
	}
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	int queue_cap = 2 * nslots;
	for (;;) {
		jv rec;
		int kind = ca_ndjson_next(r, &rec);
		if (kind == CA_NDJSON_EOF)
			break;
		struct item *it = ca_xcalloc(1, sizeof *it);
		it->in = jv_invalid();
		it->out = jv_invalid();
		if (kind == CA_NDJSON_BAD) {
			ca_ndjson_warn(r, "%s", jv_string_value(rec));
			it->out = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(rec));
			jv_free(rec);
			it->status = CA_EXIT_DATA;
			it->done = 1;
		} else {
			it->in = rec;
		}
		pthread_mutex_lock(&p.lock);
		if (p.pending_tail)
			p.pending_tail->next = it;
		else
			p.pending_head = it;
		p.pending_tail = it;
		if (!it->done) {
			while (p.queued >= queue_cap) {
				flush_done(&p);
				if (p.queued >= queue_cap)
					pthread_cond_wait(&p.cond, &p.lock);
			}
			if (p.queue_tail)
				p.queue_tail->nq = it;
			else
				p.queue_head = it;
			p.queue_tail = it;
			p.queued++;
			pthread_cond_broadcast(&p.cond);
		}
		flush_done(&p);
		pthread_mutex_unlock(&p.lock);
	}
	pthread_mutex_lock(&p.lock);
	p.closed = 1;
	pthread_cond_broadcast(&p.cond);
	for (;;) {
		flush_done(&p);
		if (!p.pending_head)
			break;
		pthread_cond_wait(&p.cond, &p.lock);
	}
	pthread_mutex_unlock(&p.lock);
	for (int i = 0; i < nslots; i++) {
		pthread_join(slots[i].thread, NULL);
		slot_close(&slots[i]);
	}
	int status = ca_err_worst(p.status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	free(slots);
	free(args);
	if (p.write_failed)
		status = CA_EXIT_SYSTEM;
	return ca_err_finish(status);
}

int ca_eval_directory(const struct ca_eval_config *cfg, const char *dir)
{
	char path[PATHLEN], abs[PATH_MAX];
	if (!realpath(dir, abs)) {
		ca_err_warn_sys("%s", dir);
		return CA_EXIT_USAGE;
	}
	snprintf(path, sizeof path, "%s/model.py", abs);
	size_t len;
	char *code = read_file(path, 16 << 20, &len);
	if (!code) {
		ca_err_warn("%s: no model.py (the reference task) in this directory", dir);
		return CA_EXIT_USAGE;
	}
	snprintf(path, sizeof path, "%s/model_new.py", abs);
	if (access(path, R_OK) != 0) {
		free(code);
		ca_err_warn("%s: no model_new.py (the candidate) in this directory", dir);
		return CA_EXIT_USAGE;
	}
	const char *base = strrchr(abs, '/') ? strrchr(abs, '/') + 1 : abs;
	jv rec = jv_object();
	rec = set_str(rec, "id", base);
	rec = set_str(rec, "code", code);
	rec = jv_object_set(rec, jv_string("candidate"), set_str(jv_object(), "dir", abs));
	free(code);
	/* Run it through the same loop via a temporary file holding the one record. */
	char tmp[] = "/tmp/ca-adhoc.XXXXXX";
	int fd = mkstemp(tmp);
	if (fd < 0) {
		jv_free(rec);
		ca_err_warn_sys("cannot create a temporary file");
		return CA_EXIT_SYSTEM;
	}
	jv text = jv_dump_string(rec, 0);
	FILE *fp = fdopen(fd, "w");
	fprintf(fp, "%s\n", jv_string_value(text));
	fclose(fp);
	jv_free(text);
	char *files[] = {tmp};
	struct ca_eval_config one = *cfg;
	one.adhoc = 1;
	one.ngpus = cfg->ngpus > 1 ? 1 : cfg->ngpus;
	int status = ca_eval_stream(&one, 1, files);
	unlink(tmp);
	return status;
}

/* ------------------------------------------------------------------ server and client */

/*
 * ca-verify --serve SOCKET (or ca-profile --serve) keeps the slots of this
 * engine warm (reference workers and spare candidates up) and scores the
 * records of any command that finds SOCKET in $CA_EVAL_SERVER, so a single
 * record no longer pays the Python, torch and CUDA start-ups. Protocol, one
 * JSON object per line over a Unix socket (0600, in a directory only its
 * owner may enter, so no candidate can reach it):
 *   client: {"mode": "verify"|"profile", "opts": {...}}   (see conn_options)
 *   server: {"ok": true} or {"ok": false, "error": "..."}  (then the client works alone)
 *   client: a record; server: {"status": N, "record": {...}}; and so on until EOF.
 */

struct server {
	const struct ca_eval_config *base;
	struct slot *slots;
	int *busy;
	int nslots;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int conns;
	double last;
};

static volatile sig_atomic_t serve_stop;

static void serve_signal(int sig)
{
	(void)sig;
	serve_stop = 1;
}

/* The options a client sends (and the server checks against its own). */
static jv conn_options(const struct ca_eval_config *c)
{
	jv o = jv_object();
	o = set_str(o, "device", c->device);
	o = jv_object_set(o, jv_string("sandbox"), jv_bool(c->sandbox));
	o = jv_object_set(o, jv_string("sandbox_user"), c->sandbox_user ? jv_string(c->sandbox_user) : jv_null());
	o = set_num(o, "checks", c->checks);
	o = set_num(o, "robust", c->robust);
	o = set_num(o, "shapes", c->shapes);
	o = set_num(o, "seed", (double)c->seed);
	o = jv_object_set(o, jv_string("seed_set"), jv_bool(c->seed_set));
	o = set_num(o, "atol", c->tol.atol);
	o = set_num(o, "rtol", c->tol.rtol);
	o = jv_object_set(o, jv_string("allow_torch"), jv_bool(c->allow_torch));
	o = set_num(o, "timeout_s", c->timeout_s);
	o = jv_object_set(o, jv_string("arch"), c->arch ? jv_string(c->arch) : jv_null());
	o = jv_object_set(o, jv_string("build_cache"), c->build_cache ? jv_string(c->build_cache) : jv_null());
	o = set_num(o, "warmup", c->warmup);
	o = set_num(o, "iters", c->iters);
	o = set_num(o, "sets", c->sets);
	o = set_num(o, "keep", c->keep);
	o = jv_object_set(o, jv_string("compile_mode"), c->compile_mode ? jv_string(c->compile_mode) : jv_null());
	o = jv_object_set(o, jv_string("no_compile"), jv_bool(c->no_compile));
	o = jv_object_set(o, jv_string("no_cache"), jv_bool(c->no_cache));
	o = set_num(o, "top", c->top);
	o = jv_object_set(o, jv_string("also_verify"), jv_bool(c->also_verify));
	return o;
}

/* A string option of the client's (kept in store, freed with the connection), or NULL. */
static const char *conn_str(jv opts, const char *key, char **store)
{
	char *v = ca_json_strdup(opts, key);
	*store = v;
	return v;
}

struct conn {
	struct server *sv;
	int fd;
};

/* Write v (borrowed) as a line to a socket; -1 when the peer is gone. */
static int write_line(int fd, jv v)
{
	jv text = jv_dump_string(jv_copy(v), 0);
	int rc = 0;
	const char *p = jv_string_value(text);
	size_t n = (size_t)jv_string_length_bytes(jv_copy(text)), off = 0;
	while (rc == 0 && off <= n) {
		const char *src = off < n ? p + off : "\n";
		size_t len = off < n ? n - off : 1;
		ssize_t w = send(fd, src, len, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			rc = -1;
		else
			off += (size_t)w;
	}
	jv_free(text);
	return rc;
}

struct linebuf {
	char *data;
	size_t len, cap;
};

static void linebuf_append(struct linebuf *b, const char *data, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->data = ca_xrealloc(b->data, b->cap);
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
}

/* Read a line from a socket (malloc'd, without the newline), NULL at EOF. */
static char *read_line(int fd, struct linebuf *b, size_t *pos)
{
	for (;;) {
		char *nl = b->data ? memchr(b->data + *pos, '\n', b->len - *pos) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - (b->data + *pos));
			char *line = ca_xmalloc(n + 1);
			memcpy(line, b->data + *pos, n);
			line[n] = '\0';
			*pos += n + 1;
			return line;
		}
		if (*pos > 0) {
			memmove(b->data, b->data + *pos, b->len - *pos);
			b->len -= *pos;
			*pos = 0;
		}
		char chunk[65536];
		ssize_t got = recv(fd, chunk, sizeof chunk, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return NULL;
		linebuf_append(b, chunk, (size_t)got);
	}
}

static void *conn_thread(void *arg)
{
	struct conn *cn = arg;
	struct server *sv = cn->sv;
	struct linebuf buf = {0};
	size_t pos = 0;
	char *strs[4] = {NULL, NULL, NULL, NULL};
	struct ca_eval_config cfg = *sv->base;
	char *line = read_line(cn->fd, &buf, &pos);
	jv head = line ? jv_parse(line) : jv_invalid();
	free(line);
	jv opts = jv_get_kind(head) == JV_KIND_OBJECT ? ca_json_get(head, "opts") : jv_invalid();
	char *mode = jv_get_kind(head) == JV_KIND_OBJECT ? ca_json_strdup(head, "mode") : NULL;
	const char *why = NULL;
	if (jv_get_kind(opts) != JV_KIND_OBJECT || !mode || (strcmp(mode, "verify") && strcmp(mode, "profile")))
		why = "bad request";
	if (!why) {
		/* What the workers were started with must be what the client asks for. */
		jv mine = conn_options(sv->base);
		const char *fixed[] = {"device", "sandbox", "sandbox_user", NULL};
		for (int i = 0; fixed[i] && !why; i++) {
			jv a = ca_json_get(mine, fixed[i]), b = ca_json_get(opts, fixed[i]);
			if (!jv_equal(a, b))
				why = "the server's workers were started with other device or sandbox options";
		}
		double t = 0;
		ca_json_number(opts, "timeout_s", &t);
		if (!why && t > sv->base->timeout_s)
			why = "a longer --timeout than the server's";
		jv_free(mine);
	}
	if (!why) {
		double v;
		cfg.mode = !strcmp(mode, "verify") ? CA_EVAL_VERIFY : CA_EVAL_PROFILE;
		cfg.human = 0;
		cfg.verbose = 0;
		/*
		 * No workers are started from this thread: a worker dies with the
		 * thread that started it (PR_SET_PDEATHSIG), and this one ends with
		 * the connection. The server's main thread keeps the spares and the
		 * reference up (serve_refill).
		 */
		cfg.adhoc = 1;
		if (ca_json_number(opts, "checks", &v) == 1) cfg.checks = (int)v;
		if (ca_json_number(opts, "robust", &v) == 1) cfg.robust = (int)v;
		if (ca_json_number(opts, "shapes", &v) == 1) cfg.shapes = (int)v;
		if (ca_json_number(opts, "seed", &v) == 1) cfg.seed = (unsigned long long)v;
		cfg.seed_set = ca_json_bool(opts, "seed_set") == 1;
		if (ca_json_number(opts, "atol", &v) == 1) cfg.tol.atol = v;
		if (ca_json_number(opts, "rtol", &v) == 1) cfg.tol.rtol = v;
		cfg.allow_torch = ca_json_bool(opts, "allow_torch") == 1;
		if (ca_json_number(opts, "timeout_s", &v) == 1) cfg.timeout_s = v;
		cfg.arch = conn_str(opts, "arch", &strs[0]);
		cfg.build_cache = conn_str(opts, "build_cache", &strs[1]);
		if (ca_json_number(opts, "warmup", &v) == 1) cfg.warmup = (int)v;
		if (ca_json_number(opts, "iters", &v) == 1) cfg.iters = (int)v;
		if (ca_json_number(opts, "sets", &v) == 1) cfg.sets = (int)v;
		if (ca_json_number(opts, "keep", &v) == 1) cfg.keep = (int)v;
		cfg.compile_mode = conn_str(opts, "compile_mode", &strs[2]);
		cfg.no_compile = ca_json_bool(opts, "no_compile") == 1;
		cfg.no_cache = ca_json_bool(opts, "no_cache") == 1;
		if (ca_json_number(opts, "top", &v) == 1) cfg.top = (int)v;
		cfg.also_verify = ca_json_bool(opts, "also_verify") == 1;
	}
	free(mode);
	jv_free(opts);
	jv_free(head);
	jv hello = jv_object_set(jv_object(), jv_string("ok"), jv_bool(why == NULL));
	if (why)
		hello = set_str(hello, "error", why);
	int alive = write_line(cn->fd, hello) == 0 && !why;
	jv_free(hello);
	while (alive && (line = read_line(cn->fd, &buf, &pos))) {
		jv rec = jv_parse(line);
		free(line);
		int status = 0;
		jv out;
		if (jv_get_kind(rec) != JV_KIND_OBJECT) {
			jv_free(rec);
			out = ca_ndjson_error_record("server", 0, "not a JSON object");
			status = CA_EXIT_DATA;
		} else {
			pthread_mutex_lock(&sv->lock);
			int i;
			for (;;) {
				for (i = 0; i < sv->nslots && sv->busy[i]; i++)
					;
				if (i < sv->nslots)
					break;
				pthread_cond_wait(&sv->cond, &sv->lock);
			}
			sv->busy[i] = 1;
			pthread_mutex_unlock(&sv->lock);
			struct slot *s = &sv->slots[i];
			s->cfg = &cfg;
			out = evaluate_record(s, rec, &status);
			s->cfg = sv->base;
			pthread_mutex_lock(&sv->lock);
			sv->busy[i] = 0;
			sv->last = ca_proc_now();
			pthread_cond_broadcast(&sv->cond);
			pthread_mutex_unlock(&sv->lock);
		}
		jv reply = jv_object_set(jv_object(), jv_string("status"), jv_number(status));
		reply = jv_object_set(reply, jv_string("record"), out);
		alive = write_line(cn->fd, reply) == 0;
		jv_free(reply);
	}
	close(cn->fd);
	free(buf.data);
	for (int i = 0; i < 4; i++)
		free(strs[i]);
	pthread_mutex_lock(&sv->lock);
	sv->conns--;
	sv->last = ca_proc_now();
	pthread_mutex_unlock(&sv->lock);
	free(cn);
	return NULL;
}

/* From the server's main thread: idle slots get their reference worker and spares back. */
static void serve_refill(struct server *sv)
{
	for (int i = 0; i < sv->nslots; i++) {
		pthread_mutex_lock(&sv->lock);
		int mine = !sv->busy[i];
		if (mine)
			sv->busy[i] = 1;
		pthread_mutex_unlock(&sv->lock);
		if (!mine)
			continue;
		struct slot *s = &sv->slots[i];
		if (s->reference.running && ca_proc_wait_exit(&s->reference.co.proc, 0))
			worker_stop(&s->reference, 0);
		if (!s->reference.running) {
			jv fault;
			worker_stop(&s->reference, 0);
			memset(&s->reference, 0, sizeof s->reference);
			s->reference.hello = jv_invalid();
			if (worker_start(s, &s->reference, 0, &fault) != 0)
				jv_free(fault);
		}
		for (int k = 0; k < s->nspares; k++)
			if (s->spare[k].running && !jv_is_valid(s->spare[k].hello) && ca_proc_wait_exit(&s->spare[k].co.proc, 0))
				worker_stop(&s->spare[k], 0);
		spare_start(s);
		pthread_mutex_lock(&sv->lock);
		sv->busy[i] = 0;
		pthread_cond_broadcast(&sv->cond);
		pthread_mutex_unlock(&sv->lock);
	}
}

int ca_eval_serve(const struct ca_eval_config *cfg, const char *path, double idle_s)
{
	struct sockaddr_un addr;
	memset(&addr, 0, sizeof addr);
	addr.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof addr.sun_path) {
		ca_err_warn("%s: socket path too long", path);
		return CA_EXIT_USAGE;
	}
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	/* Its directory must be ours and closed to others: candidates must not reach the socket. */
	char dir[PATHLEN];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(dir, sizeof dir, ".");
	struct stat st;
	if (stat(*dir ? dir : "/", &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
		ca_err_warn("%s: the socket's directory must be yours and closed to others (chmod 700)", *dir ? dir : "/");
		return CA_EXIT_USAGE;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ca_err_warn_sys("socket");
		return CA_EXIT_SYSTEM;
	}
	unlink(path);
	if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || chmod(path, 0600) != 0 || listen(fd, 16) != 0) {
		ca_err_warn_sys("%s", path);
		close(fd);
		return CA_EXIT_SYSTEM;
	}
	/* A server answers single records in bursts: more spares kept started (see slot_open). */
	struct ca_eval_config *mine = ca_xmalloc(sizeof *mine);
	*mine = *cfg;
	mine->serving = 1;
	cfg = mine;
	struct server sv;
	memset(&sv, 0, sizeof sv);
	sv.base = cfg;
	sv.nslots = cfg->ngpus > 0 ? cfg->ngpus : 1;
	sv.slots = ca_xcalloc((size_t)sv.nslots, sizeof *sv.slots);
	sv.busy = ca_xcalloc((size_t)sv.nslots, sizeof *sv.busy);
	pthread_mutex_init(&sv.lock, NULL);
	pthread_cond_init(&sv.cond, NULL);
	ca_paths_cache();
	ca_paths_python();
	ca_paths_pydir();
	pycache_resolve();
	for (int i = 0; i < sv.nslots; i++) {
		int gpu = strcmp(cfg->device, "cpu") ? (cfg->ngpus > 0 ? cfg->gpus[i] : 0) : -1;
		if (slot_open(&sv.slots[i], cfg, i, gpu) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "cannot create a temporary directory");
		jv fault;
		if (worker_start(&sv.slots[i], &sv.slots[i].reference, 0, &fault) != 0)
			jv_free(fault);
		spare_start(&sv.slots[i]);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = serve_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sv.last = ca_proc_now();
	if (cfg->verbose)
		ca_err_warn("serving on %s (%d slot%s)", path, sv.nslots, sv.nslots == 1 ? "" : "s");
	while (!serve_stop) {
		serve_refill(&sv);
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = poll(&pfd, 1, 100);
		if (r > 0) {
			int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
			if (c < 0)
				continue;
			struct conn *cn = ca_xmalloc(sizeof *cn);
			cn->sv = &sv;
			cn->fd = c;
			pthread_t t;
			pthread_mutex_lock(&sv.lock);
			sv.conns++;
			pthread_mutex_unlock(&sv.lock);
			if (pthread_create(&t, NULL, conn_thread, cn) != 0) {
				close(c);
				free(cn);
				pthread_mutex_lock(&sv.lock);
				sv.conns--;
				pthread_mutex_unlock(&sv.lock);
			} else {
				pthread_detach(t);
			}
			continue;
		}
		pthread_mutex_lock(&sv.lock);
		int idle = sv.conns == 0 && idle_s > 0 && ca_proc_now() - sv.last > idle_s;
		pthread_mutex_unlock(&sv.lock);
		if (idle)
			break;
	}
	close(fd);
	unlink(path);
	/* Connections still running hold slots: wait for them a while, then go. */
	double until = ca_proc_now() + 5;
	for (;;) {
		pthread_mutex_lock(&sv.lock);
		int conns = sv.conns;
		pthread_mutex_unlock(&sv.lock);
		if (conns == 0 || ca_proc_now() > until)
			break;
		struct timespec ts = {0, 50000000};
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < sv.nslots; i++)
		slot_close(&sv.slots[i]);
	free(sv.slots);
	free(sv.busy);
	free(mine);
	return ca_err_finish(0);
}

/*
 * Score the records through a server; -1 (nothing written) when there is
 * none to use, so the caller works alone.
 */
static int client_stream(const struct ca_eval_config *cfg, const char *path, int nfiles, char **files)
{
	struct sockaddr_un addr;
	memset(&addr, 0, sizeof addr);
	addr.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof addr.sun_path)
		return -1;
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		if (cfg->verbose)
			ca_err_warn_sys("no evaluation server at %s; working alone", path);
		close(fd);
		return -1;
	}
	jv head = set_str(jv_object(), "mode", cfg->mode == CA_EVAL_VERIFY ? "verify" : "profile");
	head = jv_object_set(head, jv_string("opts"), conn_options(cfg));
	struct linebuf buf = {0};
	size_t pos = 0;
	char *line = write_line(fd, head) == 0 ? read_line(fd, &buf, &pos) : NULL;
	jv_free(head);
	jv hello = line ? jv_parse(line) : jv_invalid();
	free(line);
	if (jv_get_kind(hello) != JV_KIND_OBJECT || ca_json_bool(hello, "ok") != 1) {
		if (cfg->verbose) {
			char *err = jv_get_kind(hello) == JV_KIND_OBJECT ? ca_json_strdup(hello, "error") : NULL;
			ca_err_warn("the evaluation server at %s declined (%s); working alone", path, err ? err : "no answer");
			free(err);
		}
		jv_free(hello);
		free(buf.data);
		close(fd);
		return -1;
	}
	jv_free(hello);
	if (cfg->verbose)
		ca_err_warn("scoring through the evaluation server at %s", path);
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	int status = 0, lost = 0;
	for (;;) {
		jv rec, out;
		int kind = ca_ndjson_next(r, &rec);
		if (kind == CA_NDJSON_EOF)
			break;
		int st = 0;
		if (kind == CA_NDJSON_BAD) {
			ca_ndjson_warn(r, "%s", jv_string_value(rec));
			out = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(rec));
			jv_free(rec);
			st = CA_EXIT_DATA;
		} else {
			jv reply = jv_invalid();
			if (!lost && write_line(fd, rec) == 0 && (line = read_line(fd, &buf, &pos))) {
				reply = jv_parse(line);
				free(line);
			}
			jv_free(rec);
			jv got = jv_get_kind(reply) == JV_KIND_OBJECT ? ca_json_get(reply, "record") : jv_invalid();
			double v = 0;
			if (jv_get_kind(got) == JV_KIND_OBJECT) {
				ca_json_number(reply, "status", &v);
				st = (int)v;
				out = got;
			} else {
				jv_free(got);
				lost = 1;
				ca_err_warn("the evaluation server at %s went away", path);
				out = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), "the evaluation server went away");
				st = CA_EXIT_SYSTEM;
			}
			jv_free(reply);
		}
		if (cfg->verbose) {
			const char *field = cfg->mode == CA_EVAL_VERIFY ? "verify" : "profile";
			jv res = ca_json_get(out, field);
			if (jv_get_kind(res) == JV_KIND_OBJECT) {
				jv ph = ca_json_get(res, "phases");
				double secs = 0;
				ca_json_number(res, "seconds", &secs);
				if (jv_get_kind(ph) == JV_KIND_OBJECT)
					print_phases(out, ph, secs);
				jv_free(ph);
			}
			jv_free(res);
		}
		if (cfg->human) {
			print_human(cfg, out);
			jv_free(out);
			fflush(stdout);
		} else if (ca_ndjson_write(out) != 0) {
			status = CA_EXIT_SYSTEM;
		}
		status = ca_err_worst(status, st);
	}
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	free(buf.data);
	close(fd);
	return ca_err_finish(status);
}
