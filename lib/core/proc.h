/*
 * proc: child processes through one small API (owner: B1).
 *
 * Every ca command that runs another program goes through here: set up a
 * struct ca_proc, start it, finish it. The child gets its own process group
 * by default, so a timeout kills the whole group with SIGKILL. Statuses
 * follow ca(7): the child's exit code, 128+n when a signal n killed it,
 * 124 when our wall-clock limit ran out (proc->timed_out says which).
 * Between fork and exec the child makes only async-signal-safe calls; the
 * program is looked up in PATH before fork.
 *
 *   struct ca_proc p;
 *   const char *argv[] = {"nvcc", "--version", NULL};
 *   ca_proc_init(&p, argv);
 *   p.timeout_s = 10;
 *   struct ca_buf out = {0};
 *   int status = ca_proc_capture(&p, NULL, 0, &out, NULL, 1 << 20);
 *
 * Output capture has a size cap: bytes beyond it are read and dropped (and
 * counted), so a child writing 10 GB cannot exhaust our memory.
 *
 * ca_coproc keeps a long-lived worker: write request lines to its stdin,
 * read response lines from its stdout with a timeout (B2's warm Python
 * workers use this).
 *
 * Nothing here changes process-wide state: SIGPIPE is blocked around our
 * writes to a child, never ignored globally.
 */
#ifndef CA_PROC_H
#define CA_PROC_H

#include <stddef.h>
#include <sys/types.h>

enum ca_proc_io {
	CA_PROC_INHERIT = 0, /* the child shares our descriptor */
	CA_PROC_PIPE,        /* a new pipe; after start, our end is in in/out/err */
	CA_PROC_NULL,        /* /dev/null */
	CA_PROC_FD,          /* the caller's descriptor in in/out/err (not closed by us) */
	CA_PROC_TO_STDOUT,   /* stderr only: wherever the child's stdout goes */
};

enum { CA_PROC_TIMEOUT_STATUS = 124 };

struct ca_proc {
	/* Set up before ca_proc_start (ca_proc_init zeroes and sets defaults). */
	const char *const *argv;   /* argv[0] is searched in PATH unless it holds a '/' */
	const char *const *env;    /* NULL: our environment; else the complete environment */
	const char *cwd;           /* NULL: our working directory */
	enum ca_proc_io in_mode, out_mode, err_mode;
	int in, out, err;          /* CA_PROC_FD: the descriptor; CA_PROC_PIPE: our end after start, -1 once closed */
	double timeout_s;          /* wall clock from start; 0 means none */
	int new_group;             /* 1 (default): the child leads its own process group */
	int die_with_parent;       /* 1: the child gets SIGKILL when we die (PR_SET_PDEATHSIG) */
	int keep_fds;              /* 1: do not close our other descriptors (>2) in the child */

	/* Filled in by start and finish. */
	pid_t pid;                 /* 0 before start and after finish */
	int status;                /* as returned by ca_proc_finish */
	int timed_out;             /* 1 when the wall-clock limit killed it */
	int signal;                /* the signal that killed it, or 0 */
	double wall_s;             /* seconds from start to exit */
	long max_rss_kb;           /* peak resident set of the child (and its waited-for descendants) */

	/* Private. */
	double start_time;
	int pidfd;
};

/* Zero p and set the defaults (new_group = 1, descriptors -1, streams inherited). */
void ca_proc_init(struct ca_proc *p, const char *const *argv);

/*
 * Start the child. Returns 0, or -1 with errno set when it could not be
 * started: fork failed, or exec failed (ENOENT for a missing program, the
 * child's errno is passed back to us). Nothing to finish after -1.
 */
int ca_proc_start(struct ca_proc *p);

/*
 * Close our ends of any pipes still open, wait for the child until the
 * timeout (counted from start), kill its process group with SIGKILL when it
 * runs out, and reap it. Returns the status (see top) and sets p->status.
 */
int ca_proc_finish(struct ca_proc *p);

/* Wait at most timeout_s (< 0: forever) without killing: 1 exited (finish reaps it), 0 still running. */
int ca_proc_wait_exit(struct ca_proc *p, double timeout_s);

/*
 * Wait at most timeout_s (< 0: forever) until one of the n children has
 * exited, without killing or reaping: its index (finish reaps it), or -1
 * when none exited in time or a signal came (errno EINTR). Entries not
 * started (pid 0) are passed over; with none started it returns -1 at once.
 */
int ca_proc_wait_any(struct ca_proc *const *procs, size_t n, double timeout_s);

/* Send sig to the child's process group (or to the child alone without new_group). */
void ca_proc_kill(struct ca_proc *p, int sig);

/*
 * Send sig to root and every process below it, found through /proc (each
 * task's list of children where the kernel keeps them, else every
 * process's parent; so also those that left its process group or
 * session), parents before children, twice over for those forked
 * meanwhile. How many processes the second pass signalled.
 */
