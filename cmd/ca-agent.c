/*
 * ca-agent: run a policy through a sandboxed CUDA workspace, one task at a
 * time (or -j at once), and write one trajectory record per task.
 *
 * For each task record: copy the skill's workspace template, add the
 * task's model.py and the skill (both read-only to the agent), then loop:
 * send the conversation to the policy command on its stdin, read the next
 * assistant message from its stdout, run the tool calls it makes, append
 * the observations. ca-build, ca-verify and ca-profile typed alone as a
 * bash command run outside the sandbox on a snapshot of the candidate
 * files (the task's own model.py, never the workspace's), and every such
 * snapshot goes into the record so it can be scored later (ca-best).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "err.h"
#include "file.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "paths.h"
#include "pool.h"
#include "proc.h"
#include "tools.h"

static const char usage_text[] =
	"usage: ca-agent [-hu] [-j N] [--build-cmd CMD] [--command-time S] [--eval-time S] [--keep]\n"
	"                [--max-context TOKENS] [--max-invalid N] [--max-output BYTES] [--max-time S]\n"
	"                [--max-turns N] [--policy-time S] [--profile-cmd CMD] [--progress]\n"
	"                [--sandbox PROGRAM] [--skill DIR] [--unconfined] [--verify-cmd CMD]\n"
	"                [--workdir DIR] --policy CMD [file ...]\n";

enum {
	MAX_SNAPSHOT_FILE = 1 << 20,     /* a larger file is left out of a snapshot */
	MAX_SNAPSHOT_TOTAL = 4 << 20,
	MAX_RAW_SHOWN = 4000,            /* of an invalid policy output kept in the record */
	MAX_POLICY_OUTPUT = 64 << 20,    /* one assistant message; more is an invalid output */
	MAX_TRUSTED_OUTPUT = 4 << 20,    /* kept of a trusted command's output: head and tail */
};

struct config {
	const char *policy;
	const char *build_cmd, *verify_cmd, *profile_cmd;
	const char *sandbox;             /* program; NULL with --unconfined */
	const char *skill;
	const char *workdir;
	const char *root;                /* where the task directories are */
	double command_time, eval_time, max_time, policy_time;
	long long max_turns, max_context, max_invalid, max_output, jobs;
	int keep, unconfined;
};

/* ---- small helpers ---- */

static jv obj_get(jv obj, const char *key)
{
	jv v = ca_json_get(obj, key);
	if (!jv_is_valid(v)) {
		jv_free(v);
		return jv_null();
	}
	return v;
}

/* Resolve a helper program: next to this binary first, then PATH. */
static const char *helper(const char *name)
{
	static char buf[4][PATH_MAX];
	static int next;
	char *b = buf[next++ % 4];
	snprintf(b, PATH_MAX, "%s/%s", ca_paths_bindir(), name);
	if (access(b, X_OK) == 0)
		return b;
	return name;
}

static int program_exists(const char *name)
{
	if (strchr(name, '/'))
		return access(name, X_OK) == 0;
	char *path = ca_paths_find_program(name, getenv("PATH"));
	int found = path != NULL;
	free(path);
	return found;
}

/* ---- snapshots ---- */

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int snapshot_skip(const char *rel, const char *name)
{
	if (name[0] == '.')
		return 1;
	if (strcmp(rel, "model.py") == 0 || strcmp(rel, "SKILL.md") == 0)
		return 1;
	if (strcmp(name, "__pycache__") == 0 || strcmp(rel, "build") == 0)
		return 1;
	const char *dot = strrchr(name, '.');
	if (dot && (!strcmp(dot, ".so") || !strcmp(dot, ".o") || !strcmp(dot, ".a") || !strcmp(dot, ".pyc")))
		return 1;
	return 0;
}

/* Read a regular file at dirfd/name without following a link; NULL when it is not one. */
static char *read_at(int dirfd, const char *name, size_t max, size_t *len, int *too_big)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return NULL;
	}
	if ((size_t)st.st_size > max) {
		*too_big = 1;
		close(fd);
		return NULL;
	}
	char *d = ca_xmalloc((size_t)st.st_size + 1);
	size_t n = 0;
	ssize_t r;
	while (n < (size_t)st.st_size && (r = read(fd, d + n, (size_t)st.st_size - n)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		n += (size_t)r;
	}
	close(fd);
	d[n] = '\0';
	*len = n;
	return d;
}

/*
 * Add the candidate files below dirfd (the workspace directory rel) to
 * files. The agent's background commands may still be running, so every
 * step is relative to an open directory and follows no symbolic link.
 */
static jv collect_files(int dirfd, const char *rel, int depth, jv files, size_t *total, int *truncated)
{
	int dup_fd = dup(dirfd);
	DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		return files;
	}
	rewinddir(d);   /* the duplicate shares its position with dirfd */
	/* Sorted names, so snapshots are stable. */
	char **names = NULL;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d)) && n < 10000) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		names = ca_xrealloc(names, (n + 1) * sizeof *names);
		names[n++] = ca_xstrdup(e->d_name);
	}
	closedir(d);
	if (n > 1)
		qsort(names, n, sizeof *names, compare_names);
	for (size_t i = 0; i < n; i++) {
		const char *name = names[i];
		char r[PATH_MAX];
		snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", name);
		struct stat st;
		if (!snapshot_skip(r, name) && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			if (S_ISDIR(st.st_mode)) {
				int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				if (sub >= 0 && depth < 16 && strlen(r) < 200)
					files = collect_files(sub, r, depth + 1, files, total, truncated);
				if (sub >= 0)
					close(sub);
			} else if (S_ISREG(st.st_mode)) {
				size_t len = 0;
				int too_big = 0;
				char *text = read_at(dirfd, name, MAX_SNAPSHOT_FILE, &len, &too_big);
				if (!text || memchr(text, '\0', len) || *total + len > MAX_SNAPSHOT_TOTAL)
					*truncated = 1;
				else {
					*total += len;
					files = jv_object_set(files, jv_string(r), jv_string_sized(text, (int)len));
				}
				free(text);
			}
		}
		free(names[i]);
	}
	free(names);
	return files;
}

static jv workspace_files(const char *ws, int *truncated)
{
	size_t total = 0;
	*truncated = 0;
	int fd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return jv_object();
	jv files = collect_files(fd, "", 0, jv_object(), &total, truncated);
	close(fd);
	return files;
}

/* Write files (borrowed) plus the task's model.py into dir. */
static int materialize(const char *dir, jv files, const char *model_code)
{
	if (ca_paths_mkdirs(dir, 0755) != 0)
		return -1;
	char path[PATH_MAX * 2];
	snprintf(path, sizeof path, "%s/model.py", dir);
	if (ca_file_write(path, model_code, strlen(model_code), 0644) != 0)
		return -1;
	int rc = 0;
	jv_object_foreach(files, key, value) {
		const char *rel = jv_string_value(key);
		if (rc == 0 && jv_get_kind(value) == JV_KIND_STRING && !strstr(rel, "..") && rel[0] != '/') {
			snprintf(path, sizeof path, "%s/%s", dir, rel);
			char *slash = strrchr(path, '/');
			*slash = '\0';
			if (ca_paths_mkdirs(path, 0755) != 0)
				rc = -1;
			*slash = '/';
			if (rc == 0 && ca_file_write(path, jv_string_value(value),
					(size_t)jv_string_length_bytes(jv_copy(value)), 0644) != 0)
				rc = -1;
		}
		jv_free(key);
		jv_free(value);
	}
	return rc;
}

/*
 * The child process a worker is waiting for (policy or trusted command),
 * so that a worker told to stop takes it, and its process group, along.
 */
static struct ca_proc *volatile running_proc;

static void stop_worker(int sig)
{
	struct ca_proc *p = running_proc;
	if (p && p->pid > 0) {
		kill(-p->pid, SIGKILL);
		kill(p->pid, SIGKILL);
	}
	_exit(128 + sig);
}

/* ---- one task ---- */

struct session {
	const struct config *cfg;
	jv task;
	const char *id;
	char trajectory_id[512];         /* id#position: the trajectory's id, also the policy's CA_TRAJECTORY_ID */
	const char *code;
	char ws[PATH_MAX], state[PATH_MAX];
	struct ca_tools *tools;
	jv messages, snapshots;
	double start;
	long tool_calls, invalid_calls, invalid_outputs;
	long long tokens;
	int turn;
	int *status;                     /* the task's exit status, raised on the way */
	int told_result;                 /* bits of the trusted commands whose bad result was reported */
	const char *stop;                /* why the task ended (the trajectory's "stop"), NULL while it runs */
	char *detail;                    /* its stop_detail, or NULL */
	const char *sandbox_argv[10];    /* the tools' ca-sandbox command, for as long as they live */
};

static double elapsed(const struct session *s) { return ca_proc_now() - s->start; }

/* A diagnostic about a task, its id quoted as JSON: an id cannot forge lines of diagnostics. */
static void warn_task(const struct session *s, const char *detail)
{
	jv quoted = jv_dump_string(jv_string(s->id), 0);
	ca_err_warn("task %s: %s", jv_string_value(quoted), detail);
	jv_free(quoted);
}

static jv stamp(const struct session *s, jv msg)
{
	msg = jv_object_set(msg, jv_string("turn"), jv_number(s->turn));
	return jv_object_set(msg, jv_string("t_s"), jv_number((double)(long)(elapsed(s) * 1000) / 1000));
}

