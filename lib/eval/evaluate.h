/*
 * evaluate: the engine behind ca-verify and ca-profile (owner: B2).
 *
 * One slot per GPU (or one CPU slot with device "cpu"): a warm trusted
 * reference worker (lib/py/ca_runner.py --role reference) that loads tasks,
 * draws inputs under recorded seeds, runs and times the reference; and, per
 * candidate, a fresh worker (--role candidate) started inside ca-sandbox
 * with a private copy of the workspace. A spare candidate process is kept
 * started ahead, so Python + torch + CUDA start-up overlaps the previous
 * record. Outputs come back as tensor files and are judged by lib/compare;
 * timing is judged against our own wall clock.
 *
 * ca_eval_stream() runs the record loop over a pool of slots, one thread
 * each, writing records in input order (or as they finish, unordered),
 * the fields it does not touch as they were read. Records are confined to
 * one thread at a time, which also builds their kernels (lib/eval/build,
 * in this process; the compilers under ca-sandbox); nothing else is shared
 * but the queue and the build cache. The pieces of the engine, and where
 * a record goes through them, are listed in evaluate_impl.h.
 */
#ifndef CA_EVALUATE_H
#define CA_EVALUATE_H

#include <getopt.h>

#include <jv.h>

#include "compare.h"

enum ca_eval_mode { CA_EVAL_VERIFY, CA_EVAL_PROFILE };

struct ca_eval_config {
	enum ca_eval_mode mode;
	const char *device;          /* "cuda" or "cpu" */
	int *gpus;                   /* GPU indices, one slot each */
	int ngpus;
	int unordered;
	int human;                   /* -H: a summary line per record instead of JSON */
	int checks;                  /* verify: number of checks (default 5) */
	int robust;                  /* verify: robustness checks after them (default 3, 0: none) */
	int shapes;                  /* verify: other sizes of the task checked last (default 0: none) */
	unsigned long long seed;     /* base seed */
	int seed_set;                /* 0: a fresh random seed per record */
	struct ca_compare_options tol;
	int allow_torch;
	int sandbox;                 /* 0: --no-sandbox */
	const char *sandbox_user;    /* ca-sandbox --user, NULL: its default */
	double timeout_s;            /* per run/time request of a candidate */
	double load_timeout_s;       /* candidate start + load (includes load_inline builds) */
	const char *arch;            /* the build's arch (ca-build --arch), NULL: auto */
	const char *build_cache;     /* the build's cache (ca-build --cache), NULL: default */
	long long fsize_mb;          /* candidate's file size limit */
	/* profile */
	int warmup, iters, sets, keep;
	const char *compile_mode;    /* NULL: default */
	int no_compile;
	int no_cache;                /* do not read or write cached baselines */
	int top;                     /* kernels listed per method */
	int adhoc;                   /* a single ad-hoc record: no spare worker */
	int verbose;                 /* -v: each record's phases on stderr */
	int also_verify;             /* profile --verify: verify first, same workers, both fields */
	int serving;                 /* set by ca_eval_serve (4 spares per GPU slot) */
	const char *no_gpu_why;      /* set by ca_eval_stream: why no GPU can run a record here */
	const char *serve;           /* --serve SOCKET (ca_eval_run), NULL: score the operands */
};

void ca_eval_defaults(struct ca_eval_config *cfg, enum ca_eval_mode mode);

/*
 * One option of ca-verify or ca-profile, by its long name without the
 * dashes ("checks", "no-sandbox"), into cfg; value is its argument (NULL
 * for a flag) and is kept, not copied. A bad value is a usage error:
 * the diagnostic is printed and the process exits 2. -1 for a name that
 * is no evaluation option. Each command's table says which it accepts.
 */
int ca_eval_option(struct ca_eval_config *cfg, const char *name, const char *value);

/*
 * The long options ca-verify and ca-profile both take, -h and -u
 * included; each command's table adds its own after them. Those without a
 * short option reach ca_eval_option by name: their vals only tell them
 * apart.
 */
#define CA_EVAL_LONGOPTS \
	{"allow-torch", no_argument, NULL, 'A'}, \
	{"arch", required_argument, NULL, 'a'}, \
	{"atol", required_argument, NULL, 't'}, \
	{"build-cache", required_argument, NULL, 'B'}, \
	{"device", required_argument, NULL, 'd'}, \
	{"gpus", required_argument, NULL, 'g'}, \
	{"help", no_argument, NULL, 'h'}, \
	{"no-sandbox", no_argument, NULL, 'S'}, \
	{"robust", required_argument, NULL, 'R'}, \
	{"rtol", required_argument, NULL, 'r'}, \
	{"sandbox-user", required_argument, NULL, 'Y'}, \
	{"seed", required_argument, NULL, 's'}, \
	{"serve", required_argument, NULL, 'E'}, \
	{"shapes", required_argument, NULL, 'z'}, \
	{"timeout", required_argument, NULL, 'T'}, \
	{"unbuffered", no_argument, NULL, 'u'}, \
	{"unordered", no_argument, NULL, 'U'}, \
	{"verbose", no_argument, NULL, 'v'}

/*
 * The command line of ca-verify or ca-profile into cfg, with the
 * command's longopts (the options it takes): -H, -v and the common
 * options (ca_opt_common) by their letters, every other long option by
 * name through ca_eval_option. The operands start at optind.
 */
void ca_eval_options(struct ca_eval_config *cfg, int argc, char **argv, const struct option *longopts,
	const char *usage);

/*
 * What the operands ask for, once the options are in cfg: with --serve
 * (cfg->serve) a server, which takes none; a directory as the only
 * operand, that workspace ad hoc; else the files of records (none:
 * stdin). A usage error prints the diagnostic (and, for a directory
 * among other operands, the command's usage text) and exits 2. Frees
 * cfg->gpus; returns the exit status.
 */
int ca_eval_run(struct ca_eval_config *cfg, int nargs, char **args, const char *usage);

/*
 * Run the record loop over files (nfiles == 0: stdin), adding "verify" or
 * "profile" to each record. Returns the exit status (0, 1 when a record
 * failed verification in verify mode, 3 for malformed input, 4 for our
 * own failures).
 */
int ca_eval_stream(const struct ca_eval_config *cfg, int nfiles, char **files);

/*
 * Serve: keep the slots warm and score the records of commands that find
 * path in $CA_EVAL_SERVER (ca_eval_stream connects there first), until
 * SIGTERM/SIGINT/SIGHUP or idle_s seconds without a connection (0: never).
 */
int ca_eval_serve(const struct ca_eval_config *cfg, const char *path, double idle_s);

/* Evaluate one ad-hoc workspace DIR (model.py, model_new.py, kernels/). */
int ca_eval_directory(const struct ca_eval_config *cfg, const char *dir);

/*
 * The kernel-name policy, exported for tests: 1 when a GPU kernel of this
 * name means ATen or torch.compile did compute (copies and fills excepted).
 */
int ca_eval_kernel_forbidden(const char *name);

/* Cache key of a baseline: sha256 hex of the fields that decide the number. */
void ca_eval_baseline_key(const char *task_sha, const char *gpu, const char *torch_version,
		const char *method, int warmup, int iters, int sets, char hex[65]);

#endif