int ca_proc_signal_tree(pid_t root, int sig);
/* The same, and *found (freed by the caller) the processes the second pass signalled, in order. */
int ca_proc_signal_tree_found(pid_t root, int sig, pid_t **found);

/* What root and the processes below it have used so far, summed (as ca_proc_signal_tree finds them). */
struct ca_proc_usage {
	long long minflt, majflt;  /* page faults: minor, and major (read from a disk) */
	double cpu_s;              /* CPU seconds, user and system, in clock ticks */
};

/* Into *u; 0, or -1 when none of them could be read (u zero). */
int ca_proc_tree_usage(pid_t root, struct ca_proc_usage *u);

/* Start and finish; -1 (errno set) when it could not start. */
int ca_proc_run(struct ca_proc *p);

/*
 * A growing byte buffer; data is always NUL-terminated (when not NULL).
 * Past the cap, the bytes that come are dropped; with keep_tail the first
 * half of the cap is kept and the second holds the last bytes that came,
 * so that the end of a long output (a summary, an exit line) is its real
 * end: the dropped bytes were at data + dropped_at.
 */
struct ca_buf {
	char *data;
	size_t len;
	size_t dropped;     /* bytes the child wrote beyond the cap, read and thrown away */
	int keep_tail;      /* set before capture: keep the last bytes, not the first, past the cap */
	size_t dropped_at;  /* with keep_tail and dropped > 0: where in data the gap is */
	size_t ring;        /* private: the oldest byte of the kept tail while capturing */
};
void ca_buf_free(struct ca_buf *b);

/*
 * Run p to completion: write input[0..input_len) to its stdin (NULL input:
 * stdin from /dev/null), collect its stdout into out and its stderr into
 * err (each NULL: the mode set in p applies), keeping at most cap bytes of
 * each. Respects p->timeout_s. Returns the status, or -1 with errno when
 * the child could not be started. Buffers are appended to (start from {0}).
 */
int ca_proc_capture(struct ca_proc *p, const char *input, size_t input_len,
		struct ca_buf *out, struct ca_buf *err, size_t cap);

/*
 * Run argv (searched in PATH), stdin from /dev/null, stderr discarded, and
 * return its stdout (at most cap bytes, malloc'd, NUL-terminated) or NULL
 * when it could not be started. *status (may be NULL) gets the status.
 */
char *ca_proc_output(const char *const *argv, double timeout_s, size_t cap, int *status);

/*
 * A long-lived worker speaking lines on stdin/stdout. Its stderr is
 * inherited unless err_mode is set in proc before ca_coproc_start.
 */
struct ca_coproc {
	struct ca_proc proc;
	char *buf;              /* bytes read from the worker not yet returned */
	size_t len, cap;
	size_t max_line;        /* longest line accepted (default 256 MiB) */
	int eof;
};

/* Start argv as a coprocess (env and cwd as in struct ca_proc; may be NULL). 0 or -1 with errno. */
int ca_coproc_start(struct ca_coproc *c, const char *const *argv, const char *const *env, const char *cwd);
/*
 * Start with a prepared proc (the caller sets env, cwd, timeout_s ..., via
 * c->proc after ca_coproc_init); stdin and stdout are made pipes.
 */
void ca_coproc_init(struct ca_coproc *c, const char *const *argv);
int ca_coproc_start_prepared(struct ca_coproc *c);

/* Write one request line ('\n' appended when missing). 0, or -1 with errno (EPIPE: the worker is gone). */
int ca_coproc_write(struct ca_coproc *c, const char *line, size_t len);

/*
 * Read one response line (without its '\n', malloc'd, NUL-terminated), waiting
 * at most timeout_s (< 0: forever; 0, or a deadline passed while reading: what
 * is there already, a line that came in time is never lost). NULL on failure with errno: ETIMEDOUT,
 * EPIPE (the worker closed its stdout or died), EMSGSIZE (line over
 * max_line), or a read error. *len (may be NULL) gets the line length.
 */
char *ca_coproc_read_line(struct ca_coproc *c, double timeout_s, size_t *len);

/*
 * Wait at most timeout_s (< 0: forever) until one of the n coprocesses
 * (n <= 8) has something to read: a whole line buffered, its pipe
 * readable, or its end. Its index, or -1 when none had in time.
 */
int ca_coproc_wait_any(struct ca_coproc *const *cs, int n, double timeout_s);

/* 1 while the worker has not exited. */
int ca_coproc_alive(struct ca_coproc *c);

/*
 * Close its stdin, give it grace_s seconds to exit, then kill its group;
 * reap it and return its status (124 if it had to be killed).
 */
int ca_coproc_close(struct ca_coproc *c, double grace_s);

/*
 * Kill it (its group too) with SIGKILL, close our ends and free the buffer,
 * without waiting for it to exit: for a caller about to exit, whose
 * children init then reaps (a process holding a CUDA context takes 0.1 to
 * 0.3 s to die).
 */
void ca_coproc_abandon(struct ca_coproc *c);

/* Monotonic clock in seconds. */
double ca_proc_now(void);

#endif