/*
 * The options an agent may give the trusted commands: only ones that
 * change what it is told, never how safely its code runs (no
 * --no-sandbox, --allow-torch, tolerances or caches). ca-profile --verify
 * checks more, not less: it verifies first, in the same start-up.
 */
static const struct {
	const char *command, *option;
	int number;                  /* takes a number from 0 to 1000 */
} agent_options[] = {
	{"ca-build", "-H", 0}, {"ca-build", "--human", 0},
	{"ca-verify", "-H", 0}, {"ca-verify", "--human", 0}, {"ca-verify", "--checks", 1},
	{"ca-verify", "--seed", 1},
	{"ca-profile", "-H", 0}, {"ca-profile", "--human", 0}, {"ca-profile", "--iters", 1},
	{"ca-profile", "--seed", 1}, {"ca-profile", "--sets", 1}, {"ca-profile", "--top", 1},
	{"ca-profile", "--verify", 0}, {"ca-profile", "--warmup", 1},
};

static int small_number(const char *s)
{
	if (!*s || strlen(s) > 4)
		return 0;
	for (const char *c = s; *c; c++)
		if (*c < '0' || *c > '9')
			return 0;
	return atoi(s) <= 1000;
}

/*
 * If command is one of the trusted evaluation commands typed alone, return
 * which ("ca-build", ...) and fill args with its options; else NULL. When
 * it is one but an option is refused, why says so (else why is "").
 */
static const char *trusted_command(const char *command, jv *args, char *why, size_t whylen)
{
	static const char *names[] = {"ca-build", "ca-verify", "ca-profile"};
	char *copy = ca_xstrdup(command), *save = NULL;
	const char *which = NULL;
	*args = jv_array();
	why[0] = '\0';
	char *w = strtok_r(copy, " \t\r\n", &save);
	if (w) {
		if (strncmp(w, "./", 2) == 0)
			w += 2;
		for (size_t i = 0; i < 3; i++)
			if (strcmp(w, names[i]) == 0)
				which = names[i];
	}
	while (which && !why[0] && (w = strtok_r(NULL, " \t\r\n", &save))) {
		if (strcmp(w, ".") == 0 || strcmp(w, "./") == 0 || strcmp(w, "2>&1") == 0)
			continue;
		char *value = NULL, *eq = strncmp(w, "--", 2) == 0 ? strchr(w, '=') : NULL;
		if (eq) {
			*eq = '\0';
			value = eq + 1;
		}
		int found = -1;
		for (size_t i = 0; i < sizeof agent_options / sizeof agent_options[0]; i++)
			if (!strcmp(agent_options[i].command, which) && !strcmp(agent_options[i].option, w))
				found = (int)i;
		if (found < 0) {
			snprintf(why, whylen, "%s: %.40s is not an option the agent may give; allowed:", which, w);
			for (size_t i = 0; i < sizeof agent_options / sizeof agent_options[0]; i++)
				if (!strcmp(agent_options[i].command, which)) {
					size_t used = strlen(why);
					snprintf(why + used, whylen - used, " %s%s", agent_options[i].option,
						agent_options[i].number ? " N" : "");
				}
			break;
		}
		if (agent_options[found].number) {
			if (!value)
				value = strtok_r(NULL, " \t\r\n", &save);
			if (!value || !small_number(value)) {
				snprintf(why, whylen, "%s: %s needs a number from 0 to 1000", which, w);
				break;
			}
			*args = jv_array_append(*args, jv_string(w));
			*args = jv_array_append(*args, jv_string(value));
		} else if (value) {
			snprintf(why, whylen, "%s: %s takes no value", which, w);
			break;
		} else {
			*args = jv_array_append(*args, jv_string(w));
		}
	}
	free(copy);
	if (!which) {
		jv_free(*args);
		*args = jv_invalid();
	}
	return which;
}

/*
 * 1 when a bash call runs in the foreground: run_in_background absent, null
 * or false (a mistyped one goes to the tools, which refuse the call).
 */
static int in_foreground(jv args)
{
	jv v = obj_get(args, "run_in_background");
	int r = jv_get_kind(v) == JV_KIND_NULL || jv_get_kind(v) == JV_KIND_FALSE;
	jv_free(v);
	return r;
}

/* 1 when a bash call's command names a trusted command without being one. */
static int mentions_trusted(jv args)
{
	jv cmd = obj_get(args, "command");
	int r = jv_get_kind(cmd) == JV_KIND_STRING && (strstr(jv_string_value(cmd), "ca-build") ||
		strstr(jv_string_value(cmd), "ca-verify") || strstr(jv_string_value(cmd), "ca-profile"));
	jv_free(cmd);
	return r;
}

static char *append_note(char *text, const char *note)
{
	size_t a = strlen(text), b = strlen(note);
	text = ca_xrealloc(text, a + b + 1);
	memcpy(text + a, note, b + 1);
	return text;
}

/* Whether a trusted command's result (borrowed) says the evaluator failed in field (ok null). */
static int evaluator_failed(jv result, const char *field)
{
	jv f = jv_get_kind(result) == JV_KIND_OBJECT ? obj_get(result, field) : jv_null();
	jv flag = jv_get_kind(f) == JV_KIND_OBJECT ? obj_get(f, "evaluator_fault") : jv_null();
	int failed = jv_get_kind(flag) == JV_KIND_TRUE;
	jv_free(flag);
	jv_free(f);
	return failed;
}

/* 1 when the agent asked a trusted command for text (-H). */
static int human(jv args)
{
	int found = 0;
	jv_array_foreach(args, i, a) {
		found |= !strcmp(jv_string_value(a), "-H") || !strcmp(jv_string_value(a), "--human");
		jv_free(a);
	}
	return found;
}

/*
 * The result of a trusted command: the last line of its output that is not
 * blank, when that is a JSON object; else null, with *problem saying why
 * when there was output at all.
 */
static jv trusted_result(const struct ca_buf *out, const char **problem)
{
	*problem = NULL;
	const char *text = out->data ? out->data : "";
	size_t end = out->len;
	while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ' || text[end - 1] == '\r' || text[end - 1] == '\t'))
		end--;
	if (end == 0)
		return jv_null();
	size_t start = end;
	while (start > 0 && text[start - 1] != '\n')
		start--;
	jv v = jv_parse_sized(text + start, (int)(end - start > INT32_MAX ? INT32_MAX : end - start));
	if (jv_get_kind(v) == JV_KIND_OBJECT)
		return v;
	jv_free(v);
	*problem = "the last line of its output is not a JSON object: a result must be one line of JSON";
	if (start > 0 && out->dropped == 0 && end <= INT32_MAX) {
		jv whole = jv_parse_sized(text, (int)end);
		if (jv_get_kind(whole) == JV_KIND_OBJECT)
			*problem = "its result is spread over several lines: a result must be one line of JSON (as jq -c writes it)";
		jv_free(whole);
	}
	return jv_null();
}

/*
 * One trusted command (cmd, its tool name which) on a snapshot of the
 * workspace in dir: its status, output and error into out and err, or -1
 * with *why (allocated) when it could not run.
 */
static int exec_trusted(struct session *s, const char *which, const char *cmd, jv args, jv files, const char *dir,
		struct ca_buf *out, struct ca_buf *err, char **why)
{
	if (materialize(dir, files, s->code) != 0) {
		*why = ca_xstrdup(strerror(errno));
		return -1;
	}
	int nargs = jv_array_length(jv_copy(args));
	const char **argv = ca_xcalloc((size_t)nargs + 8, sizeof *argv);
	size_t n = 0;
	char script[PATH_MAX + 64];
	snprintf(script, sizeof script, "%s \"$@\"", cmd);
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	argv[n++] = script;
	argv[n++] = which;
	for (int i = 0; i < nargs; i++) {
		jv a = jv_array_get(jv_copy(args), i);
		argv[n++] = jv_string_value(a);   /* args holds a reference */
		jv_free(a);
	}
	argv[n++] = dir;
	argv[n] = NULL;
	struct ca_proc p;
	ca_proc_init(&p, argv);
	p.cwd = s->state;
	p.timeout_s = s->cfg->eval_time;
	p.die_with_parent = 1;
	running_proc = &p;
	int status = ca_proc_capture(&p, NULL, 0, out, err, MAX_TRUSTED_OUTPUT);
	running_proc = NULL;
	if (status < 0)
		*why = ca_xstrdup(strerror(errno));
	free(argv);
	return status;
}

/* The snapshot of a trusted command's run (files and result consumed), appended to the session's. */
static void add_snapshot(struct session *s, int index, const char *which, jv args, jv files, int truncated,
		int status, jv result, const char *problem)
{
	jv snap = jv_object();
	snap = jv_object_set(snap, jv_string("index"), jv_number(index));
	snap = jv_object_set(snap, jv_string("turn"), jv_number(s->turn));
	snap = jv_object_set(snap, jv_string("t_s"), jv_number((double)(long)(elapsed(s) * 1000) / 1000));
	snap = jv_object_set(snap, jv_string("command"), jv_string(which));
	snap = jv_object_set(snap, jv_string("args"), jv_copy(args));
	snap = jv_object_set(snap, jv_string("files"), files);
	if (truncated)
		snap = jv_object_set(snap, jv_string("files_truncated"), jv_true());
	snap = jv_object_set(snap, jv_string("status"), status >= 0 ? jv_number(status) : jv_null());
	snap = jv_object_set(snap, jv_string("result"), result);
	if (problem)
		snap = jv_object_set(snap, jv_string("error"), jv_string(problem));
	s->snapshots = jv_array_append(s->snapshots, snap);
}

