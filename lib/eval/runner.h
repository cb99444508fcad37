/*
 * runner: the one protocol of the warm worker processes the commands keep
 * (ca-verify and ca-profile's lib/py/ca_runner.py, ca-filter's
 * lib/py/ca_synth.py worker). A runner is started, possibly inside
 * ca-sandbox (ca_runner_sandboxed builds that command line through
 * ca_sandbox_command), with its stderr in a log; its first line, the
 * hello, is awaited with a timeout; then requests and replies go one JSON
 * object a line, each reply awaited until a deadline. A runner that times
 * out, breaks the protocol or is done with is killed with its whole
 * process group and reaped; a restart is a stop and a start.
 *
 * The runner owns its process and its hello; what a fault means for a
 * record (its stage, its message) is the caller's: the calls say what
 * happened (enum ca_runner_result) and r->status how the process ended.
 */
#ifndef CA_RUNNER_H
#define CA_RUNNER_H

#include <jv.h>

#include "proc.h"

struct ca_sandbox;

enum ca_runner_result {
	CA_RUNNER_OK = 0,
	CA_RUNNER_TIMEOUT,    /* nothing within the time: the runner is still running (kill it) */
	CA_RUNNER_GONE,       /* it closed its output or died: reaped, r->status says how */
	CA_RUNNER_TOO_LONG,   /* a line over the coprocess's max_line: still running (kill it) */
	CA_RUNNER_MALFORMED,  /* a line that is not JSON: still running */
};

struct ca_runner {
	struct ca_coproc co;
	int running;
	jv hello;             /* the first line once read (invalid before) */
	int status;           /* how it ended, once reaped (ca_proc's statuses) */
	double gone_grace_s;  /* once its output closed, how long it may take to exit before it is killed (2) */
};

/* Zero r: not running, no hello, the default grace. */
void ca_runner_init(struct ca_runner *r);

/*
 * Start argv with env (NULL: ours) in cwd (NULL: ours), stderr to log_fd
 * (< 0: inherited), killed when we die. 0, or -1 with errno.
 */
int ca_runner_start(struct ca_runner *r, const char *const *argv, const char *const *env, const char *cwd, int log_fd);

/*
 * Wait at most timeout_s for the first line and keep it in r->hello:
 * OK (a JSON value, which the caller judges), TIMEOUT, GONE or MALFORMED.
 */
enum ca_runner_result ca_runner_hello(struct ca_runner *r, double timeout_s);

/* Send one request line (msg consumed): OK, or GONE (reaped). */
enum ca_runner_result ca_runner_send(struct ca_runner *r, jv msg);

/* Read one line until the absolute time deadline (ca_proc_now's clock) into *line. */
enum ca_runner_result ca_runner_read(struct ca_runner *r, double deadline, jv *line);

/* Kill it and its process group, reap it; returns its status. */
int ca_runner_kill(struct ca_runner *r);

/* Close its input, give it grace_s seconds to exit, then kill its group; returns its status. */
int ca_runner_close(struct ca_runner *r, double grace_s);

/* Kill it and its group without waiting (at the end of a run: init reaps it). */
void ca_runner_abandon(struct ca_runner *r);

/* Forget the hello (after a stop, before a restart). */
void ca_runner_forget(struct ca_runner *r);

/*
 * The command line of argv inside ca-sandbox, configured by sb, with the
 * entries of env that start with one of the prefixes in pass (NULL
 * ended) passed in with --env. Free with ca_sandbox_command_free.
 */
char **ca_runner_sandboxed(const struct ca_sandbox *sb, const char *const *argv, char *const *env,
		const char *const *pass);

/*
 * "CA_CUPTI_LIB=PATH" for a runner's environment, PATH the CUPTI shim
 * installed beside the commands (bin/libca-cupti.so), so the runner's
 * timed loop reads CUPTI's device windows; allocated, or NULL where it is
 * not installed.
 */
char *ca_runner_cupti_env(void);

#endif
