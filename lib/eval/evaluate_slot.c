/*
 * evaluate_slot: a slot, one GPU's (or the CPU's) share of the pool: its
 * temporary root and trusted directory, its GPU lock, the reference
 * worker and the spare candidates started ahead; and the quiet loops that
 * keep worker start-ups away from timed loops on the same GPU.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "err.h"
#include "evaluate_impl.h"
#include "file.h"
#include "proc.h"

/*
 * Timed calls must have the GPU to themselves: ca-profile holds the GPU's
 * lock file exclusively around each timed loop, and the checks of
 * ca-verify (and the input draws of ca-profile) hold it shared, so in
 * `ca-verify | ca-profile`, or with several slots on one GPU, checks wait
 * while a loop is timed. op: LOCK_SH, LOCK_EX or LOCK_UN.
 */
void gpu_lock(struct slot *s, int op)
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
void quiet_before_start(int gpu)
{
	double until = ca_proc_now() + quiet_wait_s();
	pthread_mutex_lock(&quiet_mu);
	while (ntiming[quiet_index(gpu)] > 0 && ca_proc_now() < until)
		quiet_nap(10);
	pthread_mutex_unlock(&quiet_mu);
}

void quiet_started(int fd, pid_t pid, int gpu)
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
void quiet_done(int fd, pid_t pid)
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

/*
 * The candidates running a request of ours now, by GPU (the others are
 * stopped between requests: evaluate_worker.c). A GPU that stays busy
 * past the reference's wait while a candidate of another slot runs (a
 * load: loads are not under the GPU's lock) is not blamed on the
 * record's own candidate (evaluate_idle.c).
 */
static int nrunning[1025];

void candidates_running_add(int gpu, int d)
{
	pthread_mutex_lock(&quiet_mu);
	nrunning[quiet_index(gpu)] += d;
	pthread_mutex_unlock(&quiet_mu);
}

int candidates_running(int gpu)
{
	pthread_mutex_lock(&quiet_mu);
	int n = nrunning[quiet_index(gpu)];
	pthread_mutex_unlock(&quiet_mu);
	return n;
}

/*
 * Around every timed loop, the reference's and the candidate's: quiet, and
 * the GPU to itself. A request posted to the reference is read first: it
 * holds the GPU's lock shared while it runs (reference_warm).
 */
void timed_loop_begin(struct slot *s)
{
	jv fault;
	if (worker_settle(&s->reference, &fault) != 0)
		jv_free(fault);  /* gone: its next request finds it */
	quiet_loop_begin(s->gpu);
	gpu_lock(s, LOCK_EX);
}

void timed_loop_end(struct slot *s)
{
	gpu_lock(s, LOCK_UN);
	quiet_loop_end(s->gpu);
}

/*
 * The CPU a slot's two workers run their timed loops and bursts on (the
 * requests name it: see ca_runner's protocol). Our clock compares the
 * loop's own work around each call in the reference's process with the
 * candidate's in another, hundreds of microseconds of Python a call on a
 * GPU; on a shared host some CPUs run it far slower than others for
 * seconds (session 19, an H100 guest: 2 of 16 CPUs 1.4-1.75x slower), so
 * an honest candidate whose worker sat on one could look like a patched
 * clock. On one CPU both are clocked alike (the doubts that remained on
 * that guest are not the CPU's: bench/eval-h200.md). The fastest CPU now that no other slot
 * holds: the reference's overhead is then the least the machine gives,
 * and a candidate that moves its loop to another CPU gains nothing. On
 * the CPU device only with $CA_EVAL_CPU_PIN (tests): a CPU kernel's
 * threads started inside a pinned loop would stay on its one CPU.
 */
static pthread_mutex_t cpu_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned char cpu_held[CPU_SETSIZE];

void slot_pick_cpu(struct slot *s)
{
	const char *env = getenv("CA_EVAL_CPU_PIN");
	if (s->gpu < 0 && !(env && *env))
		return;
	int cpus[CPU_SETSIZE], n = ca_cpu_allowed(cpus, CPU_SETSIZE), free_n = 0;
	pthread_mutex_lock(&cpu_mu);
	if (s->cpu >= 0)
		cpu_held[s->cpu] = 0;
	for (int i = 0; i < n; i++)
		if (!cpu_held[cpus[i]])
			cpus[free_n++] = cpus[i];
	ca_cpu_rank(cpus, free_n);
	s->cpu = free_n > 0 ? cpus[0] : -1;
	if (s->cpu >= 0)
		cpu_held[s->cpu] = 1;
	pthread_mutex_unlock(&cpu_mu);
}