/*
 * What the agent sees of a trusted command's record (borrowed): the field
 * the command added (ca-profile's with the verify beside it), the whole
 * record for ca-build; null when there is none.
 */
static jv trusted_field_view(jv result, const char *field)
{
	if (jv_get_kind(result) != JV_KIND_OBJECT)
		return jv_null();
	if (!field)
		return jv_copy(result);
	jv f = obj_get(result, field);
	if (jv_get_kind(f) != JV_KIND_OBJECT) {
		jv_free(f);
		return jv_null();
	}
	jv view = jv_object_set(jv_object(), jv_string(field), f);
	if (!strcmp(field, "profile")) {
		jv v = obj_get(result, "verify");
		if (jv_get_kind(v) != JV_KIND_NULL)
			view = jv_object_set(view, jv_string("verify"), v);
		else
			jv_free(v);
	}
	return view;
}

/*
 * The observation of a trusted command that ran (result borrowed): its
 * view or raw output, its errors, a status other than 0, and a note when
 * the evaluator itself failed.
 */
static char *trusted_observation(const struct config *cfg, const char *which, int status, jv result,
		struct ca_buf *out, struct ca_buf *err)
{
	const char *field = !strcmp(which, "ca-verify") ? "verify" : !strcmp(which, "ca-profile") ? "profile" : NULL;
	jv view = trusted_field_view(result, field);
	char *b;
	if (jv_get_kind(view) != JV_KIND_NULL) {
		jv dumped = jv_dump_string(view, JV_PRINT_PRETTY | JV_PRINT_SPACE1);
		b = ca_tools_truncate(jv_string_value(dumped), strlen(jv_string_value(dumped)), (size_t)cfg->max_output);
		jv_free(dumped);
	} else {
		jv_free(view);
		b = ca_tools_truncate_buf(out, out->len, NULL, (size_t)cfg->max_output);
	}
	char *e = err->len ? ca_tools_truncate_buf(err, err->len, NULL, 4000) : NULL;
	size_t len = strlen(b) + (e ? strlen(e) : 0) + 128;
	char *shown = ca_xmalloc(len);
	snprintf(shown, len, "%s%s%s", b, e ? "\n" : "", e ? e : "");
	if (status != 0) {
		size_t used = strlen(shown);
		snprintf(shown + used, len - used, "\n[%s exit status %d%s]", which, status,
			status == CA_PROC_TIMEOUT_STATUS ? ": time limit" : "");
	}
	if (field && evaluator_failed(result, field)) {
		const char *note = "\n[the evaluator itself failed, not your kernel: this result says nothing about "
			"your code; run the command again later]";
		shown = ca_xrealloc(shown, strlen(shown) + strlen(note) + 1);
		strcat(shown, note);
	}
	free(b);
	free(e);
	return shown;
}

/*
 * The agent's ca-build, ca-verify or ca-profile: the configured trusted
 * command on a snapshot of the workspace, recorded in the session's
 * snapshots; what the agent sees (allocated), *is_error when it could
 * not run.
 */
static char *run_trusted(struct session *s, const char *which, jv args, int *is_error)
{
	const struct config *cfg = s->cfg;
	int truncated;
	jv files = workspace_files(s->ws, &truncated);
	int index = jv_array_length(jv_copy(s->snapshots));
	char dir[PATH_MAX + 32];
	snprintf(dir, sizeof dir, "%s/snapshot-%d", s->state, index);
	const char *cmd = !strcmp(which, "ca-build") ? cfg->build_cmd
		: !strcmp(which, "ca-verify") ? cfg->verify_cmd : cfg->profile_cmd;
	struct ca_buf out = {.keep_tail = 1}, err = {.keep_tail = 1};
	char *why = NULL;
	int status = exec_trusted(s, which, cmd, args, files, dir, &out, &err, &why);
	const char *problem = NULL;
	jv result = trusted_result(&out, &problem);
	if (problem && human(args))
		problem = NULL;   /* -H asked for text */
	int bit = 1 << (which[3] == 'b' ? 0 : which[3] == 'v' ? 1 : 2);
	if (problem && !(s->told_result & bit)) {
		char note[1024];
		snprintf(note, sizeof note, "--%s-cmd %s: %s", which + 3, cmd, problem);
		warn_task(s, note);
		*s->status = ca_err_worst(*s->status, CA_EXIT_SYSTEM);
		s->told_result |= bit;
	}
	add_snapshot(s, index, which, args, files, truncated, status, jv_copy(result), problem);
	char *shown;
	if (why) {
		*is_error = 1;
		size_t len = strlen(why) + 64;
		shown = ca_xmalloc(len);
		snprintf(shown, len, "error: %s could not run: %s", which, why);
	} else {
		shown = trusted_observation(cfg, which, status, result, &out, &err);
	}
	jv_free(result);
	ca_buf_free(&out);
	ca_buf_free(&err);
	free(why);
	return shown;
}

/* The id a policy gave a call (a non-empty string), or null. */
static jv given_id(jv call)
{
	jv id = jv_get_kind(call) == JV_KIND_OBJECT ? obj_get(call, "id") : jv_null();
	if (jv_get_kind(id) == JV_KIND_STRING && jv_string_length_bytes(jv_copy(id)) > 0)
		return id;
	jv_free(id);
	return jv_null();
}

/* The ids the policy gave the calls of one message, as the keys of an object. */
static jv given_ids(jv calls)
{
	jv set = jv_object();
	jv_array_foreach(calls, i, call) {
		jv id = given_id(call);
		if (jv_get_kind(id) == JV_KIND_STRING)
			set = jv_object_set(set, id, jv_true());
		else
			jv_free(id);
		jv_free(call);
	}
	return set;
}

static int has_key(jv set, const char *key)
{
	return jv_object_has(jv_copy(set), jv_string(key));
}

/*
 * The id of call k: the policy's, unless it gave none or one an earlier call
 * of the message has (*duplicate); then one of ours that no call of the
 * message has (given), so that every tool message answers one call.
 * Adds it to *used.
 */
static jv call_id(const struct session *s, jv call, int k, jv given, jv *used, int *duplicate)
{
	jv id = given_id(call);
	*duplicate = jv_get_kind(id) == JV_KIND_STRING && has_key(*used, jv_string_value(id));
	if (jv_get_kind(id) != JV_KIND_STRING || *duplicate) {
		char ours[64];
		for (int n = 0;; n++) {
			if (n == 0)
				snprintf(ours, sizeof ours, "call_%d_%d", s->turn, k);
			else
				snprintf(ours, sizeof ours, "call_%d_%d_%d", s->turn, k, n);
			if (!has_key(*used, ours) && !has_key(given, ours))
				break;
		}
		jv_free(id);
		id = jv_string(ours);
	}
	*used = jv_object_set(*used, jv_copy(id), jv_true());
	return id;
}

/*
 * Normalise call k of a message; on failure return an error observation.
 * given holds the ids the policy gave the message's calls; *used those
 * answered so far (see call_id).
 */
