/*
 * evaluate_impl: what the pieces of the evaluation engine share, private
 * to lib/eval/evaluate*.c (the public face is evaluate.h).
 *
 * Where a record goes in ca-verify or ca-profile:
 *   evaluate_stream.c   ca_eval_stream reads the records and queues them to
 *                       the pool (lib/pool), one slot per thread, which
 *                       writes the results in input order (ca_eval_directory:
 *                       one workspace DIR as a record);
 *   evaluate.c          evaluate_record: one record through a slot, its
 *                       result's verdict (finish_result) and the exit status;
 *                       the options and the operands (ca_eval_option, ca_eval_run);
 *   evaluate_job.c      job_prepare: the candidate's workspace, its build
 *                       (lib/build's ca_build_workspace, in this process;
 *                       the compilers sandboxed), the reference task loaded, the
 *                       candidate loaded; then one of
 *   evaluate_verify.c   do_verify: the checks, the robustness checks, the
 *                       checks at other sizes, judged by lib/compare;
 *   evaluate_profile.c  do_profile: the inputs of the timed loops, the
 *                       candidate's loop, retimed when our clock doubts it,
 *                       and the spot checks of its outputs, against
 *   evaluate_baseline.c the reference's eager and torch.compile loops
 *                       (cached per task, GPU, torch version and method);
 *   evaluate_clock.c    our own clock around a worker's timed loop, and its
 *                       verdict on the time the worker reports;
 *   evaluate_idle.c     the GPU idle around the reference's timed loops.
 * Underneath: evaluate_slot.c (a slot: its GPU, lock, temporary root, the
 * reference worker and spare candidates; quiet loops), evaluate_worker.c
 * (a worker process, lib/py/ca_runner.py, over lib/runner's line protocol),
 * evaluate_files.c (files in the candidate's directory), and
 * evaluate_serve.c (ca-verify --serve and the commands that connect to it).
 *
 * Ownership: a record, its job and its workers belong to one slot's thread
 * at a time; the pool's queue, the quiet-loop table (with the count of
 * candidates running by GPU) and the hash walk of the extension cache are
 * the only state threads share, each under its own lock.
 */
#ifndef CA_EVALUATE_IMPL_H
#define CA_EVALUATE_IMPL_H

#include <limits.h>
#include <pthread.h>
#include <sys/types.h>

#include <jv.h>

#include "evaluate.h"
#include "json.h"
#include "proc.h"
#include "runner.h"

enum { PATHLEN = PATH_MAX + 64, MAX_SPARES = 8 };

/*
 * An output's digest as a worker sends one (ca_runner's _out_digest): its
 * sum, sum of magnitudes, sum of squares and largest magnitude, then
 * DIGEST_SIGNED sums of its elements under pseudo-random signs, all
 * float64.
 */
enum { DIGEST_SIGNED = 4, DIGEST_LEN = 4 + DIGEST_SIGNED };

/* A worker process (lib/py/ca_runner.py): the trusted reference, or a candidate in ca-sandbox. */
struct worker {
	struct ca_runner run;    /* its process; run.hello: the ready line */
	char log[PATHLEN];
	char dir[PATHLEN];       /* candidate: its private workspace */
	char **argv;
	char **env;
	double limit_s;          /* of the request in flight, for messages */
	int gpu;                 /* its slot's, -1 for the CPU */
	int hold;                /* stopped between requests (a candidate, from its load on: worker_hold_from_now) */
	int held;                /* stopped now */
	pid_t *stopped;          /* held: the processes stopped, to continue */
	int nstopped;
	double replied_at;       /* when its last reply came in, before it was stopped */
	double posted_until;     /* a request posted (worker_post): its reply due by then; 0: none */
};

struct ca_pool;

