/* Unit tests for lib/proc: statuses, timeouts, capture caps, coprocesses. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proc.h"

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "test-proc: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

static int run(const char *const *argv, double timeout_s, struct ca_proc *p)
{
	ca_proc_init(p, argv);
	p->timeout_s = timeout_s;
	return ca_proc_run(p);
}

static void test_statuses(void)
{
	struct ca_proc p;
	const char *t[] = {"true", NULL}, *f[] = {"false", NULL};
	const char *killed[] = {"sh", "-c", "kill -9 $$", NULL};
	const char *code[] = {"sh", "-c", "exit 42", NULL};
	const char *missing[] = {"ca-no-such-program-here", NULL};
	const char *notexec[] = {"/etc/passwd", NULL};
	CHECK(run(t, 0, &p) == 0);
	CHECK(run(f, 0, &p) == 1);
	CHECK(run(code, 0, &p) == 42);
	CHECK(run(killed, 0, &p) == 137 && p.signal == 9 && !p.timed_out);
	errno = 0;
	CHECK(run(missing, 0, &p) == -1 && errno == ENOENT);
	errno = 0;
	CHECK(run(notexec, 0, &p) == -1 && errno == EACCES);
}

/* Alive and not a zombie (an orphan may wait a moment for its reaper). */
static int process_lives(pid_t pid)
{
	char path[64], state = 0;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *fp = fopen(path, "r");
	if (!fp)
		return 0;
	int ok = fscanf(fp, "%*d (%*[^)]) %c", &state) == 1;
	fclose(fp);
	return ok && state != 'Z' && state != 'X';
}

static void test_timeout(void)
{
	struct ca_proc p;
	/* The shell ignores TERM and leaves a child in its group: both must die. */
	const char *stubborn[] = {"sh", "-c", "trap '' TERM; sleep 30 & echo $! > pid.txt; sleep 30", NULL};
	char dir[] = "/tmp/ca-test-proc.XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	ca_proc_init(&p, stubborn);
	p.cwd = dir;
	p.timeout_s = 0.5;
	double t0 = ca_proc_now();
	int status = ca_proc_run(&p);
	double took = ca_proc_now() - t0;
	CHECK(status == 124 && p.timed_out);
	CHECK(took < 2.0 && p.wall_s >= 0.45);
	char path[128];
	snprintf(path, sizeof path, "%s/pid.txt", dir);
	FILE *fp = fopen(path, "r");
	long bg = 0;
	CHECK(fp && fscanf(fp, "%ld", &bg) == 1);
	if (fp)
		fclose(fp);
	usleep(100000);
	CHECK(bg > 0 && !process_lives((pid_t)bg));
	unlink(path);
	rmdir(dir);
}

static void test_capture(void)
{
	struct ca_proc p;
	struct ca_buf out = {0}, err = {0};
	const char *echo[] = {"sh", "-c", "echo hello; echo oops >&2; exit 3", NULL};
	ca_proc_init(&p, echo);
	CHECK(ca_proc_capture(&p, NULL, 0, &out, &err, 1024) == 3);
	CHECK(out.data && strcmp(out.data, "hello\n") == 0);
	CHECK(err.data && strcmp(err.data, "oops\n") == 0);
	ca_buf_free(&out);
	ca_buf_free(&err);

	/* 50 MB of output kept to 1000 bytes; the rest counted, not stored. */
	const char *flood[] = {"head", "-c", "50000000", "/dev/zero", NULL};
	ca_proc_init(&p, flood);
	CHECK(ca_proc_capture(&p, NULL, 0, &out, NULL, 1000) == 0);
	CHECK(out.len == 1000 && out.dropped == 50000000 - 1000);
	ca_buf_free(&out);

	/* With keep_tail, half the cap is the head and half the real end of the output. */
	const char *lines[][4] = {
		{"seq", "1", "200000", NULL},                                /* chunks larger than the tail */
		{"sh", "-c", "i=0; while [ $i -lt 400 ]; do i=$((i+1)); echo $i; done", NULL},  /* small writes */
	};
	for (size_t k = 0; k < 2; k++) {
		const char *seq[] = {"seq", "1", k == 0 ? "200000" : "400", NULL};
		char *whole = ca_proc_output(seq, 10, 1 << 24, NULL);
		size_t total = whole ? strlen(whole) : 0, cap = k == 0 ? 1000 : 101;
		struct ca_buf tail = {.keep_tail = 1};
		ca_proc_init(&p, lines[k]);
		CHECK(ca_proc_capture(&p, NULL, 0, &tail, NULL, cap) == 0);
		size_t head = cap - cap / 2;
		CHECK(whole && tail.len == cap && tail.dropped == total - cap && tail.dropped_at == head);
		CHECK(whole && memcmp(tail.data, whole, head) == 0);
		CHECK(whole && memcmp(tail.data + head, whole + total - cap / 2, cap / 2) == 0);
		ca_buf_free(&tail);
		free(whole);
	}

	/* Input larger than a pipe buffer, echoed back. */
	size_t n = 1 << 20;
	char *input = malloc(n);
	for (size_t i = 0; i < n; i++)
		input[i] = (char)('a' + i % 26);
	const char *cat[] = {"cat", NULL};
	ca_proc_init(&p, cat);
	CHECK(ca_proc_capture(&p, input, n, &out, NULL, 2 * n) == 0);
	CHECK(out.len == n && memcmp(out.data, input, n) == 0);
	ca_buf_free(&out);
	free(input);

	/* A reader that quits early must not kill us with SIGPIPE. */
	const char *quit[] = {"true", NULL};
	char big[300000];
	memset(big, 'x', sizeof big);
	ca_proc_init(&p, quit);
	CHECK(ca_proc_capture(&p, big, sizeof big, &out, NULL, 100) == 0);
	ca_buf_free(&out);

	/* A background descendant holding the pipe open does not hang us. */
	const char *bg[] = {"sh", "-c", "echo done; sleep 5 &", NULL};
	ca_proc_init(&p, bg);
	p.new_group = 0;
	double t0 = ca_proc_now();
	CHECK(ca_proc_capture(&p, NULL, 0, &out, NULL, 100) == 0);
	CHECK(ca_proc_now() - t0 < 2 && out.data && strcmp(out.data, "done\n") == 0);
	ca_buf_free(&out);

	/* Timeout while capturing. */
	const char *slow[] = {"sh", "-c", "echo start; sleep 20", NULL};
	ca_proc_init(&p, slow);
	p.timeout_s = 0.3;
	CHECK(ca_proc_capture(&p, NULL, 0, &out, NULL, 100) == 124);
	CHECK(out.data && strcmp(out.data, "start\n") == 0);
	ca_buf_free(&out);
}