static char *check_call(struct session *s, jv call, int k, jv given, jv *used, jv *norm, const char **name_out,
	jv *args_out)
{
	int duplicate;
	jv id = call_id(s, call, k, given, used, &duplicate);
	jv fn = jv_get_kind(call) == JV_KIND_OBJECT ? obj_get(call, "function") : jv_null();
	jv name = jv_get_kind(fn) == JV_KIND_OBJECT ? obj_get(fn, "name") : jv_null();
	jv args = jv_get_kind(fn) == JV_KIND_OBJECT ? obj_get(fn, "arguments") : jv_null();
	jv_free(fn);
	*norm = jv_object();
	*norm = jv_object_set(*norm, jv_string("id"), jv_copy(id));
	*norm = jv_object_set(*norm, jv_string("type"), jv_string("function"));
	jv nf = jv_object();
	nf = jv_object_set(nf, jv_string("name"), jv_get_kind(name) == JV_KIND_STRING ? jv_copy(name) : jv_string(""));
	char *error = NULL;
	jv parsed = jv_null();
	if (jv_get_kind(args) == JV_KIND_STRING) {
		nf = jv_object_set(nf, jv_string("arguments"), jv_copy(args));
		parsed = jv_parse(jv_string_value(args));
	} else if (jv_get_kind(args) == JV_KIND_OBJECT) {
		nf = jv_object_set(nf, jv_string("arguments"), jv_dump_string(jv_copy(args), 0));
		parsed = jv_copy(args);
	} else {
		nf = jv_object_set(nf, jv_string("arguments"), jv_string(""));
	}
	*norm = jv_object_set(*norm, jv_string("function"), nf);
	if (duplicate) {
		jv theirs = given_id(call);
		jv text = jv_string_fmt("error: the tool call id \"%.100s\" is used by an earlier call of this message; "
			"give every call its own id (this call was not run and is answered as %s)",
			jv_string_value(theirs), jv_string_value(id));
		error = ca_xstrdup(jv_string_value(text));
		jv_free(text);
		jv_free(theirs);
	} else if (jv_get_kind(call) != JV_KIND_OBJECT)
		error = ca_xstrdup("error: a tool call must be an object {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
	else if (jv_get_kind(name) != JV_KIND_STRING)
		error = ca_xstrdup("error: the tool call has no function name");
	else if (!ca_tools_known(jv_string_value(name))) {
		size_t len = 200 + (size_t)jv_string_length_bytes(jv_copy(name));
		error = ca_xmalloc(len);
		snprintf(error, len, "error: unknown tool %.100s; the tools are bash, bash_output, edit, glob, grep, kill_bash, multiedit, read, write",
			jv_string_value(name));
	} else if (jv_get_kind(parsed) != JV_KIND_OBJECT) {
		error = ca_xstrdup("error: the arguments are not a JSON object (give them as a JSON-encoded string of an object)");
	}
	*name_out = NULL;
	if (!error) {
		static char namebuf[32];
		snprintf(namebuf, sizeof namebuf, "%s", jv_string_value(name));
		*name_out = namebuf;
		*args_out = parsed;
	} else {
		jv_free(parsed);
		*args_out = jv_invalid();
	}
	jv_free(id);
	jv_free(name);
	jv_free(args);
	return error;
}

static jv tool_message(struct session *s, jv call_id, const char *name, const char *content, int is_error)
{
	jv m = jv_object();
	m = jv_object_set(m, jv_string("role"), jv_string("tool"));
	m = jv_object_set(m, jv_string("tool_call_id"), call_id);
	m = jv_object_set(m, jv_string("name"), jv_string(name ? name : ""));
	m = jv_object_set(m, jv_string("content"), jv_string(content));
	if (is_error)
		m = jv_object_set(m, jv_string("is_error"), jv_true());
	return stamp(s, m);
}

/*
 * What an engine trains on besides the text: the tokens the server sampled
 * and their log-probabilities, from a chat completion response (borrows
 * both). OpenAI's choices[0].logprobs.content[] gives logprob and token;
 * vLLM adds choices[0].token_ids and prompt_token_ids. Numbers and strings
 * are kept as the server sent them, so training uses the exact tokens
 * instead of re-tokenising the text. jv_invalid when there are none.
 */
static jv sampled_tokens(jv response, jv choice)
{
	jv out = jv_object();
	int any = 0;
	jv lp = obj_get(choice, "logprobs");
	jv content = jv_get_kind(lp) == JV_KIND_OBJECT ? obj_get(lp, "content") : jv_null();
	jv_free(lp);
	if (jv_get_kind(content) == JV_KIND_ARRAY) {
		jv logprobs = jv_array(), tokens = jv_array();
		jv_array_foreach(content, i, entry) {
			jv l = jv_get_kind(entry) == JV_KIND_OBJECT ? obj_get(entry, "logprob") : jv_null();
			jv t = jv_get_kind(entry) == JV_KIND_OBJECT ? obj_get(entry, "token") : jv_null();
			logprobs = jv_array_append(logprobs, jv_get_kind(l) == JV_KIND_NUMBER ? l : (jv_free(l), jv_null()));
			tokens = jv_array_append(tokens, jv_get_kind(t) == JV_KIND_STRING ? t : (jv_free(t), jv_null()));
			jv_free(entry);
		}
		out = jv_object_set(out, jv_string("logprobs"), logprobs);
		out = jv_object_set(out, jv_string("tokens"), tokens);
		any = 1;
	}
	jv_free(content);
	jv ids = obj_get(choice, "token_ids");
	if (jv_get_kind(ids) == JV_KIND_ARRAY) {
		out = jv_object_set(out, jv_string("token_ids"), ids);
		any = 1;
	} else {
		jv_free(ids);
	}
	jv prompt = obj_get(response, "prompt_token_ids");
	if (jv_get_kind(prompt) != JV_KIND_ARRAY) {
		jv_free(prompt);
		prompt = obj_get(choice, "prompt_token_ids");
	}
	if (jv_get_kind(prompt) == JV_KIND_ARRAY) {
		out = jv_object_set(out, jv_string("prompt_token_ids"), prompt);
		any = 1;
	} else {
		jv_free(prompt);
	}
	if (!any) {
		jv_free(out);
		return jv_invalid();
	}
	return ca_json_copy_field(out, choice, "finish_reason", JV_KIND_STRING);
}

/* Extract the assistant message from policy output; jv_invalid with a reason when it is not one. */
static jv parse_policy_output(const char *text, size_t len, long long *tokens)
{
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == ' ' || text[len - 1] == '\r' || text[len - 1] == '\t'))
		len--;
	while (len > 0 && (*text == ' ' || *text == '\n' || *text == '\r' || *text == '\t')) {
		text++;
		len--;
	}
	if (len == 0)
		return jv_invalid_with_msg(jv_string("the policy wrote nothing"));
	jv v = jv_parse_sized(text, (int)(len > INT32_MAX ? INT32_MAX : len));
	if (!jv_is_valid(v)) {
		jv_free(v);
		return jv_invalid_with_msg(jv_string("the policy's output is not JSON"));
	}
	if (jv_get_kind(v) != JV_KIND_OBJECT) {
		jv_free(v);
		return jv_invalid_with_msg(jv_string("the policy's output is not a JSON object"));
	}
	jv usage = obj_get(v, "usage");
	double total;
	if (jv_get_kind(usage) == JV_KIND_OBJECT && ca_json_number(usage, "total_tokens", &total) == 1)
		*tokens = (long long)total;
	jv_free(usage);
	jv choices = obj_get(v, "choices");
	if (jv_get_kind(choices) == JV_KIND_ARRAY) {
		jv first = jv_array_get(choices, 0);
		jv completion = jv_get_kind(first) == JV_KIND_OBJECT ? sampled_tokens(v, first) : jv_invalid();
		jv finish = jv_get_kind(first) == JV_KIND_OBJECT ? obj_get(first, "finish_reason") : jv_null();
		int cut = jv_get_kind(finish) == JV_KIND_STRING && !strcmp(jv_string_value(finish), "length");
		jv_free(finish);
		jv_free(v);
		v = jv_get_kind(first) == JV_KIND_OBJECT ? obj_get(first, "message") : jv_null();
		jv_free(first);
		if (jv_get_kind(v) != JV_KIND_OBJECT) {
			jv_free(v);
			jv_free(completion);
			return jv_invalid_with_msg(jv_string("the policy's response has no choices[0].message object"));
		}
		/* Carried to the recorded assistant message; a bare message cannot set them. */
		v = jv_object_delete(v, jv_string("completion"));
		v = jv_object_delete(v, jv_string("length_cut"));
		if (cut)
			v = jv_object_set(v, jv_string("length_cut"), jv_true());
		if (jv_is_valid(completion))
			v = jv_object_set(v, jv_string("completion"), completion);
		else
			jv_free(completion);
	} else {
		jv_free(choices);
		v = jv_object_delete(v, jv_string("completion"));
		v = jv_object_delete(v, jv_string("length_cut"));
	}
	/* A message of another role (a user turn the policy made up) is not the assistant's turn. */
	if (jv_object_has(jv_copy(v), jv_string("role"))) {
		jv role = obj_get(v, "role");
		int assistant = jv_get_kind(role) == JV_KIND_STRING && !strcmp(jv_string_value(role), "assistant");
		jv why = assistant ? jv_invalid() : jv_get_kind(role) == JV_KIND_STRING
			? jv_string_fmt("the policy's output is a message with role \"%.40s\", not \"assistant\"",
				jv_string_value(role))
			: jv_string("the policy's output has a \"role\" that is not the string \"assistant\"");
		jv_free(role);
		if (!assistant) {
			jv_free(v);
			return jv_invalid_with_msg(why);
		}
	}
	jv content = obj_get(v, "content"), calls = obj_get(v, "tool_calls");
	int has_content = jv_get_kind(content) == JV_KIND_STRING || jv_get_kind(content) == JV_KIND_NULL ||
		jv_get_kind(content) == JV_KIND_ARRAY;
	int has_calls = jv_get_kind(calls) == JV_KIND_ARRAY || jv_get_kind(calls) == JV_KIND_NULL;
	int any = jv_object_has(jv_copy(v), jv_string("content")) || jv_object_has(jv_copy(v), jv_string("tool_calls"));
	jv_free(calls);
	if (!any || !has_content || !has_calls) {
		jv_free(content);
		jv_free(v);
		return jv_invalid_with_msg(jv_string("the policy's output is not an assistant message (a string \"content\" and/or an array \"tool_calls\")"));
	}
	/* Content given as a list of parts: keep the text. */
	if (jv_get_kind(content) == JV_KIND_ARRAY) {
		jv text = jv_string("");
		jv_array_foreach(content, i, part) {
			jv t = jv_get_kind(part) == JV_KIND_OBJECT ? obj_get(part, "text") : jv_null();
			if (jv_get_kind(t) == JV_KIND_STRING)
				text = jv_string_concat(text, t);
			else
				jv_free(t);
			jv_free(part);
		}
		v = jv_object_set(v, jv_string("content"), text);
	}
	jv_free(content);
	return v;
}

static long long estimate_tokens(const struct session *s)
{
	jv text = jv_dump_string(jv_copy(s->messages), 0);
	long long n = jv_string_length_bytes(text) / 4;
	return n;
}

