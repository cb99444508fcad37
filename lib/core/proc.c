/* proc: see proc.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "paths.h"
#include "proc.h"

extern char **environ;

double ca_proc_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ca_proc_init(struct ca_proc *p, const char *const *argv)
{
	memset(p, 0, sizeof *p);
	p->argv = argv;
	p->in = p->out = p->err = -1;
	p->new_group = 1;
	p->pidfd = -1;
}

void ca_buf_free(struct ca_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->dropped = b->dropped_at = b->ring = 0;
}

/*
 * With keep_tail, a full buffer is a fixed head, [0, cap - cap / 2), and
 * a ring of the last cap / 2 bytes whose oldest byte is at head + ring;
 * buf_settle puts the ring in order once the child is done.
 */
static void buf_append(struct ca_buf *b, const char *data, size_t n, size_t cap)
{
	size_t room = b->len < cap ? cap - b->len : 0;
	size_t keep = n < room ? n : room;
	if (!b->data) {
		b->data = ca_xmalloc(keep + 1);
		b->data[0] = '\0';
	}
	if (keep > 0) {
		b->data = ca_xrealloc(b->data, b->len + keep + 1);
		memcpy(b->data + b->len, data, keep);
		b->len += keep;
		b->data[b->len] = '\0';
	}
	data += keep;
	n -= keep;
	if (n == 0)
		return;
	b->dropped += n;  /* each byte past the cap pushes one out, of the ring or itself */
	size_t size = cap / 2, head = cap - size;
	if (!b->keep_tail || size == 0 || b->len != cap)
		return;
	b->dropped_at = head;
	if (n >= size) {
		memcpy(b->data + head, data + n - size, size);
		b->ring = 0;
		return;
	}
	size_t first = size - b->ring < n ? size - b->ring : n;
	memcpy(b->data + head + b->ring, data, first);
	memcpy(b->data + head, data + first, n - first);
	b->ring = (b->ring + n) % size;
}

/* Put a kept tail in the order its bytes came. */
static void buf_settle(struct ca_buf *b)
{
	if (!b || !b->keep_tail || b->dropped == 0 || b->ring == 0)
		return;
	char *tail = b->data + b->dropped_at;
	size_t size = b->len - b->dropped_at;
	char *copy = ca_xmalloc(size);
	memcpy(copy, tail + b->ring, size - b->ring);
	memcpy(copy + size - b->ring, tail, b->ring);
	memcpy(tail, copy, size);
	free(copy);
	b->ring = 0;
}

/* The value of PATH in env (or our own), for the lookup before fork. */
static const char *env_path(const char *const *env)
{
	if (!env)
		return getenv("PATH");
	for (size_t i = 0; env[i]; i++)
		if (strncmp(env[i], "PATH=", 5) == 0)
			return env[i] + 5;
	return NULL;
}

/* A malloc'd path for argv[0], or NULL with errno ENOENT. */
static char *find_program(const char *name, const char *const *env)
{
	const char *path = env_path(env);
	return ca_paths_find_program(name, path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
}

static void close_fd(int *fd)
{
	if (*fd >= 0) {
		close(*fd);
		*fd = -1;
	}
}

/* Make fd the child's descriptor target; async-signal-safe. */
static int child_dup(int fd, int target)
{
	if (fd == target)
		return fcntl(fd, F_SETFD, 0);
	return dup2(fd, target) < 0 ? -1 : 0;
}

static void child_close_others(int keep)
{
	/* close_range (Linux 5.9) in two spans around the error pipe. */
	if (keep > 3 && syscall(SYS_close_range, 3U, (unsigned)keep - 1, 0U) != 0)
		goto slow;
	if (syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0U) != 0)
		goto slow;
	return;
slow:;
	struct rlimit rl;
	long max = 4096;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < 65536)
		max = (long)rl.rlim_cur;
	for (long fd = 3; fd < max; fd++)
		if (fd != keep)
			close((int)fd);
}