static void test_env_cwd(void)
{
	const char *env[] = {"FOO=bar", "PATH=/usr/bin:/bin", NULL};
	const char *argv[] = {"env", NULL};
	struct ca_proc p;
	struct ca_buf out = {0};
	ca_proc_init(&p, argv);
	p.env = env;
	CHECK(ca_proc_capture(&p, NULL, 0, &out, NULL, 1000) == 0);
	CHECK(out.data && strcmp(out.data, "FOO=bar\nPATH=/usr/bin:/bin\n") == 0);
	ca_buf_free(&out);

	const char *pwd[] = {"pwd", NULL};
	ca_proc_init(&p, pwd);
	p.cwd = "/";
	CHECK(ca_proc_capture(&p, NULL, 0, &out, NULL, 1000) == 0);
	CHECK(out.data && strcmp(out.data, "/\n") == 0);
	ca_buf_free(&out);

	int status = -1;
	const char *echo[] = {"echo", "x", NULL};
	char *s = ca_proc_output(echo, 5, 100, &status);
	CHECK(s && strcmp(s, "x\n") == 0 && status == 0);
	free(s);

	/* Our other descriptors do not leak into children. */
	int fds[2];
	CHECK(pipe(fds) == 0);
	char cmd[64];
	snprintf(cmd, sizeof cmd, "test -e /proc/self/fd/%d", fds[1]);
	const char *leak[] = {"sh", "-c", cmd, NULL};
	ca_proc_init(&p, leak);
	CHECK(ca_proc_run(&p) == 1);
	close(fds[0]);
	close(fds[1]);
}

static void test_coproc(void)
{
	struct ca_coproc c;
	const char *cat[] = {"cat", NULL};
	CHECK(ca_coproc_start(&c, cat, NULL, NULL) == 0);
	CHECK(ca_coproc_write(&c, "one", 3) == 0);
	CHECK(ca_coproc_write(&c, "two\n", 4) == 0);
	size_t len = 0;
	char *l = ca_coproc_read_line(&c, 5, &len);
	CHECK(l && strcmp(l, "one") == 0 && len == 3);
	free(l);
	l = ca_coproc_read_line(&c, 5, NULL);
	CHECK(l && strcmp(l, "two") == 0);
	free(l);
	errno = 0;
	double t0 = ca_proc_now();
	CHECK(ca_coproc_read_line(&c, 0.2, NULL) == NULL && errno == ETIMEDOUT);
	CHECK(ca_proc_now() - t0 < 1);
	CHECK(ca_coproc_alive(&c));
	CHECK(ca_coproc_close(&c, 5) == 0);

	/* A worker that dies: reads fail with EPIPE, writes do not kill us. */
	const char *die[] = {"sh", "-c", "read x; echo got $x; exit 7", NULL};
	CHECK(ca_coproc_start(&c, die, NULL, NULL) == 0);
	CHECK(ca_coproc_write(&c, "a", 1) == 0);
	l = ca_coproc_read_line(&c, 5, NULL);
	CHECK(l && strcmp(l, "got a") == 0);
	free(l);
	errno = 0;
	CHECK(ca_coproc_read_line(&c, 5, NULL) == NULL && errno == EPIPE);
	usleep(50000);
	CHECK(!ca_coproc_alive(&c));
	int w = ca_coproc_write(&c, "b", 1);
	CHECK(w == -1 && errno == EPIPE);
	CHECK(ca_coproc_close(&c, 5) == 7);

	/* A worker that ignores EOF is killed after the grace period. */
	const char *stuck[] = {"sh", "-c", "trap '' TERM; sleep 30", NULL};
	CHECK(ca_coproc_start(&c, stuck, NULL, NULL) == 0);
	t0 = ca_proc_now();
	CHECK(ca_coproc_close(&c, 0.2) == 124);
	CHECK(ca_proc_now() - t0 < 2);
}