static const char *run_policy(struct session *s, jv *message, char **detail)
{
	const struct config *cfg = s->cfg;
	jv conv = jv_object();
	conv = jv_object_set(conv, jv_string("task_id"), jv_string(s->id));
	conv = jv_object_set(conv, jv_string("turn"), jv_number(s->turn));
	conv = jv_object_set(conv, jv_string("max_turns"), jv_number((double)cfg->max_turns));
	conv = jv_object_set(conv, jv_string("tools"), ca_tools_schema());
	conv = jv_object_set(conv, jv_string("messages"), jv_copy(s->messages));
	jv text = jv_dump_string(conv, 0);
	char turn_text[32];
	snprintf(turn_text, sizeof turn_text, "%d", s->turn);
	setenv("CA_TURN", turn_text, 1);
	setenv("CA_WORKSPACE", s->ws, 1);
	setenv("CA_TASK_ID", s->id, 1);
	setenv("CA_TRAJECTORY_ID", s->trajectory_id, 1);
	const char *argv[] = {"/bin/sh", "-c", cfg->policy, NULL};
	struct ca_proc p;
	ca_proc_init(&p, argv);
	p.timeout_s = cfg->policy_time;
	p.die_with_parent = 1;
	struct ca_buf out = {0}, err = {.keep_tail = 1};
	running_proc = &p;
	int status = ca_proc_capture(&p, jv_string_value(text), (size_t)jv_string_length_bytes(jv_copy(text)),
		&out, &err, MAX_POLICY_OUTPUT);
	running_proc = NULL;
	jv_free(text);
	const char *stop = NULL;
	*detail = NULL;
	*message = jv_invalid();
	if (status < 0) {
		stop = "policy_error";
		*detail = ca_xstrdup(strerror(errno));
	} else if (p.timed_out) {
		stop = "policy_timeout";
	} else if (status != 0) {
		stop = "policy_error";
		char *tail = ca_tools_truncate_buf(&err, err.len, NULL, 2000);
		size_t len = strlen(tail) + 64;
		*detail = ca_xmalloc(len);
		snprintf(*detail, len, "exit status %d: %s", status, tail);
		free(tail);
	} else {
		long long tokens = -1;
		if (out.dropped)
			*message = jv_invalid_with_msg(jv_string_fmt("the policy's output is over the limit of a message "
				"(%d MiB)", MAX_POLICY_OUTPUT >> 20));
		else
			*message = parse_policy_output(out.data ? out.data : "", out.len, &tokens);
		if (tokens > 0)
			s->tokens = tokens;
		if (!jv_is_valid(*message)) {
			/* Keep the raw output as data: the invalid turn goes into the record. */
			jv why = jv_invalid_get_msg(*message);
			char *raw = ca_tools_truncate(out.data ? out.data : "", out.len, MAX_RAW_SHOWN);
			jv bad = jv_object();
			bad = jv_object_set(bad, jv_string("raw"), jv_string(raw));
			bad = jv_object_set(bad, jv_string("why"), why);
			*message = jv_invalid_with_msg(bad);
			free(raw);
		}
	}
	ca_buf_free(&out);
	ca_buf_free(&err);
	return stop;
}

static char *prompt_text(const struct session *s, const char *skill_text)
{
	const char *fmt_system =
		"%s\n\n# This session\n\nYour workspace is %s (the current directory of bash). "
		"It holds model.py (the reference, read-only), SKILL.md (this guide, read-only) and kernels/. "
		"You have at most %lld turns. When you are finished, answer without any tool call.\n";
	size_t len = strlen(fmt_system) + strlen(skill_text) + strlen(s->ws) + 64;
	char *t = ca_xmalloc(len);
	snprintf(t, len, fmt_system, skill_text, s->ws, s->cfg->max_turns);
	return t;
}

static char *task_text(const struct session *s)
{
	const char *fmt =
		"Task %s. Make this PyTorch model faster with your own CUDA kernels. The reference is model.py "
		"in the workspace:\n\n```python\n%s\n```\n\nWrite model_new.py (class ModelNew with the same "
		"constructor arguments, parameters and forward signature) and kernels/*.cu so that ca-verify passes "
		"and ca-profile shows it at least 5%% faster than torch.compile. Follow SKILL.md.\n";
	size_t len = strlen(fmt) + strlen(s->id) + strlen(s->code) + 16;
	char *t = ca_xmalloc(len);
	snprintf(t, len, fmt, s->id, s->code);
	return t;
}

/* Add every entry of dir but the one called keep[0, keep_len) to list[*n ...]. */
static char **add_siblings(char **list, size_t *n, const char *dir, const char *keep, size_t keep_len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
				(strlen(e->d_name) == keep_len && !strncmp(e->d_name, keep, keep_len)))
			continue;
		list = ca_xrealloc(list, (*n + 2) * sizeof *list);
		size_t len = strlen(dir) + strlen(e->d_name) + 2;
		list[*n] = ca_xmalloc(len);
		snprintf(list[(*n)++], len, "%s/%s", dir, e->d_name);
	}
	if (d)
		closedir(d);
	return list;
}

/*
 * What the agent's shell must not reach: everything on the way from root
 * to its own taskdir but that way (the other workers' directories, and
 * the earlier tasks of its own worker), and our own state (job logs,
 * snapshots). Below /tmp the sandbox's private /tmp hides them already
 * (and a hide of a path it cannot see would fail).
 */
static char **hidden_paths(const char *root, const char *taskdir, const char *state)
{
	char **list = ca_xcalloc(1, sizeof *list);
	size_t n = 0;
	if (strncmp(root, "/tmp/", 5) == 0)
		return list;
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", root);
	for (const char *rest = taskdir + strlen(root); *rest == '/'; ) {
		const char *name = rest + 1, *slash = strchr(name, '/');
		size_t len = slash ? (size_t)(slash - name) : strlen(name);
		list = add_siblings(list, &n, dir, name, len);
		size_t used = strlen(dir);
		snprintf(dir + used, sizeof dir - used, "/%.*s", (int)len, name);
		rest = name + len;
	}
	list = ca_xrealloc(list, (n + 2) * sizeof *list);
	list[n++] = ca_xstrdup(state);
	list[n] = NULL;
	return list;
}

static jv message(const char *role, const char *content)
{
	jv m = jv_object_set(jv_object(), jv_string("role"), jv_string(role));
	return jv_object_set(m, jv_string("content"), jv_string(content));
}

/* The task's id for diagnostics and the trajectory's id, id#position. */
static void session_ids(struct session *s, jv idv, long index, char idbuf[64])
{
	if (jv_get_kind(idv) == JV_KIND_STRING) {
		s->id = jv_string_value(idv);
	} else if (jv_get_kind(idv) == JV_KIND_NUMBER) {
		snprintf(idbuf, 64, "%.17g", jv_number_value(idv));
		s->id = idbuf;
	} else {
		snprintf(idbuf, 64, "task-%ld", index + 1);
		s->id = idbuf;
	}
	snprintf(s->trajectory_id, sizeof s->trajectory_id, "%s#%ld", s->id, index + 1);
}

/* The stop a task ends on before its first turn, said once. */
static void setup_failed(struct session *s, char *detail, int status)
{
	s->stop = "setup_error";
	s->detail = detail;
	warn_task(s, detail);
	*s->status = ca_err_worst(*s->status, status);
}

/* The workspace from the skill's workdir/, with the task's model.py and SKILL.md; the skill's text. */
static char *prepare_workspace(struct session *s)
{
	const struct config *cfg = s->cfg;
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/SKILL.md", cfg->skill);
	size_t len;
	char *skill_text = ca_file_read(path, 0, 0, &len);
	snprintf(path, sizeof path, "%s/workdir", cfg->skill);
	/* The template's links stay behind; a skill without workdir/ starts the workspace empty. */
	int copied = ca_file_copy_tree(path, s->ws, CA_FILE_SKIP_LINKS) == 0 ||
		(errno == ENOENT && ca_paths_mkdirs(s->ws, 0755) == 0);
	if (!skill_text || !copied || ca_paths_mkdirs(s->state, 0700) != 0) {
		setup_failed(s, ca_xstrdup("cannot prepare the workspace from the skill directory"), CA_EXIT_SYSTEM);
		return skill_text;
	}
	snprintf(path, sizeof path, "%s/model.py", s->ws);
	int rc = ca_file_write(path, s->code, strlen(s->code), 0444);
	snprintf(path, sizeof path, "%s/SKILL.md", s->ws);
	rc |= ca_file_write(path, skill_text, len, 0444);
	if (rc != 0)
		setup_failed(s, ca_xstrdup(strerror(errno)), CA_EXIT_SYSTEM);
	return skill_text;
}

/* The agent's tools on the workspace, confined, and the conversation's first two messages. */
static void open_tools(struct session *s, const char *taskdir, const char *skill_text)
{
	const struct config *cfg = s->cfg;
	/* The tools keep these two (the hidden paths they copy). */
	static const char *const protected[] = {"model.py", "SKILL.md", NULL};
	const char *sandbox_argv[] = {cfg->sandbox, "--mem", "16384", "--nproc", "1024", "--fsize", "4096",
		"--nofile", "1024", NULL};
	_Static_assert(sizeof sandbox_argv == sizeof s->sandbox_argv, "the session holds the whole command");
	memcpy(s->sandbox_argv, sandbox_argv, sizeof sandbox_argv);
	char **hide = hidden_paths(cfg->root, taskdir, s->state);
	struct ca_tools_config tc = {
		.workspace = s->ws,
		.state_dir = s->state,
		.protected = protected,
		.sandbox = cfg->unconfined ? NULL : s->sandbox_argv,
		.hide = (const char *const *)hide,
		.command_time_s = cfg->command_time,
		.job_time_s = cfg->max_time > 0 ? cfg->max_time : 3600,
		.max_output = (size_t)cfg->max_output,
	};
	s->tools = ca_tools_new(&tc);
	if (!s->tools) {
		s->stop = "setup_error";
		s->detail = ca_xstrdup("cannot open the workspace");
		*s->status = ca_err_worst(*s->status, CA_EXIT_SYSTEM);
	} else {
		char *sys = prompt_text(s, skill_text);
		char *user = task_text(s);
		s->messages = jv_array_append(s->messages, stamp(s, message("system", sys)));
		s->messages = jv_array_append(s->messages, stamp(s, message("user", user)));
		free(sys);
		free(user);
	}
	for (size_t i = 0; hide[i]; i++)
		free(hide[i]);
	free(hide);
}