/* One GPU's (or the CPU's) share of the evaluation: its workers and files. */
struct slot {
	const struct ca_eval_config *cfg;
	struct ca_pool *pool;    /* the stream's records (NULL for a server: more may come) */
	int index;
	int gpu;                 /* -1 for cpu */
	char root[PATHLEN];      /* private temp root (0711) */
	char trusted[PATHLEN];   /* reference files, hidden from candidates (0700) */
	struct worker reference;
	struct worker spare[MAX_SPARES];  /* candidate workers started ahead, oldest first */
	int nspares;             /* how many to keep started */
	long serial;
	int lock_fd;             /* the GPU's lock file (see gpu_lock), -1 on the CPU */
	char lock_path[PATHLEN]; /* its path, for the reference's warm request */
	int cpu;                 /* where both workers run their timed loops (slot_pick_cpu), -1 anywhere */
};

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
	 * magnitudes, sum of squares, then signed sums: DIGEST_LEN float64,
	 * see digest_within): a kept output written later
	 * must match the digest sent while our clock ran, so the work cannot
	 * be left for after the loop; with the checks named before the loop,
	 * calls picked after it are compared with the reference's
	 * (digest_spot_checks).
	 */
	double (*digests)[DIGEST_LEN];  /* digests[i]: tick i's (NAN where it sent none) */
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
 * The reference's loop overhead, from its eager baseline, in seconds:
 * per batch, per call (the fastest tenth of what our clock saw beyond
 * each call's time), and split at the ready lines into the call phase's
 * beyond the call's time (ready) and the inputs' phase (inputs). NAN
 * where not measured.
 */
struct loop_overhead {
	double batch, call, ready, inputs;
};

/* One record being evaluated. */
struct job {
	struct slot *slot;
	char id[64];             /* the record's id, for -v ("-" without one) */
	jv result;               /* the verify/profile object being built */
	struct worker cand;
	char task_sha[65];
	char io[PATHLEN];        /* candidate dir/.ca-io: inputs and outputs */
	char kernels_lib[PATHLEN];
	char ext_key[65];        /* torch extensions cache key ("" when the candidate builds none) */
	int loaded;              /* the candidate's ModelNew loaded */
	int ask_mem;             /* a failure asked again: the reference's requests ask for its GPU memory ("mem": evaluate_again.c) */
	jv ref_state;            /* the requests that made the reference's model, to start it again (reference_revive); invalid before */
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
	double started;
	jv phases;               /* seconds by phase */
	double mark;             /* when the last phase ended */
};

static inline jv set_str(jv o, const char *k, const char *v) { return jv_object_set(o, jv_string(k), jv_string(v)); }
static inline jv set_num(jv o, const char *k, double v) { return jv_object_set(o, jv_string(k), ca_json_num_or_null(v)); }

/* evaluate.c: one record through a slot; the -H summary, the -v phases. */
jv evaluate_record(struct slot *s, jv record, int *status);
void print_human(const struct ca_eval_config *cfg, jv record);
void print_phases(jv record, jv phases, double seconds);
const char *gpu_missing(char *why, size_t size);

/* evaluate_files.c: files in the candidate's directory and ours. */
int eval_write_file(const char *path, const char *data, size_t len);
char *eval_read_file(const char *path, size_t cap, size_t *len);
char *log_tail(const char *path, size_t max);
int mkdir_mode(const char *path, mode_t mode);
const char *write_files(const char *dir, jv files, char *why, size_t why_len);
void chmod_tree(const char *dir);
int has_kernel_sources(const char *dir);
int reveal_file(const char *from, const char *to);
int reveal_copy(const char *from, const char *to);
int candidate_filled_disk(const char *dir, int err, char *why, size_t size);
const char *placing_failed(const char *dir, int err, const char *what, char *why, size_t size);

/* evaluate_worker.c: a worker's start, requests and replies, and end. */
void workers_prepare(void);
int worker_start(struct slot *s, struct worker *w, int candidate, jv *fault);
int worker_ready(struct worker *w, double timeout_s, jv *fault);
int worker_send(struct worker *w, jv req, jv *fault);
int worker_post(struct worker *w, jv req, double timeout_s, jv *fault);
int worker_settle(struct worker *w, jv *fault);
int warm_compile_wanted(const struct ca_eval_config *cfg);
int worker_recv(struct worker *w, double deadline, jv *reply, jv *fault, struct loop_clock *ours);
int worker_call(struct worker *w, jv req, double timeout_s, jv *reply, jv *fault, struct loop_clock *ours);
int worker_first(struct worker *a, struct worker *b, double deadline);
void worker_hold_from_now(struct worker *w);
void worker_wake(struct worker *w);
void worker_stop(struct worker *w, double grace);
void worker_abandon(struct worker *w);

/* evaluate_clock.c: our clock around a timed loop, and its verdict. */
unsigned long long random_u64(void);
void loop_clock_free(struct loop_clock *c);
void loop_clock_reset(struct loop_clock *c);
jv loop_clock_choose(struct loop_clock *c);
void loop_clock_note(struct loop_clock *c, const char *what, jv line);
int loop_clock_calls(const struct loop_clock *c, double *out, int n);
int loop_clock_phases(const struct loop_clock *c, double *inputs, double *call, int n);
int file_digest(const char *path, double out[3]);
void digest_from(jv d, double out[DIGEST_LEN]);
int digest_agrees(const double mine[3], const double theirs[3]);
int digest_within(const struct ca_compare_options *tol, const double ref[DIGEST_LEN], double numel,
	const double c[DIGEST_LEN]);
void digest_text(const double d[DIGEST_LEN], char *buf, size_t size);
double quantile_of(double *v, int n, double q);
/*
 * evaluate_burst.c: a second clock, ours alone (see evaluate_burst.c):
 * N calls back to back in the reference and in the candidate on the same
 * fresh inputs, the whole request clocked from here.
 */
struct burst {
	int calls;                /* calls per burst (0: none timed) */
	double ref_s, cand_s;     /* each role's fastest burst on our clock */
	double implied_us;        /* the candidate's time per call they imply */
	double bound_us;          /* the least reported median that passes */
};
int burst_time(struct job *j, const struct loop_overhead *ref, struct burst *b);
int burst_verdict(struct burst *b, double reported_us, double eager_us, char *msg, size_t size);

int clock_verdict(const struct loop_clock *ours, jv reply, int iters, const struct loop_overhead *ref,
		int on_cpu, double *wall_per_call, double *call_us, double *bound_us, char *msg, size_t size);

/* evaluate_slot.c: a slot's directories, lock and workers; quiet loops. */
void slot_open(struct slot *s, const struct ca_eval_config *cfg, int index);
void slot_close(struct slot *s);
int reference_ready(struct slot *s, jv *fault);
int candidate_take(struct slot *s, struct worker *out, jv *fault);
void candidate_release(struct slot *s, struct worker *w);
void spare_start(struct slot *s);
void gpu_lock(struct slot *s, int op);
void timed_loop_begin(struct slot *s);
void timed_loop_end(struct slot *s);
void slot_pick_cpu(struct slot *s);
void quiet_before_start(int gpu);
void quiet_started(int fd, pid_t pid, int gpu);
void quiet_done(int fd, pid_t pid);
void candidates_running_add(int gpu, int d);
int candidates_running(int gpu);

/* evaluate_job.c: a record's job up to a loaded candidate, and what its steps share. */
int job_prepare(struct job *j, jv record);
void job_phase(struct job *j, const char *name);
void job_fail(struct job *j, const char *stage, const char *error);
void job_fault(struct job *j, jv fault, const char *prefix);
void reference_failed(struct job *j, jv why);
int reference_call(struct job *j, jv req, double timeout, jv *reply);
int reference_answer(struct job *j, double timeout, jv *reply, jv *why);
int reference_send(struct job *j, jv req, double timeout);
int candidate_call(struct job *j, jv req, double timeout, jv *reply, struct loop_clock *ours);
unsigned long long fresh_seed(void);
void ext_save(struct job *j);
double kernel_sum_us(jv kernels);
jv top_kernels(jv kernels, int top, int *nbad, jv *bad_names);

/*
 * evaluate_idle.c: around a timed loop of the reference's, the GPU idle.
 * run: 0 with *reply; 1 when the reference answered that the loop failed,
 * its answer in *reply (not recorded); -1 with the record failed.
 */
int reference_loop(struct job *j, int (*run)(struct job *j, void *arg, jv *reply), void *arg, jv *reply);

/*
 * evaluate_again.c: what the reference failed beside the candidate, tried
 * again. A try: 0 with *reply; 1 with *why, the reference's answer that it
 * failed or the fault of a reference gone (reference_gone; not recorded);
 * -1 with the record failed. reference_state: a request (consumed) that
 * made the reference's model ("task", "resize") in seconds, kept to start
 * it again.
 */
typedef int again_try(struct job *j, void *arg, jv *reply, jv *why);
int reference_again_with(struct job *j, again_try *once, void *arg, jv why, jv *reply);
int reference_again(struct job *j, jv req, double timeout, jv why, jv *reply);
int reference_gone(struct job *j, jv fault, jv *why);
void reference_state(struct job *j, jv req, double seconds);

/* evaluate_verify.c */
void do_verify(struct job *j);
void note_drawn_on(struct job *j, jv reply);
int digest_matches(jv reply, const char *key, int i, jv want);

/* evaluate_profile.c */
void do_profile(struct job *j);
jv with_cpu(const struct slot *s, jv req);
jv time_request(struct job *j, const char *mode, const char *keep_prefix, jv keep, struct loop_clock *ours,
		const unsigned long long *live);
jv keep_indices(const struct ca_eval_config *cfg, unsigned long long seed);
void ship_unreveal(const struct job *j);
void ship_path(const struct job *j, const char *what, int k, char *out, size_t size);
int ship_write(struct job *j, unsigned long long seed, const char *path, jv *digests);

/* evaluate_baseline.c */
int profile_baselines(struct job *j, struct loop_overhead *overhead);
int fresh_overhead(struct job *j, struct loop_overhead *overhead);
int confirm_baselines(struct job *j, double candidate_us);

/* evaluate_stream.c: whether the slot's stream may still bring records (always for a server's). */
int more_records(struct slot *s);

/* evaluate_serve.c: the records scored through a server; -1 (nothing written) when there is none. */
int client_stream(const struct ca_eval_config *cfg, const char *path, int nfiles, char **files);

#endif