/* A process's state letter from /proc (R, S, T, ...), or 0 when gone. */
static char state_of(pid_t pid)
{
	char path[64], buf[512], state = 0;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f && fgets(buf, sizeof buf, f)) {
		char *end = strrchr(buf, ')');
		if (end)
			sscanf(end + 1, " %c", &state);
	}
	if (f)
		fclose(f);
	return state;
}

/* A child, and a grandchild that left for a session of its own: both stopped, both continued. */
static void test_signal_tree(void)
{
	int fds[2];
	CHECK(pipe(fds) == 0);
	pid_t child = fork();
	if (child == 0) {
		pid_t g = fork();
		if (g == 0) {
			setsid();
			for (;;)
				pause();
		}
		if (write(fds[1], &g, sizeof g) != (ssize_t)sizeof g)
			_exit(1);
		for (;;)
			pause();
	}
	pid_t grandchild = 0;
	CHECK(read(fds[0], &grandchild, sizeof grandchild) == (ssize_t)sizeof grandchild);
	close(fds[0]);
	close(fds[1]);
	usleep(20000);
	CHECK(ca_proc_signal_tree(child, SIGSTOP) == 2);
	usleep(20000);
	CHECK(state_of(child) == 'T' && state_of(grandchild) == 'T');
	CHECK(ca_proc_signal_tree(child, SIGCONT) == 2);
	usleep(20000);
	CHECK(state_of(child) == 'S' && state_of(grandchild) == 'S');
	/* The processes stopped, parents first: what a held worker continues without a scan. */
	pid_t *found = NULL;
	CHECK(ca_proc_signal_tree_found(child, SIGSTOP, &found) == 2);
	CHECK(found && found[0] == child && found[1] == grandchild);
	free(found);
	CHECK(ca_proc_signal_tree_found(child, SIGCONT, NULL) == 2);
	CHECK(ca_proc_signal_tree(0, SIGSTOP) == 0);
	kill(grandchild, SIGKILL);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/*
 * A child whose child touches 32 MiB and spins for 0.3 s of its CPU:
 * the tree's page faults and CPU seconds grow by at least that much.
 */
static void test_tree_usage(void)
{
	int go[2], done[2];
	CHECK(pipe(go) == 0 && pipe(done) == 0);
	pid_t child = fork();
	if (child == 0) {
		pid_t g = fork();
		if (g == 0) {
			char c;
			if (read(go[0], &c, 1) != 1)
				_exit(1);
			size_t n = 32u << 20;
			volatile char *p = malloc(n);
			for (size_t i = 0; p && i < n; i += 4096)
				p[i] = 1;
			double t0 = cpu_now();
			while (cpu_now() - t0 < 0.3)
				;
			if (write(done[1], "x", 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		for (;;)
			pause();
	}
	usleep(50000);
	struct ca_proc_usage before, after;
	CHECK(ca_proc_tree_usage(child, &before) == 0);
	char c;
	CHECK(write(go[1], "x", 1) == 1 && read(done[0], &c, 1) == 1);
	CHECK(ca_proc_tree_usage(child, &after) == 0);
	CHECK(after.minflt - before.minflt >= 4000);  /* 8192 pages, fewer with huge pages */
	CHECK(after.cpu_s - before.cpu_s >= 0.25);    /* in clock ticks */
	struct ca_proc_usage none;
	CHECK(ca_proc_tree_usage(0, &none) == -1 && none.minflt == 0);
	for (int i = 0; i < 2; i++) {
		close(go[i]);
		close(done[i]);
	}
	ca_proc_signal_tree(child, SIGKILL);
	waitpid(child, NULL, 0);
}

int main(void)
{
	test_statuses();
	test_timeout();
	test_capture();
	test_env_cwd();
	test_coproc();
	test_signal_tree();
	test_tree_usage();
	if (failures) {
		fprintf(stderr, "test-proc: %d checks failed\n", failures);
		return 1;
	}
	puts("test-proc: all checks passed");
	return 0;
}