/* The stop a turn may not begin under (turns, time, context), or NULL. */
static const char *turn_limit(struct session *s)
{
	const struct config *cfg = s->cfg;
	if (s->turn >= cfg->max_turns)
		return "max_turns";
	if (cfg->max_time > 0 && elapsed(s) >= cfg->max_time)
		return "wall_clock";
	long long est = estimate_tokens(s);
	if (est > s->tokens)
		s->tokens = est;
	if (cfg->max_context > 0 && s->tokens >= cfg->max_context)
		return "context";
	return NULL;
}

/* An output that is no assistant message: kept, answered with the error; too many in a row end the task. */
static void invalid_output(struct session *s, jv msg, int *consecutive)
{
	jv bad = jv_invalid_get_msg(msg);
	jv raw = obj_get(bad, "raw"), why = obj_get(bad, "why");
	jv m = message("assistant", jv_string_value(raw));
	m = jv_object_set(m, jv_string("invalid"), jv_true());
	s->messages = jv_array_append(s->messages, stamp(s, m));
	char note[512];
	snprintf(note, sizeof note, "error: %s. Answer with one JSON assistant message: "
		"{\"role\": \"assistant\", \"content\": \"...\", \"tool_calls\": [...]}", jv_string_value(why));
	jv u = message("user", note);
	u = jv_object_set(u, jv_string("is_error"), jv_true());
	s->messages = jv_array_append(s->messages, stamp(s, u));
	jv_free(raw);
	jv_free(why);
	jv_free(bad);
	s->invalid_outputs++;
	if (++*consecutive >= s->cfg->max_invalid) {
		s->stop = "invalid_output";
		char d[96];
		snprintf(d, sizeof d, "%d invalid policy outputs in a row", *consecutive);
		s->detail = ca_xstrdup(d);
	}
}

/* The assistant message as recorded: content, reasoning and completion of the policy's answer. */
static jv assistant_message(jv msg)
{
	jv content = obj_get(msg, "content");
	jv am = jv_object_set(jv_object(), jv_string("role"), jv_string("assistant"));
	am = jv_object_set(am, jv_string("content"), jv_get_kind(content) == JV_KIND_STRING ? content : (jv_free(content), jv_null()));
	am = ca_json_copy_field(am, msg, "reasoning_content", JV_KIND_STRING);
	return ca_json_copy_field(am, msg, "completion", JV_KIND_OBJECT);
}

/* What one checked tool call observes: a trusted command on a snapshot, or the tool itself. */
static char *observe(struct session *s, const char *name, jv args, int *is_error)
{
	jv targs = jv_invalid();
	const char *which = NULL;
	char refused[512] = "";
	char *observation;
	if (!strcmp(name, "bash") && in_foreground(args)) {
		jv cmd = obj_get(args, "command");
		if (jv_get_kind(cmd) == JV_KIND_STRING)
			which = trusted_command(jv_string_value(cmd), &targs, refused, sizeof refused);
		jv_free(cmd);
	}
	if (which && refused[0]) {
		size_t len = strlen(refused) + 16;
		observation = ca_xmalloc(len);
		snprintf(observation, len, "error: %s", refused);
		*is_error = 1;
		jv_free(targs);
	} else if (which) {
		observation = run_trusted(s, which, targs, is_error);
		jv_free(targs);
	} else {
		observation = ca_tools_call(s->tools, name, args, is_error);
		if (*is_error == CA_TOOLS_INVALID)
			s->invalid_calls++;
		if (!strcmp(name, "bash") && mentions_trusted(args))
			observation = append_note(observation, "\n[note: ca-build, ca-verify and ca-profile "
				"run the trusted tools on a snapshot only when typed alone as the whole command]");
	}
	return observation;
}

/*
 * The turn's tool calls, every one normalised first so the assistant
 * message (am, consumed) precedes its results; then run in order.
 */
static void run_calls(struct session *s, jv am, jv calls, int ncalls)
{
	jv norm_calls = jv_array(), results = jv_array();
	jv given = given_ids(calls), used = jv_object();
	for (int k = 0; k < ncalls; k++) {
		jv call = jv_array_get(jv_copy(calls), k), norm, args;
		const char *name;
		char *error = check_call(s, call, k, given, &used, &norm, &name, &args);
		jv call_id = obj_get(norm, "id");
		char *observation;
		int is_error = 0;
		s->tool_calls++;
		if (error) {
			observation = error;
			is_error = 1;
			s->invalid_calls++;
		} else {
			observation = observe(s, name, args, &is_error);
			jv_free(args);
		}
		jv fobj = obj_get(norm, "function");
		jv fname = obj_get(fobj, "name");
		jv_free(fobj);
		results = jv_array_append(results, tool_message(s, call_id, jv_string_value(fname), observation, is_error));
		jv_free(fname);
		free(observation);
		norm_calls = jv_array_append(norm_calls, norm);
		jv_free(call);
		if (s->cfg->max_time > 0 && elapsed(s) >= s->cfg->max_time)
			break;
	}
	jv_free(given);
	jv_free(used);
	am = jv_object_set(am, jv_string("tool_calls"), norm_calls);
	s->messages = jv_array_append(s->messages, stamp(s, am));
	jv_array_foreach(results, i, r) {
		s->messages = jv_array_append(s->messages, r);
	}
	jv_free(results);
}

/* One turn: the policy's answer, and its tool calls run; s->stop is set when the task ends. */
static void run_turn(struct session *s, int *consecutive_invalid)
{
	s->turn++;
	jv msg;
	s->stop = run_policy(s, &msg, &s->detail);
	if (s->stop) {
		jv_free(msg);
		if (!strcmp(s->stop, "policy_error") || !strcmp(s->stop, "policy_timeout"))
			*s->status = ca_err_worst(*s->status, CA_EXIT_SYSTEM);
		return;
	}
	if (!jv_is_valid(msg)) {
		invalid_output(s, msg, consecutive_invalid);
		return;
	}
	*consecutive_invalid = 0;
	jv calls = obj_get(msg, "tool_calls");
	jv am = assistant_message(msg);
	int ncalls = jv_get_kind(calls) == JV_KIND_ARRAY ? jv_array_length(jv_copy(calls)) : 0;
	/*
	 * The server stopped at its token limit: the message is kept as
	 * returned (an engine that records the tokens matches it), but its
	 * tool calls are cut short and not run, and the episode ends.
	 */
	jv cut = obj_get(msg, "length_cut");
	int length_cut = jv_get_kind(cut) == JV_KIND_TRUE;
	jv_free(cut);
	if (length_cut || ncalls == 0) {
		if (length_cut && ncalls > 0)
			am = jv_object_set(am, jv_string("tool_calls"), calls);
		else
			jv_free(calls);
		s->messages = jv_array_append(s->messages, stamp(s, am));
		jv_free(msg);
		s->stop = length_cut ? "length" : "done";
		return;
	}
	run_calls(s, am, calls, ncalls);
	jv_free(calls);
	jv_free(msg);
}

/* The trajectory record of a finished session (its messages and snapshots consumed). */
static jv trajectory(struct session *s)
{
	const struct config *cfg = s->cfg;
	jv traj = jv_object();
	traj = jv_object_set(traj, jv_string("id"), jv_string(s->trajectory_id));
	traj = jv_object_set(traj, jv_string("policy"), jv_string(cfg->policy));
	traj = jv_object_set(traj, jv_string("stop"), jv_string(s->stop));
	if (s->detail)
		traj = jv_object_set(traj, jv_string("stop_detail"), jv_string(s->detail));
	traj = jv_object_set(traj, jv_string("turns"), jv_number(s->turn));
	traj = jv_object_set(traj, jv_string("tool_calls"), jv_number((double)s->tool_calls));
	traj = jv_object_set(traj, jv_string("invalid_tool_calls"), jv_number((double)s->invalid_calls));
	traj = jv_object_set(traj, jv_string("invalid_outputs"), jv_number((double)s->invalid_outputs));
	long long est = estimate_tokens(s);
	traj = jv_object_set(traj, jv_string("tokens"), jv_number((double)(est > s->tokens ? est : s->tokens)));
	traj = jv_object_set(traj, jv_string("wall_s"), jv_number((double)(long)(elapsed(s) * 1000) / 1000));
	traj = jv_object_set(traj, jv_string("confined"), jv_bool(!cfg->unconfined));
	jv limits = jv_object();
	limits = jv_object_set(limits, jv_string("max_turns"), jv_number((double)cfg->max_turns));
	limits = jv_object_set(limits, jv_string("max_context"), jv_number((double)cfg->max_context));
	limits = jv_object_set(limits, jv_string("max_time_s"), jv_number(cfg->max_time));
	limits = jv_object_set(limits, jv_string("command_time_s"), jv_number(cfg->command_time));
	traj = jv_object_set(traj, jv_string("limits"), limits);
	traj = jv_object_set(traj, jv_string("messages"), s->messages);
	return jv_object_set(traj, jv_string("snapshots"), s->snapshots);
}