static void slot_drop_cpu(struct slot *s)
{
	pthread_mutex_lock(&cpu_mu);
	if (s->cpu >= 0)
		cpu_held[s->cpu] = 0;
	s->cpu = -1;
	pthread_mutex_unlock(&cpu_mu);
}

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

static int slot_make(struct slot *s, const struct ca_eval_config *cfg, int index, int gpu)
{
	memset(s, 0, sizeof *s);
	s->cfg = cfg;
	s->index = index;
	s->gpu = gpu;
	s->cpu = -1;
	s->reference.run.hello = jv_invalid();
	for (int i = 0; i < MAX_SPARES; i++)
		s->spare[i].run.hello = jv_invalid();
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
			if (s->lock_fd >= 0)
				snprintf(s->lock_path, sizeof s->lock_path, "%s", lock);
		}
	}
	return mkdir_mode(s->trusted, 0700);
}

/*
 * Open slot index of cfg on its GPU (--gpus' index-th, GPU 0 without
 * --gpus, -1 on the CPU); exits when its directories cannot be made.
 */
void slot_open(struct slot *s, const struct ca_eval_config *cfg, int index)
{
	int gpu = strcmp(cfg->device, "cpu") ? (cfg->ngpus > 0 ? cfg->gpus[index] : 0) : -1;
	if (slot_make(s, cfg, index, gpu) != 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "cannot create a temporary directory");
}

/*
 * At the end of the run: kill the slot's workers, leaving them to the
 * kernel to reap, and remove its directory.
 */
void slot_close(struct slot *s)
{
	for (int i = 0; i < MAX_SPARES; i++)
		worker_abandon(&s->spare[i]);
	worker_abandon(&s->reference);
	slot_drop_cpu(s);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	if (s->root[0])
		ca_file_remove_tree(s->root);
}

/* A fresh candidate worker on an empty private directory (the spare if one is ready). */
int candidate_take(struct slot *s, struct worker *out, jv *fault)
{
	for (int i = 0; i < s->nspares; i++) {
		/* A spare that has died waiting (its sandbox's wall-clock limit) is replaced. */
		if (s->spare[i].run.running && !jv_is_valid(s->spare[i].run.hello) && ca_proc_wait_exit(&s->spare[i].run.co.proc, 0))
			worker_stop(&s->spare[i], 0);
		if (!s->spare[i].run.running)
			continue;
		*out = s->spare[i];
		memmove(&s->spare[i], &s->spare[i + 1], (size_t)(MAX_SPARES - 1 - i) * sizeof s->spare[0]);
		memset(&s->spare[MAX_SPARES - 1], 0, sizeof s->spare[0]);
		s->spare[MAX_SPARES - 1].run.hello = jv_invalid();
		return 0;
	}
	memset(out, 0, sizeof *out);
	out->run.hello = jv_invalid();
	snprintf(out->dir, sizeof out->dir, "%s/ws-%ld", s->root, ++s->serial);
	if (mkdir_mode(out->dir, 0777) != 0) {
		*fault = jv_object_set(jv_object_set(jv_object(), jv_string("stage"), jv_string("system")),
			jv_string("error"), jv_string("cannot create the candidate's directory"));
		return -1;
	}
	return worker_start(s, out, 1, fault);
}

/* Start spare candidate workers, so the next records find them up. */
void spare_start(struct slot *s)
{
	for (int i = 0; i < s->nspares; i++) {
		struct worker *w = &s->spare[i];
		jv fault = jv_invalid();
		if (w->run.running)
			continue;
		worker_stop(w, 0);
		memset(w, 0, sizeof *w);
		w->run.hello = jv_invalid();
		snprintf(w->dir, sizeof w->dir, "%s/ws-%ld", s->root, ++s->serial);
		if (mkdir_mode(w->dir, 0777) != 0 || worker_start(s, w, 1, &fault) != 0) {
			ca_file_remove_tree(w->dir);
			w->run.running = 0;
		}
		jv_free(fault);
	}
}

void candidate_release(struct slot *s, struct worker *w)
{
	worker_stop(w, 0);
	if (w->dir[0])
		ca_file_remove_tree(w->dir);
	if (!s->cfg->adhoc && more_records(s))
		spare_start(s);
}

int reference_ready(struct slot *s, jv *fault)
{
	if (!s->reference.run.running) {
		worker_stop(&s->reference, 0);
		memset(&s->reference, 0, sizeof s->reference);
		s->reference.run.hello = jv_invalid();
		if (worker_start(s, &s->reference, 0, fault) != 0)
			return -1;
	}
	return worker_ready(&s->reference, s->cfg->load_timeout_s, fault);
}