/* Runs in the child between fork and exec: async-signal-safe calls only. */
static void child_exec(const struct ca_proc *p, const char *path, char *const *envp,
		int fd_in, int fd_out, int fd_err, int errpipe, pid_t parent)
{
	sigset_t none;
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		sigaction(s, &dfl, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (p->new_group)
		setpgid(0, 0);
	if (p->die_with_parent) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
	}
	if ((fd_in >= 0 && child_dup(fd_in, 0) != 0) || (fd_out >= 0 && child_dup(fd_out, 1) != 0))
		goto fail;
	if (fd_err == -2) {
		if (dup2(1, 2) < 0)
			goto fail;
	} else if (fd_err >= 0 && child_dup(fd_err, 2) != 0) {
		goto fail;
	}
	if (p->cwd && chdir(p->cwd) != 0)
		goto fail;
	if (!p->keep_fds)
		child_close_others(errpipe);
	execve(path, (char *const *)p->argv, envp);
fail:;
	int e = errno;
	ssize_t w = write(errpipe, &e, sizeof e);
	(void)w;
	_exit(127);
}

int ca_proc_start(struct ca_proc *p)
{
	int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
	int devnull = -1, errpipe[2] = {-1, -1}, saved;
	int child_fd[3] = {-1, -1, -1};
	enum ca_proc_io modes[3] = {p->in_mode, p->out_mode, p->err_mode};
	int given[3] = {p->in, p->out, p->err};
	char *path;

	if (!p->argv || !p->argv[0]) {
		errno = EINVAL;
		return -1;
	}
	path = find_program(p->argv[0], p->env);
	if (!path)
		return -1;
	p->timed_out = 0;
	p->signal = 0;
	p->status = 0;
	for (int i = 0; i < 3; i++) {
		switch (modes[i]) {
		case CA_PROC_INHERIT: break;
		case CA_PROC_PIPE:
			if (pipe2(pipes[i], O_CLOEXEC) != 0)
				goto fail;
			child_fd[i] = i == 0 ? pipes[i][0] : pipes[i][1];
			break;
		case CA_PROC_NULL:
			if (devnull < 0 && (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
				goto fail;
			child_fd[i] = devnull;
			break;
		case CA_PROC_FD:
			if (given[i] < 0) {
				errno = EBADF;
				goto fail;
			}
			child_fd[i] = given[i];
			break;
		case CA_PROC_TO_STDOUT:
			if (i != 2) {
				errno = EINVAL;
				goto fail;
			}
			child_fd[i] = -2;
			break;
		}
	}
	if (pipe2(errpipe, O_CLOEXEC) != 0)
		goto fail;

	char *const *envp = p->env ? (char *const *)p->env : environ;
	pid_t parent = getpid();
	p->start_time = ca_proc_now();
	pid_t pid = fork();
	if (pid < 0)
		goto fail;
	if (pid == 0)
		child_exec(p, path, envp, child_fd[0], child_fd[1], child_fd[2], errpipe[1], parent);

	p->pid = pid;
	if (p->new_group)
		setpgid(pid, pid);  /* also done by the child: whichever runs first wins the race */
	close(errpipe[1]);
	int child_errno = 0;
	ssize_t n;
	while ((n = read(errpipe[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR)
		;
	close(errpipe[0]);
	free(path);
	path = NULL;
	if (n == (ssize_t)sizeof child_errno) {
		/* exec failed: reap the child and report its errno. */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		p->pid = 0;
		errno = child_errno;
		goto fail_pipes;
	}
	for (int i = 0; i < 3; i++) {
		if (modes[i] != CA_PROC_PIPE)
			continue;
		close(i == 0 ? pipes[i][0] : pipes[i][1]);
	}
	p->in = modes[0] == CA_PROC_PIPE ? pipes[0][1] : modes[0] == CA_PROC_FD ? p->in : -1;
	p->out = modes[1] == CA_PROC_PIPE ? pipes[1][0] : modes[1] == CA_PROC_FD ? p->out : -1;
	p->err = modes[2] == CA_PROC_PIPE ? pipes[2][0] : modes[2] == CA_PROC_FD ? p->err : -1;
	if (devnull >= 0)
		close(devnull);
	p->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (p->pidfd >= 0)
		fcntl(p->pidfd, F_SETFD, FD_CLOEXEC);
	return 0;

fail:
	saved = errno;
	if (errpipe[1] >= 0)
		close(errpipe[1]);
	if (errpipe[0] >= 0)
		close(errpipe[0]);
	errno = saved;
fail_pipes:
	saved = errno;
	for (int i = 0; i < 3; i++) {
		close_fd(&pipes[i][0]);
		close_fd(&pipes[i][1]);
	}
	if (devnull >= 0)
		close(devnull);
	free(path);
	errno = saved;
	return -1;
}

/* Has the child exited (not yet reaped)? */
static int exited_now(const struct ca_proc *p)
{
	siginfo_t info;
	memset(&info, 0, sizeof info);
	return waitid(P_PID, (id_t)p->pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == p->pid;
}

int ca_proc_wait_exit(struct ca_proc *p, double timeout_s)
{
	if (p->pid <= 0)
		return 1;
	double deadline = ca_proc_now() + timeout_s;
	for (;;) {
		if (exited_now(p))
			return 1;
		double left = deadline - ca_proc_now();
		if (timeout_s >= 0 && left <= 0)
			return 0;
		if (p->pidfd >= 0) {
			struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
			int ms = timeout_s < 0 ? -1 : (int)(left * 1000) + 1;
			if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
				return 0;
		} else {
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
		}
	}
}

int ca_proc_wait_any(struct ca_proc *const *procs, size_t n, double timeout_s)
{
	struct pollfd *pfd = ca_xcalloc(n ? n : 1, sizeof *pfd);
	double deadline = ca_proc_now() + timeout_s;
	int found = -1, interrupted = 0;
	for (;;) {
		size_t npoll = 0, started = 0;
		int all_pidfd = 1;
		for (size_t i = 0; i < n && found < 0; i++) {
			if (procs[i]->pid <= 0)
				continue;
			started++;
			if (exited_now(procs[i]))
				found = (int)i;
			else if (procs[i]->pidfd >= 0)
				pfd[npoll++] = (struct pollfd){.fd = procs[i]->pidfd, .events = POLLIN};
			else
				all_pidfd = 0;
		}
		double left = deadline - ca_proc_now();
		if (found >= 0 || !started || (timeout_s >= 0 && left <= 0))
			break;
		/* Without a pidfd for every child, look again every 2 ms. */
		int ms = timeout_s < 0 ? -1 : (int)(left * 1000) + 1;
		if (!all_pidfd && (ms < 0 || ms > 2))
			ms = 2;
		if (poll(pfd, npoll, ms) < 0 && errno == EINTR) {
			interrupted = 1;
			break;
		}
	}
	free(pfd);
	if (interrupted)
		errno = EINTR;
	return found;
}

/*
 * /proc/pid/stat into buf; where its fields after the name start (the
 * name may hold spaces and parentheses), NULL when pid is gone.
 */
static const char *stat_fields(pid_t pid, char *buf, size_t size)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n <= 0)
		return NULL;
	buf[n] = 0;
	char *end = strrchr(buf, ')');
	return end ? end + 1 : NULL;
}

/* The parent of pid; -1 when gone. */
static pid_t parent_of(pid_t pid)
{
	char buf[512];
	const char *f = stat_fields(pid, buf, sizeof buf);
	int ppid = -1;
	char state;
	if (!f || sscanf(f, " %c %d", &state, &ppid) != 2)
		return -1;
	return (pid_t)ppid;
}

/* Every process under /proc with its parent, into *pids and *parents; how many. */
static int process_table(pid_t **pids, pid_t **parents)
{
	DIR *d = opendir("/proc");
	int n = 0, cap = 0;
	*pids = *parents = NULL;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char *end;
		long v = strtol(e->d_name, &end, 10);
		if (*end || v <= 0)
			continue;
		pid_t ppid = parent_of((pid_t)v);
		if (ppid < 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			*pids = ca_xrealloc(*pids, (size_t)cap * sizeof **pids);
			*parents = ca_xrealloc(*parents, (size_t)cap * sizeof **parents);
		}
		(*pids)[n] = (pid_t)v;
		(*parents)[n++] = ppid;
	}
	if (d)
		closedir(d);
	return n;
}

/* Whether the kernel lists each task's children (/proc/PID/task/TID/children: CONFIG_PROC_CHILDREN). */
static int children_listed(void)
{
	static int listed = -1;
	if (listed < 0) {
		char path[96];
		snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)syscall(SYS_gettid));
		listed = access(path, R_OK) == 0;
	}
	return listed;
}

/* At most this many in a tree (a bound on a racy walk; fork bombs stop at the sandbox's process limit). */
enum { TREE_MAX = 1 << 16 };

/* Append what the list of pids in text names to tree (n of cap), each once. */
static void append_pids(const char *text, pid_t **tree, int *n, int *cap)
{
	for (const char *p = text; *p && *n < TREE_MAX;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		p = end;
		int seen = v <= 0;
		for (int i = 0; i < *n && i < 1024 && !seen; i++)
			seen = (*tree)[i] == (pid_t)v;
		if (seen)
			continue;
		if (*n == *cap) {
			*cap *= 2;
			*tree = ca_xrealloc(*tree, (size_t)*cap * sizeof **tree);
		}
		(*tree)[(*n)++] = (pid_t)v;
	}
}

/* The children of pid, as its threads' lists name them, appended to tree (n of cap). */
static void children_of(pid_t pid, pid_t **tree, int *n, int *cap)
{
	char path[64], file[128], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	for (struct dirent *e; d && (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(file, sizeof file, "%s/%s/children", path, e->d_name);
		int fd = open(file, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		/* Whole pids only: a read that stops inside one keeps its head for the next. */
		size_t have = 0;
		ssize_t got;
		while ((got = read(fd, buf + have, sizeof buf - 1 - have)) > 0) {
			have += (size_t)got;
			buf[have] = 0;
			char *last = strrchr(buf, ' ');
			if (!last)
				continue;
			size_t keep = strlen(last + 1);
			*last = 0;
			append_pids(buf, tree, n, cap);
			memmove(buf, buf + have - keep, keep);
			have = keep;
		}
		buf[have] = 0;
		append_pids(buf, tree, n, cap);
		close(fd);
	}
	if (d)
		closedir(d);
}

/*
 * root and every process below it now, parents before children, into
 * *out (freed by the caller); how many. From the kernel's lists of each
 * task's children where it keeps them (a read per thread of the tree, not
 * one per process of the machine), else from every process's parent.
 */
static int tree_of(pid_t root, pid_t **out)
{
	if (children_listed()) {
		int n = 1, cap = 16;
		pid_t *tree = ca_xcalloc((size_t)cap, sizeof *tree);
		tree[0] = root;
		for (int at = 0; at < n; at++)
			children_of(tree[at], &tree, &n, &cap);
		*out = tree;
		return n;
	}
	pid_t *pids, *parents;
	int n = process_table(&pids, &parents);
	pid_t *tree = ca_xcalloc((size_t)n + 1, sizeof *tree);
	int ntree = 0;
	tree[ntree++] = root;
	/* Breadth first: each found process's children are appended after it. */
	for (int at = 0; at < ntree; at++)
		for (int i = 0; i < n; i++)
			if (parents[i] == tree[at] && pids[i] != root && ntree <= n)
				tree[ntree++] = pids[i];
	free(pids);
	free(parents);
	*out = tree;
	return ntree;
}

int ca_proc_signal_tree_found(pid_t root, int sig, pid_t **found)
{
	if (found)
		*found = NULL;
	if (root <= 0)
		return 0;
	int total = 0;
	for (int pass = 0; pass < 2; pass++) {
		total = 0;
		pid_t *tree;
		int ntree = tree_of(root, &tree);
		for (int i = 0; i < ntree; i++)
			if (kill(tree[i], sig) == 0)
				tree[total++] = tree[i];
		if (pass == 1 && found)
			*found = tree;
		else
			free(tree);
	}
	return total;
}

int ca_proc_signal_tree(pid_t root, int sig)
{
	return ca_proc_signal_tree_found(root, sig, NULL);
}

int ca_proc_tree_usage(pid_t root, struct ca_proc_usage *u)
{
	*u = (struct ca_proc_usage){0, 0, 0};
	if (root <= 0)
		return -1;
	pid_t *tree;
	int ntree = tree_of(root, &tree), seen = 0;
	double tick = (double)sysconf(_SC_CLK_TCK);
	for (int i = 0; i < ntree; i++) {
		char buf[1024];
		const char *f = stat_fields(tree[i], buf, sizeof buf);
		unsigned long long minflt, majflt, utime, stime;
		/* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime */
		if (!f || sscanf(f, " %*c %*d %*d %*d %*d %*d %*u %llu %*u %llu %*u %llu %llu",
				&minflt, &majflt, &utime, &stime) != 4)
			continue;
		u->minflt += (long long)minflt;
		u->majflt += (long long)majflt;
		u->cpu_s += (double)(utime + stime) / (tick > 0 ? tick : 100);
		seen++;
	}
	free(tree);
	return seen ? 0 : -1;
}

void ca_proc_kill(struct ca_proc *p, int sig)
{
	if (p->pid <= 0)
		return;
	if (p->new_group)
		kill(-p->pid, sig);
	kill(p->pid, sig);
}

/* Close our ends of the pipes we made for the child. */
static void close_pipes(struct ca_proc *p)
{
	if (p->in_mode == CA_PROC_PIPE)
		close_fd(&p->in);
	if (p->out_mode == CA_PROC_PIPE)
		close_fd(&p->out);
	if (p->err_mode == CA_PROC_PIPE)
		close_fd(&p->err);
}

int ca_proc_finish(struct ca_proc *p)
{
	close_pipes(p);
	if (p->pid <= 0)
		return p->status;
	if (!p->timed_out && p->timeout_s > 0) {
		double left = p->start_time + p->timeout_s - ca_proc_now();
		if (!ca_proc_wait_exit(p, left > 0 ? left : 0))
			p->timed_out = 1;
	}
	if (p->timed_out)
		ca_proc_kill(p, SIGKILL);
	int st = 0;
	struct rusage ru;
	memset(&ru, 0, sizeof ru);
	while (wait4(p->pid, &st, 0, &ru) < 0) {
		if (errno != EINTR) {
			st = 0x7f00;  /* lost: treat as exit 127 */
			break;
		}
	}
	p->wall_s = ca_proc_now() - p->start_time;
	p->max_rss_kb = ru.ru_maxrss;
	/* Group members left behind by a timed-out leader die with it. */
	if (p->timed_out && p->new_group)
		kill(-p->pid, SIGKILL);
	p->pid = 0;
	close_fd(&p->pidfd);
	if (WIFSIGNALED(st)) {
		p->signal = WTERMSIG(st);
		p->status = p->timed_out && p->signal == SIGKILL ? CA_PROC_TIMEOUT_STATUS : 128 + p->signal;
	} else {
		p->timed_out = 0;
		p->status = WEXITSTATUS(st);
	}
	return p->status;
}

int ca_proc_run(struct ca_proc *p)
{
	if (ca_proc_start(p) != 0)
		return -1;
	return ca_proc_finish(p);
}

/*
 * write() to a pipe whose reader may be gone, without dying of SIGPIPE and
 * without touching the process-wide disposition: block it in this thread,
 * and swallow the one our write raised.
 */
static ssize_t write_nosigpipe(int fd, const void *data, size_t n)
{
	sigset_t pipe_set, old, pending;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigpending(&pending);
	int was_pending = sigismember(&pending, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	ssize_t w = write(fd, data, n);
	int saved = errno;
	if (w < 0 && errno == EPIPE && !was_pending) {
		struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	return w;
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Read what is available on *fd into b; closes *fd at end of file. */
static void drain(int *fd, struct ca_buf *b, size_t cap)
{
	char chunk[65536];
	for (;;) {
		ssize_t n = read(*fd, chunk, sizeof chunk);
		if (n > 0) {
			buf_append(b, chunk, (size_t)n, cap);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		close_fd(fd);
		return;
	}
}

int ca_proc_capture(struct ca_proc *p, const char *input, size_t input_len,
		struct ca_buf *out, struct ca_buf *err, size_t cap)
{
	p->in_mode = input ? CA_PROC_PIPE : CA_PROC_NULL;
	if (out)
		p->out_mode = CA_PROC_PIPE;
	if (err)
		p->err_mode = CA_PROC_PIPE;
	if (out)
		buf_append(out, "", 0, cap);
	if (err)
		buf_append(err, "", 0, cap);
	if (ca_proc_start(p) != 0)
		return -1;
	size_t written = 0;
	if (p->in >= 0) {
		set_nonblock(p->in);
		if (input_len == 0)
			close_fd(&p->in);
	}
	if (out)
		set_nonblock(p->out);
	if (err)
		set_nonblock(p->err);
	int exited = 0;
	for (;;) {
		struct pollfd pfd[4];
		int n = 0, i_in = -1, i_out = -1, i_err = -1, i_pid = -1;
		if (p->in >= 0) {
			i_in = n;
			pfd[n++] = (struct pollfd){.fd = p->in, .events = POLLOUT};
		}
		if (out && p->out >= 0) {
			i_out = n;
			pfd[n++] = (struct pollfd){.fd = p->out, .events = POLLIN};
		}
		if (err && p->err >= 0) {
			i_err = n;
			pfd[n++] = (struct pollfd){.fd = p->err, .events = POLLIN};
		}
		if (i_out < 0 && i_err < 0 && i_in < 0)
			break;
		if (exited) {
			/* The child is gone: take what it left in the pipes, ignore descendants. */
			if (i_out >= 0)
				drain(&p->out, out, cap);
			if (i_err >= 0)
				drain(&p->err, err, cap);
			break;
		}
		if (p->pidfd >= 0) {
			i_pid = n;
			pfd[n++] = (struct pollfd){.fd = p->pidfd, .events = POLLIN};
		}
		int ms = -1;
		if (p->timeout_s > 0) {
			double left = p->start_time + p->timeout_s - ca_proc_now();
			if (left <= 0) {
				p->timed_out = 1;
				break;
			}
			ms = (int)(left * 1000) + 1;
		}
		if (p->pidfd < 0 && (ms < 0 || ms > 50))
			ms = 50;  /* no pidfd: look at the child now and then */
		int r = poll(pfd, (nfds_t)n, ms);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (i_in >= 0 && pfd[i_in].revents) {
			ssize_t w = write_nosigpipe(p->in, input + written, input_len - written);
			if (w > 0)
				written += (size_t)w;
			if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input_len)
				close_fd(&p->in);
		}
		if (i_out >= 0 && pfd[i_out].revents)
			drain(&p->out, out, cap);
		if (i_err >= 0 && pfd[i_err].revents)
			drain(&p->err, err, cap);
		if ((i_pid >= 0 && pfd[i_pid].revents) || (p->pidfd < 0 && ca_proc_wait_exit(p, 0)))
			exited = 1;
	}
	buf_settle(out);
	buf_settle(err);
	return ca_proc_finish(p);
}

char *ca_proc_output(const char *const *argv, double timeout_s, size_t cap, int *status)
{
	struct ca_proc p;
	struct ca_buf out = {0};
	ca_proc_init(&p, argv);
	p.timeout_s = timeout_s;
	p.err_mode = CA_PROC_NULL;
	int st = ca_proc_capture(&p, NULL, 0, &out, NULL, cap);
	if (status)
		*status = st;
	if (st < 0) {
		ca_buf_free(&out);
		return NULL;
	}
	return out.data;
}

void ca_coproc_init(struct ca_coproc *c, const char *const *argv)
{
	memset(c, 0, sizeof *c);
	ca_proc_init(&c->proc, argv);
	c->max_line = (size_t)256 << 20;
}

int ca_coproc_start_prepared(struct ca_coproc *c)
{
	c->proc.in_mode = CA_PROC_PIPE;
	c->proc.out_mode = CA_PROC_PIPE;
	c->len = 0;
	c->eof = 0;
	return ca_proc_start(&c->proc);
}

int ca_coproc_start(struct ca_coproc *c, const char *const *argv, const char *const *env, const char *cwd)
{
	ca_coproc_init(c, argv);
	c->proc.env = env;
	c->proc.cwd = cwd;
	return ca_coproc_start_prepared(c);
}

int ca_coproc_write(struct ca_coproc *c, const char *line, size_t len)
{
	if (c->proc.in < 0) {
		errno = EPIPE;
		return -1;
	}
	int newline = len == 0 || line[len - 1] != '\n';
	while (len > 0 || newline) {
		const char *data = len > 0 ? line : "\n";
		size_t n = len > 0 ? len : 1;
		ssize_t w = write_nosigpipe(c->proc.in, data, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (len > 0) {
			line += w;
			len -= (size_t)w;
		} else {
			newline = 0;
		}
	}
	return 0;
}

char *ca_coproc_read_line(struct ca_coproc *c, double timeout_s, size_t *len)
{
	double deadline = ca_proc_now() + timeout_s;
	size_t scanned = 0;
	for (;;) {
		char *nl = c->len > scanned ? memchr(c->buf + scanned, '\n', c->len - scanned) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - c->buf);
			char *line = ca_xmalloc(n + 1);
			memcpy(line, c->buf, n);
			line[n] = '\0';
			memmove(c->buf, nl + 1, c->len - n - 1);
			c->len -= n + 1;
			if (len)
				*len = n;
			return line;
		}
		scanned = c->len;
		if (c->len > c->max_line) {
			errno = EMSGSIZE;
			return NULL;
		}
		if (c->eof || c->proc.out < 0) {
			errno = EPIPE;
			return NULL;
		}
		int ms = -1;
		if (timeout_s >= 0) {
			/* Past the deadline (or at a timeout of 0) it still looks at what is there. */
			double left = deadline - ca_proc_now();
			ms = left > 0 ? (int)(left * 1000) + 1 : 0;
		}
		struct pollfd pfd = {.fd = c->proc.out, .events = POLLIN};
		int r = poll(&pfd, 1, ms);
		if (r < 0 && errno != EINTR)
			return NULL;
		if (r == 0 && ms == 0) {
			errno = ETIMEDOUT;
			return NULL;
		}
		if (r <= 0)
			continue;
		if (c->cap - c->len < 65536) {
			c->cap = c->cap ? c->cap * 2 : 131072;
			c->buf = ca_xrealloc(c->buf, c->cap);
		}
		ssize_t n = read(c->proc.out, c->buf + c->len, c->cap - c->len);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return NULL;
		}
		if (n == 0)
			c->eof = 1;
		c->len += (size_t)n;
	}
}

int ca_coproc_wait_any(struct ca_coproc *const *cs, int n, double timeout_s)
{
	struct pollfd pfd[8];
	double deadline = ca_proc_now() + timeout_s;
	if (n > 8)
		n = 8;
	for (int i = 0; i < n; i++) {
		if ((cs[i]->len > 0 && memchr(cs[i]->buf, '\n', cs[i]->len)) || cs[i]->eof || cs[i]->proc.out < 0)
			return i;
		pfd[i] = (struct pollfd){.fd = cs[i]->proc.out, .events = POLLIN};
	}
	for (;;) {
		int ms = -1;
		double left = deadline - ca_proc_now();
		if (timeout_s >= 0)
			ms = left > 0 ? (int)(left * 1000) + 1 : 0;  /* past it: one look at what is there */
		int r = poll(pfd, (nfds_t)n, ms);
		if (r < 0 && errno != EINTR)
			return -1;
		for (int i = 0; r > 0 && i < n; i++)
			if (pfd[i].revents)
				return i;
		if (timeout_s >= 0 && ms == 0)
			return -1;
	}
}

int ca_coproc_alive(struct ca_coproc *c)
{
	return c->proc.pid > 0 && !ca_proc_wait_exit(&c->proc, 0);
}

/* Free the line buffer. */
static void coproc_drop_buf(struct ca_coproc *c)
{
	free(c->buf);
	c->buf = NULL;
	c->len = c->cap = 0;
}

void ca_coproc_abandon(struct ca_coproc *c)
{
	ca_proc_kill(&c->proc, SIGKILL);
	close_pipes(&c->proc);
	c->proc.pid = -1;
	coproc_drop_buf(c);
}

int ca_coproc_close(struct ca_coproc *c, double grace_s)
{
	close_fd(&c->proc.in);
	if (c->proc.pid > 0 && !ca_proc_wait_exit(&c->proc, grace_s))
		c->proc.timed_out = 1;
	c->proc.timeout_s = 0;
	int status = ca_proc_finish(&c->proc);
	coproc_drop_buf(c);
	return status;
}