/* Run one task to its trajectory record; *status gets the worst status. */
static jv run_task(const struct config *cfg, jv task, long index, const char *taskdir, int *status)
{
	struct session s = {.cfg = cfg, .task = task, .start = ca_proc_now(), .status = status};
	s.messages = jv_array();
	s.snapshots = jv_array();
	jv idv = obj_get(task, "id");
	char idbuf[64];
	session_ids(&s, idv, index, idbuf);
	jv codev = obj_get(task, "code");
	s.code = jv_get_kind(codev) == JV_KIND_STRING ? jv_string_value(codev) : NULL;
	snprintf(s.ws, sizeof s.ws, "%s/workspace", taskdir);
	snprintf(s.state, sizeof s.state, "%s/state", taskdir);

	if (!s.code)
		setup_failed(&s, ca_xstrdup("the task record has no string field \"code\""), CA_EXIT_DATA);
	char *skill_text = s.stop ? NULL : prepare_workspace(&s);
	if (!s.stop)
		open_tools(&s, taskdir, skill_text);
	free(skill_text);
	int consecutive_invalid = 0;
	while (!s.stop && !(s.stop = turn_limit(&s)))
		run_turn(&s, &consecutive_invalid);

	jv traj = trajectory(&s);
	if (s.tools) {
		int truncated;
		jv files = workspace_files(s.ws, &truncated);
		/* The final files are also the record's candidate, so ca-agent | ca-verify scores them. */
		task = jv_object_set(task, jv_string("candidate"), jv_object_set(jv_object(), jv_string("files"), jv_copy(files)));
		jv final = jv_object_set(jv_object(), jv_string("files"), files);
		if (truncated)
			final = jv_object_set(final, jv_string("files_truncated"), jv_true());
		traj = jv_object_set(traj, jv_string("final"), final);
		ca_tools_free(s.tools);
	}
	if (cfg->keep)
		traj = jv_object_set(traj, jv_string("workspace"), jv_string(s.ws));
	free(s.detail);
	jv_free(idv);
	jv_free(codev);
	return jv_object_set(task, jv_string("trajectory"), traj);
}

/* ---- the task pool ---- */

/*
 * Tasks start as they arrive, up to -j at once, each in a process of its
 * own that a thread of the pool (lib/pool) forks and waits for; records
 * leave in input order. Worker K's tasks run in ROOT/worker-K/NNNNNN-ID,
 * where the -j worker directories all exist before the first task starts:
 * a confined task hides the other workers' (and what its own worker holds
 * besides it), so no task reaches another's workspace, also one that
 * starts after it.
 */
enum { MAX_WAITING = 256 };  /* records read ahead of the oldest one still running */

/* A record in the pool: where it came from, and for a task how its process ended. */
struct slot {
	const char *file;   /* for messages */
	long line;
	long position;      /* in the input, from 1 */
	int is_task;
	int status;
	char dir[PATH_MAX];
};

/* A thread of the pool: its worker directory and the task process it waits for. */
struct worker {
	const struct config *cfg;
	long index;         /* worker-(index + 1) */
	pid_t pid;          /* running, under stop_lock */
};

/*
 * Set by SIGTERM, SIGINT or SIGHUP in ca-agent itself: stop the workers and
 * clean up. The signals, and every record that finishes or leaves, write a
 * byte to the wake pipe, so the main loop's poll sees them without a race.
 */
static volatile sig_atomic_t stop_signal;
static int wake[2] = {-1, -1};

/*
 * Once the main loop stops the tasks (a signal, a write error): no task
 * starts any more, and those running are told to stop. stop_lock orders
 * a task's fork against that.
 */
static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;
static int stopping;

static void sanitize(const char *id, char *out, size_t n)
{
	size_t k = 0;
	for (const char *c = id; *c && k + 1 < n && k < 40; c++)
		out[k++] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
			*c == '-' || *c == '_' || *c == '.' ? *c : '_';
	out[k] = '\0';
}

static void worker_dir(const struct config *cfg, long k, char *out, size_t n)
{
	snprintf(out, n, "%s/worker-%ld", cfg->root, k + 1);
}

/* The child: run one task, write its record to dir/record.json. */
static noreturn void child_main(const struct config *cfg, jv record, struct slot *slot)
{
	int status = CA_EXIT_OK;
	jv out = run_task(cfg, record, slot->position - 1, slot->dir, &status);
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/record.json", slot->dir);
	jv text = jv_dump_string(out, 0);
	if (ca_file_write(path, jv_string_value(text), (size_t)jv_string_length_bytes(jv_copy(text)), 0600) != 0)
		status = CA_EXIT_SYSTEM;
	jv_free(text);
	_exit(status);
}

/*
 * Set when writing to stdout failed, and reported then, while errno says
 * why (the clean-up after it would leave another errno for ca_err_finish).
 */
static _Atomic int write_failed;

static int write_error(void)
{
	if (!write_failed)
		ca_err_warn_sys("write error on stdout");
	write_failed = 1;
	return CA_EXIT_SYSTEM;
}

static void poke(void)
{
	int saved = errno;
	if (wake[1] >= 0 && write(wake[1], "", 1) < 0) {
		/* full: a wake-up is pending anyway */
	}
	errno = saved;
}

static void note_stop(int sig)
{
	stop_signal = sig;
	poke();
}

static void pool_changed(void *ctx)
{
	(void)ctx;
	poke();
}

/* In the task's process, before it runs: it does not outlive ca-agent; its children die with it. */
static void child_setup(pid_t parent)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	sigaction(SIGCHLD, &sa, NULL);
	close(wake[0]);
	close(wake[1]);
	wake[0] = wake[1] = -1;
	sa.sa_handler = stop_worker;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(CA_EXIT_SYSTEM);
}

/*
 * Fork the task's process, unless the tasks are being stopped (then -1).
 * stdout is flushed, and held, across the fork: a child that exits
 * through stdio must not write what we hold a second time, nor find
 * another thread's record half written.
 */
static pid_t fork_task(struct worker *w, jv record, struct slot *slot)
{
	pid_t parent = getpid();
	pthread_mutex_lock(&stop_lock);
	if (stopping) {
		pthread_mutex_unlock(&stop_lock);
		return -1;
	}
	flockfile(stdout);
	int flushed = fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		child_setup(parent);
		child_main(w->cfg, record, slot);
	}
	funlockfile(stdout);
	if (pid < 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "fork");
	w->pid = pid;
	pthread_mutex_unlock(&stop_lock);
	if (flushed != 0)
		write_error();
	return pid;
}

