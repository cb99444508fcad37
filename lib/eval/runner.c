/*
 * runner: a warm worker process and its line protocol (see runner.h):
 * start, hello, request and reply lines with deadlines, kill of the
 * process group, close; and its command line inside ca-sandbox.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "paths.h"
#include "runner.h"
#include "sandbox.h"

void ca_runner_init(struct ca_runner *r)
{
	memset(r, 0, sizeof *r);
	r->hello = jv_invalid();
	r->gone_grace_s = 2;
}

int ca_runner_start(struct ca_runner *r, const char *const *argv, const char *const *env, const char *cwd, int log_fd)
{
	ca_coproc_init(&r->co, argv);
	r->co.proc.env = env;
	r->co.proc.cwd = cwd;
	if (log_fd >= 0) {
		r->co.proc.err_mode = CA_PROC_FD;
		r->co.proc.err = log_fd;
	}
	r->co.proc.die_with_parent = 1;
	r->status = 0;
	if (ca_coproc_start_prepared(&r->co) != 0)
		return -1;
	r->running = 1;
	return 0;
}

/* It closed its output or died: reap it, with a little grace for its exit status. */
static enum ca_runner_result gone(struct ca_runner *r)
{
	r->status = ca_coproc_close(&r->co, r->gone_grace_s);
	r->running = 0;
	return CA_RUNNER_GONE;
}

/* A line read, or why there is none: errno of ca_coproc_read_line told as a result. */
static enum ca_runner_result read_one(struct ca_runner *r, double timeout_s, jv *line)
{
	*line = jv_invalid();
	if (!r->running)
		return CA_RUNNER_GONE;
	size_t len;
	char *text = ca_coproc_read_line(&r->co, timeout_s, &len);
	if (!text) {
		if (errno == ETIMEDOUT)
			return CA_RUNNER_TIMEOUT;
		if (errno == EMSGSIZE)
			return CA_RUNNER_TOO_LONG;
		return gone(r);
	}
	jv v = jv_parse_sized(text, (int)len);
	free(text);
	if (!jv_is_valid(v)) {
		jv_free(v);
		return CA_RUNNER_MALFORMED;
	}
	*line = v;
	return CA_RUNNER_OK;
}

enum ca_runner_result ca_runner_hello(struct ca_runner *r, double timeout_s)
{
	if (jv_is_valid(r->hello))
		return CA_RUNNER_OK;
	jv line;
	enum ca_runner_result res = read_one(r, timeout_s, &line);
	if (res == CA_RUNNER_OK)
		r->hello = line;
	return res;
}

enum ca_runner_result ca_runner_send(struct ca_runner *r, jv msg)
{
	if (!r->running) {
		jv_free(msg);
		return CA_RUNNER_GONE;
	}
	jv text = jv_dump_string(msg, 0);
	int rc = ca_coproc_write(&r->co, jv_string_value(text), (size_t)jv_string_length_bytes(jv_copy(text)));
	jv_free(text);
	return rc == 0 ? CA_RUNNER_OK : gone(r);
}

enum ca_runner_result ca_runner_read(struct ca_runner *r, double deadline, jv *line)
{
	double left = deadline - ca_proc_now();
	return read_one(r, left > 0 ? left : 0, line);
}

int ca_runner_kill(struct ca_runner *r)
{
	if (r->running) {
		ca_proc_kill(&r->co.proc, SIGKILL);
		r->status = ca_coproc_close(&r->co, 0);
		r->running = 0;
	}
	return r->status;
}

int ca_runner_close(struct ca_runner *r, double grace_s)
{
	if (r->running) {
		r->status = ca_coproc_close(&r->co, grace_s);
		r->running = 0;
	}
	return r->status;
}

void ca_runner_abandon(struct ca_runner *r)
{
	if (r->running) {
		ca_coproc_abandon(&r->co);
		r->running = 0;
	}
}

void ca_runner_forget(struct ca_runner *r)
{
	jv_free(r->hello);
	r->hello = jv_invalid();
}

char **ca_runner_sandboxed(const struct ca_sandbox *sb, const char *const *argv, char *const *env,
		const char *const *pass)
{
	struct ca_sandbox with = *sb;
	size_t n = 0;
	for (char *const *e = env; e && *e; e++)
		n++;
	const char **passed = ca_xcalloc(sb->nenv + n + 1, sizeof *passed);
	for (size_t i = 0; i < sb->nenv; i++)
		passed[i] = sb->env[i];
	for (char *const *e = env; e && *e; e++)
		for (int i = 0; pass[i]; i++)
			if (!strncmp(*e, pass[i], strlen(pass[i]))) {
				passed[with.nenv++] = *e;
				break;
			}
	with.env = passed;
	/* The interpreter's environment, shown where the private /tmp would hide it (a checkout's .venv below /tmp). */
	const char **shown = ca_xcalloc(sb->nshow + 1, sizeof *shown);
	char root[PATH_MAX];
	for (size_t i = 0; i < sb->nshow; i++)
		shown[i] = sb->show[i];
	if (argv[0][0] == '/' && snprintf(root, sizeof root, "%s", argv[0]) < (int)sizeof root) {
		for (int up = 0; up < 2 && strrchr(root, '/') != root; up++)
			*strrchr(root, '/') = '\0';
		shown[with.nshow++] = root;
	}
	with.show = shown;
	char **cmd = ca_sandbox_command(&with, NULL, argv);
	free(passed);
	free(shown);
	return cmd;
}

char *ca_runner_cupti_env(void)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/libca-cupti.so", ca_paths_bindir());
	if (access(path, R_OK) != 0)
		return NULL;
	size_t len = strlen(path) + sizeof "CA_CUPTI_LIB=";
	char *entry = ca_xmalloc(len);
	snprintf(entry, len, "CA_CUPTI_LIB=%s", path);
	return entry;
}
