/*
 * sandbox: run an untrusted command with everything this kernel offers to
 * contain it (owner: B1). The ca-sandbox command is a thin front end; see
 * ca-sandbox(1) for what each mode applies.
 *
 * Three modes, chosen by what we may do:
 *   "root"    started as root: new PID, mount, network and IPC namespaces,
 *             the command runs as an unprivileged uid (default 65534) with
 *             supplementary groups cleared;
 *   "userns"  unprivileged but user namespaces work: the same namespaces
 *             inside a new user namespace (the uid stays ours);
 *   "plain"   neither: rlimits, no_new_privs, Landlock, seccomp and a process
 *             group plus subreaper for killing the tree.
 * In every mode: a clean environment, rlimits, PR_SET_NO_NEW_PRIVS, Landlock
 * (write access only below DIR, the private /tmp and /dev) where the kernel
 * has it, a seccomp filter refusing non-local sockets unless the network is
 * allowed, and the whole tree killed at the wall-clock limit.
 *
 * ca_sandbox_run() forks and then sets up the child with calls that are not
 * async-signal-safe: call it only from a single-threaded process. Threaded
 * programs run the ca-sandbox command through lib/proc instead, with the
 * argv that ca_sandbox_command() builds.
 */
#ifndef CA_SANDBOX_H
#define CA_SANDBOX_H

#include <stddef.h>
#include <sys/types.h>
#include <jv.h>

enum { CA_SANDBOX_SETUP_FAILED = 125 };

struct ca_sandbox {
	const char *dir;          /* working directory, writable; NULL: a private empty one */
	double time_s;            /* wall-clock limit for the whole tree; 0: none */
	long long cpu_s;          /* RLIMIT_CPU; 0: none */
	long long fsize_mb;       /* RLIMIT_FSIZE and the size of the private /tmp; 0: default 1024 */
	long long mem_mb;         /* RLIMIT_AS; 0: none (CUDA reserves huge virtual ranges) */
	long long nofile;         /* RLIMIT_NOFILE; 0: default 4096 */
	long long nproc;          /* RLIMIT_NPROC (counts threads too); 0: default 4096 */
	long long uid;            /* uid to run as when started as root; < 0: default 65534 */
	int allow_network;
	int gpu;                  /* keep /dev/nvidia* usable */
	const char **env;         /* extra NAME=VALUE entries */
	size_t nenv;
	const char **hide;        /* paths made unreachable */
	size_t nhide;
	const char **ro;          /* paths made read-only */
	size_t nro;
	const char **show;        /* paths below /tmp put back, read-only, under the private /tmp; never refused */
	size_t nshow;
};

struct ca_sandbox_result {
	int status;               /* as ca-sandbox exits: the command's, 124, 128+n, 125 */
	int signal;               /* signal that killed the command, 0 if none */
	int timed_out;
	double wall_s;
	long max_rss_kb;
	char error[512];          /* why setup failed (status 125), else "" */
	jv isolation;             /* object: what was applied; owned by the result */
};

/* Defaults for every field (all zero except uid = -1). */
void ca_sandbox_init(struct ca_sandbox *cfg);

/*
 * Run argv (searched in the sandbox's PATH) in the sandbox with our stdin,
 * stdout and stderr, and wait for it. Returns res->status. Free res->isolation
 * with ca_sandbox_result_free.
 */
int ca_sandbox_run(const struct ca_sandbox *cfg, const char *const *argv, struct ca_sandbox_result *res);
void ca_sandbox_result_free(struct ca_sandbox_result *res);

/* The --report object: {"status","signal","timed_out","wall_s","max_rss_kb","isolation"}. Borrows res. */
jv ca_sandbox_report(const struct ca_sandbox_result *res);

/*
 * The argv of the equivalent ca-sandbox command line (program found next to
 * the running binary, else in PATH), ending in argv and NULL. Free with
 * ca_sandbox_command_free. report may be NULL.
 */
char **ca_sandbox_command(const struct ca_sandbox *cfg, const char *report, const char *const *argv);
void ca_sandbox_command_free(char **argv);

/* Landlock ABI version of this kernel, 0 when it has none. */
int ca_sandbox_landlock_abi(void);

#endif