/* The pool's work: run one task in its directory and wait for its process; the record is kept for the output. */
static jv run_slot(void *context, long index, jv record, void *data, int *status)
{
	struct worker *w = context;
	struct slot *slot = data;
	char dir[PATH_MAX];
	worker_dir(w->cfg, w->index, dir, sizeof dir);
	jv id = obj_get(record, "id");
	char clean[64] = "task";
	if (jv_get_kind(id) == JV_KIND_STRING)
		sanitize(jv_string_value(id), clean, sizeof clean);
	jv_free(id);
	snprintf(slot->dir, sizeof slot->dir, "%s/%06ld-%s", dir, slot->position, clean);
	if (ca_paths_mkdirs(slot->dir, 0755) != 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", slot->dir);
	pid_t pid = fork_task(w, record, slot);
	int st = 0;
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(&stop_lock);
	w->pid = 0;
	pthread_mutex_unlock(&stop_lock);
	slot->status = pid < 0 ? CA_EXIT_SYSTEM : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	*status = 0;
	return record;
}

/* Write a finished task's record, from its directory; one that died without it still gets one. */
static int emit_task(const struct config *cfg, jv record, struct slot *slot)
{
	int status = CA_EXIT_OK;
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s/record.json", slot->dir);
	size_t len;
	char *text = ca_file_read(path, 0, 0, &len);
	jv out = text && len > 0 ? jv_parse_sized(text, (int)len) : jv_invalid();
	if (jv_get_kind(out) == JV_KIND_OBJECT) {
		/* The task's fields, which its process wrote out again, go out as they came in. */
		if (ca_pool_write(ca_ndjson_keep_equal(out, record)) != 0)
			status = write_error();
	} else if (text && len > 0) {
		jv_free(out);
		if (ca_ndjson_write_raw(text, len) != 0)
			status = write_error();
	} else {
		jv_free(out);
		jv traj = jv_object();
		traj = jv_object_set(traj, jv_string("stop"), jv_string("crashed"));
		char d[64];
		snprintf(d, sizeof d, "the task's worker ended with status %d", slot->status);
		traj = jv_object_set(traj, jv_string("stop_detail"), jv_string(d));
		ca_err_warn("%s:%ld: %s", slot->file, slot->line, d);
		if (ca_pool_write(jv_object_set(jv_copy(record), jv_string("trajectory"), traj)) != 0)
			status = write_error();
		status = ca_err_worst(status, CA_EXIT_SYSTEM);
	}
	free(text);
	return ca_err_worst(status, slot->status > CA_EXIT_SYSTEM ? CA_EXIT_SYSTEM : slot->status);
}

/* What the pool's release counts: the records written. */
struct output {
	const struct config *cfg;
	long written;
};

/*
 * The pool's release, in input order. Nothing is written once a signal
 * stopped us: a kill of the whole process group reaches the workers too,
 * and a worker it killed would be written as "crashed", so a rerun would
 * take its task as done (t0700's kill mid-run, 1 run in 3).
 */
static int emit(void *ctx, jv record, int status, void *data)
{
	struct output *o = ctx;
	struct slot *slot = data;
	if (!write_failed && !stop_signal) {
		if (slot->is_task)
			status = emit_task(o->cfg, record, slot);
		else if (ca_pool_write(jv_copy(record)) != 0)
			status = write_error();
		o->written++;
		ca_ndjson_progress_tick();
	} else {
		status = CA_EXIT_OK;
	}
	jv_free(record);
	if (slot->is_task && slot->dir[0] && !o->cfg->keep)
		ca_file_remove_tree(slot->dir);
	free(slot);
	return status;
}

/* Take one line of input: an error record in its place, or a task that starts. */
static void take(struct ca_pool *pool, struct ca_ndjson_reader *r, long position, int kind, jv rec)
{
	struct slot *slot = ca_xcalloc(1, sizeof *slot);
	slot->file = ca_ndjson_name(r);
	slot->line = ca_ndjson_line(r);
	slot->position = position;
	if (kind == CA_NDJSON_BAD) {
		ca_pool_put_malformed(pool, r, rec, slot);
		return;
	}
	slot->is_task = 1;
	size_t len;
	const char *text = ca_ndjson_text(r, &len);
	ca_pool_put_line(pool, jv_copy(rec), rec, text, len, slot);
}

/* Stop the tasks still running: they end, and the pool drops what was not written. */
static void stop_all(struct worker *workers, long n)
{
	pthread_mutex_lock(&stop_lock);
	stopping = 1;
	for (long k = 0; k < n; k++)
		if (workers[k].pid > 0)
			kill(workers[k].pid, SIGTERM);
	pthread_mutex_unlock(&stop_lock);
}

/*
 * Read the records as they come while tasks run: a record is read only
 * when a worker is free for it; the loop ends at the end of input once
 * every record left, at a signal or at a write error. Returns the input's
 * count of records.
 */
static long read_tasks(struct ca_pool *pool, struct ca_ndjson_reader *r)
{
	long nread = 0;
	int input_done = 0;
	while (!write_failed && !stop_signal && !(input_done && ca_pool_pending(pool) == 0)) {
		int want = !input_done && ca_pool_room(pool);
		if (want && ca_ndjson_ready(r)) {
			jv rec;
			int kind = ca_ndjson_next(r, &rec);
			if (kind == CA_NDJSON_EOF)
				input_done = 1;
			else
				take(pool, r, ++nread, kind, rec);
			continue;
		}
		/* Wait for input, a record's end or a signal. */
		struct pollfd pfd[2] = {{.fd = wake[0], .events = POLLIN}};
		nfds_t n = 1;
		if (want && ca_ndjson_fd(r) >= 0)
			pfd[n++] = (struct pollfd){.fd = ca_ndjson_fd(r), .events = POLLIN};
		if (poll(pfd, n, -1) < 0 && errno != EINTR)
			ca_err_die_sys(CA_EXIT_SYSTEM, "poll");
		char drain[64];
		while (read(wake[0], drain, sizeof drain) > 0)
			;
	}
	return nread;
}

static int run_all(const struct config *cfg, int nfiles, char **files)
{
	struct worker *workers = ca_xcalloc((size_t)cfg->jobs, sizeof *workers);
	void **contexts = ca_xcalloc((size_t)cfg->jobs, sizeof *contexts);
	char dir[PATH_MAX];
	for (long k = 0; k < cfg->jobs; k++) {
		worker_dir(cfg, k, dir, sizeof dir);
		if (ca_paths_mkdirs(dir, 0755) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "%s", dir);
		workers[k] = (struct worker){cfg, k, 0};
		contexts[k] = &workers[k];
	}
	struct output out = {cfg, 0};
	struct ca_pool_config pc = {
		.workers = (int)cfg->jobs, .contexts = contexts, .work = run_slot, .release = emit,
		.release_ctx = &out, .changed = pool_changed, .ahead = 0, .max_pending = cfg->jobs + MAX_WAITING,
	};
	struct ca_pool *pool = ca_pool_start(&pc);
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	long nread = read_tasks(pool, r);
	if (stop_signal || write_failed)
		stop_all(workers, cfg->jobs);
	int status = ca_err_worst(ca_pool_finish(pool), ca_ndjson_status(r));
	ca_ndjson_close(r);
	if (stop_signal) {
		ca_err_warn("stopped by signal %d; %ld of the %ld records read were written", (int)stop_signal,
			out.written, nread);
		status = 128 + stop_signal;
	} else if (!write_failed) {
		ca_ndjson_progress_done();
	}
	for (long k = 0; k < cfg->jobs && !cfg->keep; k++) {
		worker_dir(cfg, k, dir, sizeof dir);
		rmdir(dir);
	}
	free(workers);
	free(contexts);
	return status;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"build-cmd", required_argument, NULL, 'B'},
		{"command-time", required_argument, NULL, 'C'},
		{"eval-time", required_argument, NULL, 'E'},
		{"help", no_argument, NULL, 'h'},
		{"jobs", required_argument, NULL, 'j'},
		{"keep", no_argument, NULL, 'k'},
		{"max-context", required_argument, NULL, 'X'},
		{"max-invalid", required_argument, NULL, 'I'},
		{"max-output", required_argument, NULL, 'O'},
		{"max-time", required_argument, NULL, 'T'},
		{"max-turns", required_argument, NULL, 'N'},
		{"policy", required_argument, NULL, 'p'},
		{"policy-time", required_argument, NULL, 'Q'},
		{"profile-cmd", required_argument, NULL, 'R'},
		{"progress", no_argument, NULL, 'P'},
		{"sandbox", required_argument, NULL, 'S'},
		{"skill", required_argument, NULL, 's'},
		{"unbuffered", no_argument, NULL, 'u'},
		{"unconfined", no_argument, NULL, 'U'},
		{"verify-cmd", required_argument, NULL, 'V'},
		{"workdir", required_argument, NULL, 'w'},
		{NULL, 0, NULL, 0},
	};
	struct config cfg = {
		.command_time = 300, .eval_time = 900, .max_time = 7200, .policy_time = 900,
		.max_turns = 150, .max_context = 131072, .max_invalid = 5, .max_output = 30000, .jobs = 1,
	};
	char skill_default[PATH_MAX + 32];
	int c;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hj:u", longopts, NULL)) != -1) {
		switch (c) {
		case 'B': cfg.build_cmd = optarg; break;
		case 'C': cfg.command_time = ca_opt_double("--command-time", optarg, 1, 86400); break;
		case 'E': cfg.eval_time = ca_opt_double("--eval-time", optarg, 1, 86400); break;
		case 'j': cfg.jobs = ca_opt_long("-j", optarg, 1, 4096); break;
		case 'k': cfg.keep = 1; break;
		case 'X': cfg.max_context = ca_opt_long("--max-context", optarg, 0, 1LL << 40); break;
		case 'I': cfg.max_invalid = ca_opt_long("--max-invalid", optarg, 1, 1000000); break;
		case 'O': cfg.max_output = ca_opt_long("--max-output", optarg, 1000, 1 << 24); break;
		case 'T': cfg.max_time = ca_opt_double("--max-time", optarg, 0, 1e9); break;
		case 'N': cfg.max_turns = ca_opt_long("--max-turns", optarg, 1, 1000000); break;
		case 'p': cfg.policy = optarg; break;
		case 'Q': cfg.policy_time = ca_opt_double("--policy-time", optarg, 1, 86400); break;
		case 'R': cfg.profile_cmd = optarg; break;
		case 'S': cfg.sandbox = optarg; break;
		case 's': cfg.skill = optarg; break;
		case 'U': cfg.unconfined = 1; break;
		case 'V': cfg.verify_cmd = optarg; break;
		case 'w': cfg.workdir = optarg; break;
		default: ca_opt_common(c, usage_text);
		}
	}
	if (!cfg.policy) {
		ca_err_warn("--policy CMD is required");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	if (!cfg.build_cmd)
		cfg.build_cmd = helper("ca-build");
	if (!cfg.verify_cmd)
		cfg.verify_cmd = helper("ca-verify");
	if (!cfg.profile_cmd)
		cfg.profile_cmd = helper("ca-profile");
	if (!cfg.skill) {
		snprintf(skill_default, sizeof skill_default, "%s/skills/cuda", ca_paths_share());
		cfg.skill = skill_default;
	}
	if (cfg.unconfined) {
		cfg.sandbox = NULL;
	} else {
		if (!cfg.sandbox)
			cfg.sandbox = helper("ca-sandbox");
		if (!program_exists(cfg.sandbox))
			ca_err_die(CA_EXIT_SYSTEM, "%s not found: build ca-sandbox, name it with --sandbox, "
				"or run without confinement with --unconfined", cfg.sandbox);
	}
	char root[PATH_MAX];
	int made_root = 0;
	if (cfg.workdir) {
		if (ca_paths_mkdirs(cfg.workdir, 0755) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "%s", cfg.workdir);
		if (!realpath(cfg.workdir, root))
			ca_err_die_sys(CA_EXIT_SYSTEM, "%s", cfg.workdir);
	} else {
		const char *tmp = getenv("TMPDIR");
		snprintf(root, sizeof root, "%s/ca-agent.XXXXXX", tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(root))
			ca_err_die_sys(CA_EXIT_SYSTEM, "%s", root);
		made_root = 1;
		chmod(root, 0755);
	}
	cfg.root = root;
	if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "pipe");
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_flags = SA_RESTART;      /* stdout's writes go on; poll returns all the same */
	sa.sa_handler = note_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	int status = run_all(&cfg, argc - optind, argv + optind);
	if (made_root && !cfg.keep)
		ca_file_remove_tree(root);
	else if (cfg.keep)
		ca_err_warn("workspaces kept under %s", root);
	return write_failed ? CA_EXIT_SYSTEM : ca_err_finish(status);
}
