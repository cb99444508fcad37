/* tools: see tools.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <fnmatch.h>

#include "err.h"
#include "file.h"
#include "json.h"
#include "opt.h"
#include "paths.h"
#include "proc.h"
#include "tools.h"

enum {
	MAX_FILE_BYTES = 8 << 20,   /* read/edit/grep refuse larger files */
	MAX_CAPTURE = 8 << 20,      /* of a bash command's output, head and tail (or twice --max-output) */
	MAX_GLOB_RESULTS = 500,
	MAX_WALK_ENTRIES = 100000,
	MAX_WALK_DEPTH = 32,
	DEFAULT_READ_LINES = 2000,
	MAX_LINE_SHOWN = 2000,
};

struct job {
	int id;
	struct ca_proc proc;
	const char **argv_storage;
	char *log_path;
	char *owned[4];            /* argv strings the job keeps alive */
	off_t offset;
	int finished;
	int status;
	double started;
};

struct ca_tools {
	char ws[PATH_MAX];
	size_t wslen;
	char *state_dir;
	char **protected;          /* absolute paths */
	size_t nprotected;
	char **hide;
	size_t nhide;
	const char *const *sandbox;
	double command_time_s, job_time_s;
	size_t max_output;
	char **read_set;
	size_t nread, capread;
	char *cwd, *env;           /* shell session state */
	const char *shell;
	struct job **jobs;
	size_t njobs;
	unsigned long nonce_counter;
};

/* A growing string. */
struct sb {
	char *d;
	size_t len, cap;
};

static void sb_add(struct sb *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n + 1)
			cap *= 2;
		b->d = ca_xrealloc(b->d, cap);
		b->cap = cap;
	}
	memcpy(b->d + b->len, s, n);
	b->len += n;
	b->d[b->len] = '\0';
}

static void sb_puts(struct sb *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_vprintf(struct sb *b, const char *fmt, va_list ap)
{
	va_list again;
	va_copy(again, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	if (n >= 0) {
		char *tmp = ca_xmalloc((size_t)n + 1);
		vsnprintf(tmp, (size_t)n + 1, fmt, again);
		sb_add(b, tmp, (size_t)n);
		free(tmp);
	}
	va_end(again);
}

__attribute__((format(printf, 2, 3)))
static void sb_printf(struct sb *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	sb_vprintf(b, fmt, ap);
	va_end(ap);
}

static char *sb_take(struct sb *b)
{
	if (!b->d)
		return ca_xstrdup("");
	return b->d;
}

/*
 * An error observation, "error: " and the message, with *is_error set to
 * its kind: fail for a call that failed (CA_TOOLS_FAILED), invalid for a
 * call that broke the tool's schema (CA_TOOLS_INVALID).
 */
__attribute__((format(printf, 3, 4)))
static char *error_observation(int *is_error, int kind, const char *fmt, ...)
{
	struct sb b = {0};
	sb_puts(&b, "error: ");
	va_list ap;
	va_start(ap, fmt);
	sb_vprintf(&b, fmt, ap);
	va_end(ap);
	*is_error = kind;
	return sb_take(&b);
}
#define fail(is_error, ...) error_observation(is_error, CA_TOOLS_FAILED, __VA_ARGS__)
#define invalid(is_error, ...) error_observation(is_error, CA_TOOLS_INVALID, __VA_ARGS__)

/*
 * Shorten an output of which text[0, len) is what we hold: gap bytes that
 * came after text[0, gap_at) were not kept (a capture keeping its head and
 * its tail). Keep the head and the tail: compiler errors come first,
 * summaries last.
 */
static char *shorten(const char *text, size_t len, size_t gap_at, size_t gap, size_t max)
{
	if (gap == 0 && len <= max) {
		char *copy = ca_xmalloc(len + 1);
		memcpy(copy, text, len);
		copy[len] = '\0';
		return copy;
	}
	if (gap == 0)
		gap_at = len;
	size_t head = max * 2 / 3;
	if (head > gap_at)
		head = gap_at;
	size_t tail = max - head;
	if (tail > len - head)
		tail = len - head;
	if (gap > 0 && tail > len - gap_at)
		tail = len - gap_at;
	struct sb b = {0};
	sb_add(&b, text, head);
	sb_printf(&b, "\n[... %zu bytes of output omitted ...]\n", len + gap - head - tail);
	sb_add(&b, text + len - tail, tail);
	return sb_take(&b);
}

char *ca_tools_truncate(const char *text, size_t len, size_t max)
{
	return shorten(text, len, len, 0, max);
}

char *ca_tools_truncate_buf(const struct ca_buf *buf, size_t len, const char *more, size_t max)
{
	size_t gap_at = buf->keep_tail && buf->dropped_at < len ? buf->dropped_at : len;
	struct sb b = {0};
	sb_add(&b, buf->data ? buf->data : "", len);
	sb_puts(&b, more ? more : "");
	char *r = shorten(b.d, b.len, gap_at, buf->dropped, max);
	free(b.d);
	return r;
}

/* ---- paths ---- */

static int inside(const struct ca_tools *t, const char *abs)
{
	return strcmp(abs, t->ws) == 0 || (strncmp(abs, t->ws, t->wslen) == 0 && abs[t->wslen] == '/');
}

static const char *relative(const struct ca_tools *t, const char *abs)
{
	if (strcmp(abs, t->ws) == 0)
		return ".";
	return abs + t->wslen + 1;
}

/*
 * Resolve path (relative to the workspace, or absolute) following every
 * symlink that exists; missing trailing components are appended as they
 * are. Returns 0 with out set, or -1 with *why.
 */
static int resolve(const struct ca_tools *t, const char *path, char out[PATH_MAX], const char **why)
{
	char buf[PATH_MAX];
	if (!path || !*path) {
		*why = "empty path";
		return -1;
	}
	if (strlen(path) >= PATH_MAX - t->wslen - 2) {
		*why = "path too long";
		return -1;
	}
	if (path[0] == '/')
		snprintf(buf, sizeof buf, "%s", path);
	else
		snprintf(buf, sizeof buf, "%s/%s", t->ws, path);
	size_t n = strlen(buf);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	char real[PATH_MAX];
	if (realpath(buf, real)) {
		snprintf(out, PATH_MAX, "%s", real);
	} else {
		if (errno != ENOENT) {
			*why = strerror(errno);
			return -1;
		}
		char probe[PATH_MAX];
		snprintf(probe, sizeof probe, "%s", buf);
		for (;;) {
			char *slash = strrchr(probe, '/');
			if (!slash) {
				*why = "cannot resolve path";
				return -1;
			}
			const char *component = slash + 1;
			if (strcmp(component, ".") == 0 || strcmp(component, "..") == 0) {
				*why = "path has . or .. below a missing directory";
				return -1;
			}
			*slash = '\0';
			const char *parent = probe[0] ? probe : "/";
			if (realpath(parent, real)) {
				const char *rest = buf + (slash - probe) + 1;
				if (strstr(rest, "/../") || strstr(rest, "/./")) {
					*why = "path has . or .. below a missing directory";
					return -1;
				}
				if (snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", rest) >= PATH_MAX) {
					*why = "path too long";
					return -1;
				}
				break;
			}
			if (errno != ENOENT) {
				*why = strerror(errno);
				return -1;
			}
		}
	}
	if (!inside(t, out)) {
		*why = "path is outside the workspace";
		return -1;
	}
	return 0;
}

static int is_protected(const struct ca_tools *t, const char *abs)
{
	for (size_t i = 0; i < t->nprotected; i++)
		if (strcmp(t->protected[i], abs) == 0)
			return 1;
	return 0;
}

static int was_read(const struct ca_tools *t, const char *abs)
{
	for (size_t i = 0; i < t->nread; i++)
		if (strcmp(t->read_set[i], abs) == 0)
			return 1;
	return 0;
}

static void mark_read(struct ca_tools *t, const char *abs)
{
	if (was_read(t, abs))
		return;
	if (t->nread == t->capread) {
		t->capread = t->capread ? 2 * t->capread : 16;
		t->read_set = ca_xrealloc(t->read_set, t->capread * sizeof *t->read_set);
	}
	t->read_set[t->nread++] = ca_xstrdup(abs);
}

/*
 * Open abs, a path inside the workspace already resolved by resolve(),
 * one component at a time from the workspace with O_NOFOLLOW: a symbolic
 * link swapped in after resolve() (by a background command, say) makes the
 * open fail instead of leading outside. With make_dirs, missing
 * directories on the way are created.
 */
static int open_in_workspace(const struct ca_tools *t, const char *abs, int flags, mode_t mode, int make_dirs)
{
	if (!inside(t, abs)) {
		errno = EXDEV;
		return -1;
	}
	int dirfd = open(t->ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -1;
	if (strcmp(abs, t->ws) == 0) {
		if ((flags & O_ACCMODE) == O_RDONLY && !(flags & O_CREAT))
			return dirfd;
		close(dirfd);
		errno = EISDIR;
		return -1;
	}
	char rel[PATH_MAX];
	snprintf(rel, sizeof rel, "%s", abs + t->wslen + 1);
	char *component = rel, *slash;
	while ((slash = strchr(component, '/'))) {
		*slash = '\0';
		if (make_dirs && mkdirat(dirfd, component, 0755) != 0 && errno != EEXIST) {
			int e = errno;
			close(dirfd);
			errno = e;
			return -1;
		}
		int next = openat(dirfd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(dirfd);
		if (next < 0) {
			errno = e;
			return -1;
		}
		dirfd = next;
		component = slash + 1;
	}
	int fd = openat(dirfd, component, flags | O_NOFOLLOW | O_CLOEXEC, mode);
	int e = errno;
	close(dirfd);
	errno = e;
	return fd;
}

static const char *open_error(int e)
{
	return e == ELOOP || e == ENOTDIR ? "a symbolic link is in the way" : strerror(e);
}

/* Read a whole regular file inside the workspace; NULL with *why. */
static char *slurp(const struct ca_tools *t, const char *abs, size_t *len, const char **why)
{
	int fd = open_in_workspace(t, abs, O_RDONLY, 0, 0);
	if (fd < 0) {
		*why = open_error(errno);
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		*why = S_ISDIR(st.st_mode) ? "is a directory (use glob to list it)" : "not a regular file";
		return NULL;
	}
	if (st.st_size > MAX_FILE_BYTES) {
		close(fd);
		*why = "file too large (over 8 MiB)";
		return NULL;
	}
	char *data = ca_xmalloc((size_t)st.st_size + 1);
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, data + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	data[got] = '\0';
	*len = got;
	return data;
}

static int write_file(const struct ca_tools *t, const char *abs, const char *data, size_t len, const char **why)
{
	int fd = open_in_workspace(t, abs, O_WRONLY | O_CREAT | O_TRUNC, 0644, 1);
	if (fd < 0) {
		*why = open_error(errno);
		return -1;
	}
	if (ca_file_write_fd(fd, data, len) != 0) {
		*why = strerror(errno);
		close(fd);
		return -1;
	}
	if (close(fd) != 0) {
		*why = strerror(errno);
		return -1;
	}
	return 0;
}

static int binary(const char *data, size_t len)
{
	return memchr(data, '\0', len < 8192 ? len : 8192) != NULL;
}

/* ---- arguments ---- */

static const char *arg_string(jv args, const char *key)
{
	jv v = jv_object_has(jv_copy(args), jv_string(key)) ? jv_object_get(jv_copy(args), jv_string(key)) : jv_invalid();
	const char *s = NULL;
	if (jv_get_kind(v) == JV_KIND_STRING)
		s = jv_string_value(v);   /* stays valid: args holds a reference */
	jv_free(v);
	return s;
}

/* 1 and *out when key holds a number (or a numeric string); 0 absent; -1 wrong type. */
static int arg_number(jv args, const char *key, double *out)
{
	jv v = jv_object_has(jv_copy(args), jv_string(key)) ? jv_object_get(jv_copy(args), jv_string(key)) : jv_invalid();
	int r = 0;
	if (jv_get_kind(v) == JV_KIND_NUMBER) {
		*out = jv_number_value(v);
		r = 1;
	} else if (jv_get_kind(v) == JV_KIND_STRING) {
		const char *why;
		r = ca_parse_double(jv_string_value(v), out, &why) == 0 ? 1 : -1;
	} else if (jv_is_valid(v) && jv_get_kind(v) != JV_KIND_NULL) {
		r = -1;
	}
	jv_free(v);
	return r;
}

/* 1 true; 0 false, absent or null; -1 any other type (no strings: "false" would read as true). */
static int arg_bool(jv args, const char *key)
{
	jv v = jv_object_has(jv_copy(args), jv_string(key)) ? jv_object_get(jv_copy(args), jv_string(key)) : jv_invalid();
	int r = jv_get_kind(v) == JV_KIND_TRUE ? 1
		: !jv_is_valid(v) || jv_get_kind(v) == JV_KIND_FALSE || jv_get_kind(v) == JV_KIND_NULL ? 0 : -1;
	jv_free(v);
	return r;
}

/* 1 when the optional string argument key is given (not null) as something else than a string. */
static int mistyped_string(jv args, const char *key)
{
	jv v = jv_object_has(jv_copy(args), jv_string(key)) ? jv_object_get(jv_copy(args), jv_string(key)) : jv_null();
	int r = jv_get_kind(v) != JV_KIND_NULL && jv_get_kind(v) != JV_KIND_STRING;
	jv_free(v);
	return r;
}

/* ---- read, write, edit, multiedit ---- */

static char *tool_read(struct ca_tools *t, jv args, int *is_error)
{
	const char *path = arg_string(args, "path"), *why;
	if (!path)
		return invalid(is_error, "read needs a string argument \"path\"");
	double offset = 1, limit = DEFAULT_READ_LINES;
	if (arg_number(args, "offset", &offset) < 0 || arg_number(args, "limit", &limit) < 0)
		return invalid(is_error, "read: offset and limit must be numbers");
	if (offset < 1)
		offset = 1;
	if (limit < 1)
		limit = 1;
	char abs[PATH_MAX];
	if (resolve(t, path, abs, &why) != 0)
		return fail(is_error, "read %s: %s", path, why);
	size_t len;
	char *data = slurp(t, abs, &len, &why);
	if (!data)
		return fail(is_error, "read %s: %s", relative(t, abs), why);
	if (binary(data, len)) {
		free(data);
		return fail(is_error, "read %s: binary file", relative(t, abs));
	}
	mark_read(t, abs);
	struct sb b = {0};
	if (len == 0)
		sb_printf(&b, "(%s is empty)\n", relative(t, abs));
	long line = 1, shown = 0;
	const char *p = data, *end = data + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (line >= (long)offset && shown < (long)limit) {
			sb_printf(&b, "%6ld\t", line);
			sb_add(&b, p, n > MAX_LINE_SHOWN ? MAX_LINE_SHOWN : n);
			if (n > MAX_LINE_SHOWN)
				sb_puts(&b, " [line truncated]");
			sb_puts(&b, "\n");
			shown++;
		}
		line++;
		p = nl ? nl + 1 : end;
	}
	long total = line - 1;
	if (shown == 0 && len > 0)
		sb_printf(&b, "(no lines at offset %ld: the file has %ld lines)\n", (long)offset, total);
	else if ((long)offset + shown - 1 < total)
		sb_printf(&b, "(showing lines %ld-%ld of %ld; use offset and limit for more)\n",
			(long)offset, (long)offset + shown - 1, total);
	free(data);
	char *r = ca_tools_truncate(b.d ? b.d : "", b.len, t->max_output);
	free(b.d);
	return r;
}

static char *tool_write(struct ca_tools *t, jv args, int *is_error)
{
	const char *path = arg_string(args, "path"), *content = NULL, *why;
	jv c = jv_object_has(jv_copy(args), jv_string("content")) ? jv_object_get(jv_copy(args), jv_string("content")) : jv_invalid();
	size_t clen = 0;
	if (jv_get_kind(c) == JV_KIND_STRING) {
		content = jv_string_value(c);
		clen = (size_t)jv_string_length_bytes(jv_copy(c));
	}
	jv_free(c);
	if (!path || !content)
		return invalid(is_error, "write needs string arguments \"path\" and \"content\"");
	char abs[PATH_MAX];
	if (resolve(t, path, abs, &why) != 0)
		return fail(is_error, "write %s: %s", path, why);
	if (is_protected(t, abs))
		return fail(is_error, "write %s: this evaluation file is read-only", relative(t, abs));
	struct stat st;
	int exists = lstat(abs, &st) == 0;
	if (exists && S_ISDIR(st.st_mode))
		return fail(is_error, "write %s: is a directory", relative(t, abs));
	if (exists && !was_read(t, abs))
		return fail(is_error, "write %s: the file exists and has not been read; read it first, then write",
			relative(t, abs));
	if (write_file(t, abs, content, clen, &why) != 0)
		return fail(is_error, "write %s: %s", relative(t, abs), why);
	mark_read(t, abs);
	struct sb b = {0};
	sb_printf(&b, "%s %s (%zu bytes)", exists ? "overwrote" : "created", relative(t, abs), clen);
	return sb_take(&b);
}

/* Count non-overlapping occurrences of needle. */
static size_t count_occurrences(const char *hay, const char *needle)
{
	size_t n = 0, nl = strlen(needle);
	for (const char *p = hay; (p = strstr(p, needle)); p += nl)
		n++;
	return n;
}

/* Replace in *text (malloc'd); returns NULL on success or a message (static or into msg). */
static const char *replace(char **text, const char *old, const char *new, int all, char *msg, size_t msglen)
{
	if (!*old)
		return "old_string is empty";
	if (strcmp(old, new) == 0)
		return "old_string and new_string are the same";
	size_t n = count_occurrences(*text, old);
	if (n == 0)
		return "old_string not found in the file (it must match exactly, whitespace included)";
	if (n > 1 && !all) {
		snprintf(msg, msglen, "old_string occurs %zu times; give more context to make it unique, or set replace_all", n);
		return msg;
	}
	struct sb b = {0};
	size_t ol = strlen(old);
	const char *p = *text, *hit;
	while ((hit = strstr(p, old))) {
		sb_add(&b, p, (size_t)(hit - p));
		sb_puts(&b, new);
		p = hit + ol;
		if (!all)
			break;
	}
	sb_puts(&b, p);
	free(*text);
	*text = sb_take(&b);
	return NULL;
}

/* Shared start of edit and multiedit: resolve, check, load. */
static char *load_for_edit(struct ca_tools *t, const char *tool, const char *path, char abs[PATH_MAX],
	int *is_error, char **error)
{
	const char *why;
	size_t len;
	*error = NULL;
	if (resolve(t, path, abs, &why) != 0) {
		*error = fail(is_error, "%s %s: %s", tool, path, why);
		return NULL;
	}
	if (is_protected(t, abs)) {
		*error = fail(is_error, "%s %s: this evaluation file is read-only", tool, relative(t, abs));
		return NULL;
	}
	char *data = slurp(t, abs, &len, &why);
	if (!data) {
		*error = fail(is_error, "%s %s: %s", tool, relative(t, abs), why);
		return NULL;
	}
	if (!was_read(t, abs)) {
		free(data);
		*error = fail(is_error, "%s %s: the file has not been read; read it first", tool, relative(t, abs));
		return NULL;
	}
	if (strlen(data) != len) {
		free(data);
		*error = fail(is_error, "%s %s: binary file", tool, relative(t, abs));
		return NULL;
	}
	return data;
}

static char *tool_edit(struct ca_tools *t, jv args, int *is_error)
{
	const char *path = arg_string(args, "path"), *old = arg_string(args, "old_string"),
		*new = arg_string(args, "new_string"), *why;
	if (!path || !old || !new)
		return invalid(is_error, "edit needs string arguments \"path\", \"old_string\" and \"new_string\"");
	int all = arg_bool(args, "replace_all");
	if (all < 0)
		return invalid(is_error, "edit: replace_all must be true or false");
	char abs[PATH_MAX], msg[160], *error;
	char *text = load_for_edit(t, "edit", path, abs, is_error, &error);
	if (!text)
		return error;
	size_t before = count_occurrences(text, old);
	const char *problem = replace(&text, old, new, all, msg, sizeof msg);
	if (problem) {
		free(text);
		return fail(is_error, "edit %s: %s", relative(t, abs), problem);
	}
	if (write_file(t, abs, text, strlen(text), &why) != 0) {
		free(text);
		return fail(is_error, "edit %s: %s", relative(t, abs), why);
	}
	free(text);
	struct sb b = {0};
	sb_printf(&b, "edited %s: %zu replacement%s", relative(t, abs),
		all ? before : 1, (all && before != 1) ? "s" : "");
	return sb_take(&b);
}

static char *tool_multiedit(struct ca_tools *t, jv args, int *is_error)
{
	const char *path = arg_string(args, "path"), *why;
	jv edits = jv_object_has(jv_copy(args), jv_string("edits")) ? jv_object_get(jv_copy(args), jv_string("edits")) : jv_invalid();
	if (!path || jv_get_kind(edits) != JV_KIND_ARRAY || jv_array_length(jv_copy(edits)) == 0) {
		jv_free(edits);
		return invalid(is_error, "multiedit needs \"path\" and a non-empty array \"edits\" of {old_string, new_string[, replace_all]}");
	}
	int n = jv_array_length(jv_copy(edits));
	for (int i = 0; i < n; i++) {
		jv e = jv_array_get(jv_copy(edits), i);
		int ok = jv_get_kind(e) == JV_KIND_OBJECT && arg_string(e, "old_string") && arg_string(e, "new_string")
			&& arg_bool(e, "replace_all") >= 0;
		jv_free(e);
		if (!ok) {
			jv_free(edits);
			return invalid(is_error, "multiedit: edit %d of %d needs string fields old_string and new_string "
				"(and replace_all true or false); no edit was applied", i + 1, n);
		}
	}
	char abs[PATH_MAX], msg[160], *error;
	char *text = load_for_edit(t, "multiedit", path, abs, is_error, &error);
	if (!text) {
		jv_free(edits);
		return error;
	}
	for (int i = 0; i < n; i++) {
		jv e = jv_array_get(jv_copy(edits), i);
		const char *problem = replace(&text, arg_string(e, "old_string"), arg_string(e, "new_string"),
			arg_bool(e, "replace_all"), msg, sizeof msg);
		jv_free(e);
		if (problem) {
			free(text);
			jv_free(edits);
			return fail(is_error, "multiedit %s: edit %d of %d: %s; no edit was applied",
				relative(t, abs), i + 1, n, problem);
		}
	}
	jv_free(edits);
	if (write_file(t, abs, text, strlen(text), &why) != 0) {
		free(text);
		return fail(is_error, "multiedit %s: %s", relative(t, abs), why);
	}
	free(text);
	struct sb b = {0};
	sb_printf(&b, "applied %d edit%s to %s", n, n == 1 ? "" : "s", relative(t, abs));
	return sb_take(&b);
}

/* ---- glob and grep ---- */

/* Match path segments against pattern segments; "**" matches any number of segments. */
static int match_segments(char **pat, int np, char **seg, int ns)
{
	if (np == 0)
		return ns == 0;
	if (strcmp(pat[0], "**") == 0) {
		for (int skip = 0; skip <= ns; skip++)
			if (match_segments(pat + 1, np - 1, seg + skip, ns - skip))
				return 1;
		return 0;
	}
	if (ns == 0)
		return 0;
	if (fnmatch(pat[0], seg[0], 0) != 0)
		return 0;
	return match_segments(pat + 1, np - 1, seg + 1, ns - 1);
}

static int split_path(char *s, char **parts, int max)
{
	int n = 0;
	for (char *tok = strtok(s, "/"); tok && n < max; tok = strtok(NULL, "/"))
		parts[n++] = tok;
	return n;
}

static int path_matches(const char *pattern, const char *rel)
{
	char pbuf[PATH_MAX], rbuf[PATH_MAX];
	char *pp[64], *rp[64];
	snprintf(pbuf, sizeof pbuf, "%s", pattern);
	snprintf(rbuf, sizeof rbuf, "%s", rel);
	int np = split_path(pbuf, pp, 64), nr = split_path(rbuf, rp, 64);
	return match_segments(pp, np, rp, nr);
}

struct walk {
	char **files;     /* absolute paths of regular files */
	size_t n, cap;
	size_t visited;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Collect regular files under dir (symlinks are not followed). */
static void walk_tree(const char *dir, int depth, struct walk *w)
{
	if (depth > MAX_WALK_DEPTH || w->visited > MAX_WALK_ENTRIES)
		return;
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)) && w->visited <= MAX_WALK_ENTRIES) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		w->visited++;
		char path[PATH_MAX];
		if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path)
			continue;
		struct stat st;
		if (lstat(path, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			walk_tree(path, depth + 1, w);
		} else if (S_ISREG(st.st_mode)) {
			if (w->n == w->cap) {
				w->cap = w->cap ? 2 * w->cap : 64;
				w->files = ca_xrealloc(w->files, w->cap * sizeof *w->files);
			}
			w->files[w->n++] = ca_xstrdup(path);
		}
	}
	closedir(d);
}

static void walk_free(struct walk *w)
{
	ca_free_strings(w->files, w->n);
}

static char *tool_glob(struct ca_tools *t, jv args, int *is_error)
{
	const char *pattern = arg_string(args, "pattern"), *path = arg_string(args, "path"), *why;
	if (!pattern || !*pattern || mistyped_string(args, "path"))
		return invalid(is_error, "glob needs a string argument \"pattern\" (for example \"**/*.cu\") "
			"and an optional string \"path\"");
	if (pattern[0] == '/')
		return fail(is_error, "glob: the pattern must be relative (use path to pick a directory)");
	char base[PATH_MAX];
	if (resolve(t, path ? path : ".", base, &why) != 0)
		return fail(is_error, "glob %s: %s", path ? path : ".", why);
	struct stat st;
	if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode))
		return fail(is_error, "glob: %s is not a directory", relative(t, base));
	struct walk w = {0};
	walk_tree(base, 0, &w);
	if (w.n > 1)
		qsort(w.files, w.n, sizeof *w.files, cmp_str);
	struct sb b = {0};
	size_t hits = 0, baselen = strlen(base);
	for (size_t i = 0; i < w.n; i++) {
		if (!path_matches(pattern, w.files[i] + baselen + 1))
			continue;
		if (++hits <= MAX_GLOB_RESULTS)
			sb_printf(&b, "%s\n", relative(t, w.files[i]));
	}
	walk_free(&w);
	if (hits == 0)
		sb_printf(&b, "no files match %s", pattern);
	else if (hits > MAX_GLOB_RESULTS)
		sb_printf(&b, "(%zu more not shown)", hits - MAX_GLOB_RESULTS);
	else
		b.d[--b.len] = '\0';
	char *r = ca_tools_truncate(b.d, b.len, t->max_output);
	free(b.d);
	return r;
}

static void grep_file(const struct ca_tools *t, const char *abs, regex_t *re, long context, const char *mode,
	struct sb *b, size_t *matched_files, size_t limit)
{
	size_t len;
	const char *why;
	char *data = slurp(t, abs, &len, &why);
	if (!data || binary(data, len)) {
		free(data);
		return;
	}
	/* Split into lines in place. */
	size_t nlines = 0, cap = 64;
	char **lines = ca_xmalloc(cap * sizeof *lines);
	for (char *p = data; p < data + len;) {
		char *nl = memchr(p, '\n', (size_t)(data + len - p));
		if (nl)
			*nl = '\0';
		if (nlines == cap) {
			cap *= 2;
			lines = ca_xrealloc(lines, cap * sizeof *lines);
		}
		lines[nlines++] = p;
		p = nl ? nl + 1 : data + len;
	}
	char *hit = ca_xcalloc(nlines + 1, 1);
	size_t count = 0;
	for (size_t i = 0; i < nlines; i++)
		if (regexec(re, lines[i], 0, NULL, 0) == 0) {
			hit[i] = 1;
			count++;
		}
	if (count > 0) {
		(*matched_files)++;
		const char *rel = relative(t, abs);
		if (strcmp(mode, "files_with_matches") == 0) {
			sb_printf(b, "%s\n", rel);
		} else if (strcmp(mode, "count") == 0) {
			sb_printf(b, "%s:%zu\n", rel, count);
		} else {
			long last = -2;
			for (size_t i = 0; i < nlines && b->len < limit; i++) {
				long lo = (long)i - context, hi = (long)i + context, show = 0;
				for (long k = lo < 0 ? 0 : lo; k <= hi && k < (long)nlines; k++)
					if (hit[k]) {
						show = 1;
						break;
					}
				if (!show)
					continue;
				if (last >= 0 && (long)i != last + 1)
					sb_puts(b, "--\n");
				const char *line = lines[i];
				size_t n = strlen(line);
				sb_printf(b, "%s%c%zu%c", rel, hit[i] ? ':' : '-', i + 1, hit[i] ? ':' : '-');
				sb_add(b, line, n > MAX_LINE_SHOWN ? MAX_LINE_SHOWN : n);
				sb_puts(b, "\n");
				last = (long)i;
			}
		}
	}
	free(hit);
	free(lines);
	free(data);
}

static char *tool_grep(struct ca_tools *t, jv args, int *is_error)
{
	const char *pattern = arg_string(args, "pattern"), *path = arg_string(args, "path"),
		*filter = arg_string(args, "glob"), *mode = arg_string(args, "output_mode"), *why;
	if (!pattern)
		return invalid(is_error, "grep needs a string argument \"pattern\" (an extended regular expression)");
	if (mistyped_string(args, "path") || mistyped_string(args, "glob"))
		return invalid(is_error, "grep: path and glob must be strings");
	if (mistyped_string(args, "output_mode"))
		mode = "";
	if (!mode)
		mode = "content";
	if (strcmp(mode, "content") && strcmp(mode, "files_with_matches") && strcmp(mode, "count"))
		return invalid(is_error, "grep: output_mode must be content, files_with_matches or count");
	double context = 0;
	if (arg_number(args, "context", &context) < 0 || context < 0 || context > 100)
		return invalid(is_error, "grep: context must be a number of lines from 0 to 100");
	int flags = REG_EXTENDED | REG_NOSUB, fold = arg_bool(args, "case_insensitive");
	if (fold < 0)
		return invalid(is_error, "grep: case_insensitive must be true or false");
	if (fold)
		flags |= REG_ICASE;
	regex_t re;
	int rc = regcomp(&re, pattern, flags);
	if (rc != 0) {
		char msg[256];
		regerror(rc, &re, msg, sizeof msg);
		return fail(is_error, "grep: bad regular expression: %s", msg);
	}
	char base[PATH_MAX];
	if (resolve(t, path ? path : ".", base, &why) != 0) {
		regfree(&re);
		return fail(is_error, "grep %s: %s", path ? path : ".", why);
	}
	struct walk w = {0};
	struct stat st;
	if (stat(base, &st) == 0 && S_ISDIR(st.st_mode)) {
		walk_tree(base, 0, &w);
		if (w.n > 1)
			qsort(w.files, w.n, sizeof *w.files, cmp_str);
	} else {
		w.files = ca_xmalloc(sizeof *w.files);
		w.files[w.n++] = ca_xstrdup(base);
	}
	struct sb b = {0};
	size_t matched = 0, limit = t->max_output * 2, baselen = strlen(base);
	for (size_t i = 0; i < w.n && b.len < limit; i++) {
		if (filter) {
			const char *rel = strlen(w.files[i]) > baselen ? w.files[i] + baselen + 1 : w.files[i];
			const char *name = strrchr(w.files[i], '/');
			name = name ? name + 1 : w.files[i];
			if (!path_matches(filter, strchr(filter, '/') ? rel : name))
				continue;
		}
		grep_file(t, w.files[i], &re, (long)context, mode, &b, &matched, limit);
	}
	walk_free(&w);
	regfree(&re);
	if (matched == 0)
		sb_puts(&b, "no matches");
	else if (b.len > 0 && b.d[b.len - 1] == '\n')
		b.d[--b.len] = '\0';
	char *r = ca_tools_truncate(b.d, b.len, t->max_output);
	free(b.d);
	return r;
}

/* ---- bash ---- */

/*
 * The session wrapper: $1 the command, $2 the directory and $3 the
 * exported variables left by the previous command, $4 a marker. Output
 * and errors of the command go to stdout; the new state goes to the
 * original stderr (fd 3) after the marker, whatever way the shell exits.
 */
static const char session_script[] =
	"exec 3>&2 2>&1\n"
	"cd -- \"$2\" 2>/dev/null\n"
	"eval \"$3\" 2>/dev/null\n"
	"__ca_marker=$4\n"
	"trap '__ca_status=$?; { printf \"%s\\n\" \"$__ca_marker\"; pwd; export -p; } >&3 2>/dev/null; exit $__ca_status' EXIT\n"
	"eval \"$1\"\n";

static const char background_script[] =
	"exec 2>&1\n"
	"cd -- \"$2\" 2>/dev/null\n"
	"eval \"$3\" 2>/dev/null\n"
	"eval \"$1\"\n";

/* Build the argv for one shell command (malloc'd; the strings must outlive it). */
static const char **shell_argv(const struct ca_tools *t, const char *script, const char *command,
	const char *marker, const char *time_text, const char *cwd, const char *env)
{
	size_t n = 0, prefix = 0;
	while (t->sandbox && t->sandbox[prefix])
		prefix++;
	const char **argv = ca_xcalloc(prefix + 2 * (t->nprotected + t->nhide) + 24, sizeof *argv);
	if (t->sandbox) {
		for (size_t i = 0; i < prefix; i++)
			argv[n++] = t->sandbox[i];
		argv[n++] = "--dir";
		argv[n++] = t->ws;
		argv[n++] = "--time";
		argv[n++] = time_text;
		for (size_t i = 0; i < t->nprotected; i++) {
			argv[n++] = "--ro";
			argv[n++] = t->protected[i];
		}
		for (size_t i = 0; i < t->nhide; i++) {
			argv[n++] = "--hide";
			argv[n++] = t->hide[i];
		}
		argv[n++] = "--";
	}
	argv[n++] = t->shell;
	argv[n++] = "-c";
	argv[n++] = script;
	argv[n++] = "ca-shell";
	argv[n++] = command;
	argv[n++] = cwd;
	argv[n++] = env;
	argv[n++] = marker;
	argv[n] = NULL;
	return argv;
}

static char *run_background(struct ca_tools *t, const char *command, int *is_error)
{
	struct job *job = ca_xcalloc(1, sizeof *job);
	job->id = (int)t->njobs + 1;
	struct sb logp = {0};
	sb_printf(&logp, "%s/job-%d.log", t->state_dir, job->id);
	job->log_path = sb_take(&logp);
	int fd = open(job->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		char *r = fail(is_error, "bash: cannot create a log for the background command: %s", strerror(errno));
		free(job->log_path);
		free(job);
		return r;
	}
	char time_text[32];
	snprintf(time_text, sizeof time_text, "%.0f", t->job_time_s);
	/* The argv strings must outlive this call: the job keeps copies. */
	job->owned[0] = ca_xstrdup(command);
	job->owned[1] = ca_xstrdup(time_text);
	job->owned[2] = ca_xstrdup(t->cwd ? t->cwd : t->ws);
	job->owned[3] = ca_xstrdup(t->env ? t->env : "");
	job->argv_storage = shell_argv(t, background_script, job->owned[0], "", job->owned[1],
		job->owned[2], job->owned[3]);
	ca_proc_init(&job->proc, job->argv_storage);
	job->proc.cwd = t->ws;
	job->proc.in_mode = CA_PROC_NULL;
	job->proc.out_mode = CA_PROC_FD;
	job->proc.out = fd;
	job->proc.err_mode = CA_PROC_TO_STDOUT;
	job->proc.die_with_parent = 1;
	if (ca_proc_start(&job->proc) != 0) {
		int e = errno;
		close(fd);
		free(job->log_path);
		for (int i = 0; i < 4; i++)
			free(job->owned[i]);
		free(job->argv_storage);
		free(job);
		return fail(is_error, "bash: cannot start the background command: %s", strerror(e));
	}
	close(fd);
	job->started = ca_proc_now();
	t->jobs = ca_xrealloc(t->jobs, (t->njobs + 1) * sizeof *t->jobs);
	t->jobs[t->njobs++] = job;
	struct sb b = {0};
	sb_printf(&b, "started background command %d; read its output with bash_output {\"id\": %d}, stop it with kill_bash {\"id\": %d}",
		job->id, job->id, job->id);
	return sb_take(&b);
}

static char *tool_bash(struct ca_tools *t, jv args, int *is_error)
{
	const char *command = arg_string(args, "command");
	if (!command || !*command)
		return invalid(is_error, "bash needs a non-empty string argument \"command\"");
	int background = arg_bool(args, "run_in_background");
	double limit = t->command_time_s, asked;
	int r = arg_number(args, "timeout", &asked);
	if (background < 0)
		return invalid(is_error, "bash: run_in_background must be true or false");
	if (r < 0)
		return invalid(is_error, "bash: timeout must be a number of seconds");
	if (mistyped_string(args, "description"))
		return invalid(is_error, "bash: description must be a string");
	if (background)
		return run_background(t, command, is_error);
	if (r > 0 && asked > 0 && asked < limit)
		limit = asked;
	char marker[64], time_text[32];
	snprintf(marker, sizeof marker, "__ca_state_%ld_%lu_%ld", (long)getpid(), ++t->nonce_counter, (long)time(NULL));
	snprintf(time_text, sizeof time_text, "%.0f", limit < 1 ? 1 : limit);
	const char **argv = shell_argv(t, session_script, command, marker, time_text,
		t->cwd ? t->cwd : t->ws, t->env ? t->env : "");
	struct ca_proc p;
	ca_proc_init(&p, argv);
	p.cwd = t->ws;
	p.die_with_parent = 1;
	/* The sandbox enforces the limit; ours is the backstop. */
	p.timeout_s = t->sandbox ? limit + 10 : limit;
	/* The head and the real tail of any output, more of each than an observation shows. */
	struct ca_buf out = {.keep_tail = 1}, err = {0};
	size_t cap = 2 * t->max_output > MAX_CAPTURE ? 2 * t->max_output : MAX_CAPTURE;
	int status = ca_proc_capture(&p, NULL, 0, &out, &err, cap);
	if (status < 0) {
		int e = errno;
		char *r = fail(is_error, "bash: cannot start %s: %s", argv[0], strerror(e));
		ca_buf_free(&out);
		ca_buf_free(&err);
		free(argv);
		return r;
	}
	free(argv);
	/* New session state after the marker; anything before it came from the sandbox itself. */
	char *diag = NULL;
	if (err.data) {
		char *m = strstr(err.data, marker);
		if (m && (m == err.data || m[-1] == '\n')) {
			if (m > err.data)
				diag = strndup(err.data, (size_t)(m - err.data));
			char *line = strchr(m, '\n');
			if (line) {
				line++;
				char *nl = strchr(line, '\n');
				if (nl) {
					free(t->cwd);
					t->cwd = strndup(line, (size_t)(nl - line));
					free(t->env);
					t->env = ca_xstrdup(nl + 1);
				}
			}
		} else if (err.len) {
			diag = ca_xstrdup(err.data);
		}
	}
	struct sb b = {0};
	size_t len = out.len;
	while (len > 0 && out.data[len - 1] == '\n')
		len--;
	/* After the output: the sandbox's own diagnostics, then how the command ended. */
	if (diag && *diag)
		sb_printf(&b, "%s%s", len ? "\n" : "", diag);
	free(diag);
	int any = len > 0 || b.len > 0;
	if (p.timed_out || status == CA_PROC_TIMEOUT_STATUS)
		sb_printf(&b, "%s[the command ran past its %s s limit and was killed]", any ? "\n" : "", time_text);
	else if (status != 0)
		sb_printf(&b, "%s[exit status %d]", any ? "\n" : "", status);
	if (len == 0 && b.len == 0)
		sb_puts(&b, "(no output)");
	char *res = ca_tools_truncate_buf(&out, len, b.d, t->max_output);
	ca_buf_free(&out);
	ca_buf_free(&err);
	free(b.d);
	return res;
}

/* Read up to n bytes at offset; returns how many came. */
static size_t pread_all(int fd, char *into, size_t n, off_t offset)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(fd, into + got, n - got, offset + (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

static void job_poll(struct ca_tools *t, struct job *job)
{
	if (job->finished)
		return;
	if (ca_proc_wait_exit(&job->proc, 0) == 1) {
		job->status = ca_proc_finish(&job->proc);
		job->finished = 1;
	} else if (!t->sandbox && ca_proc_now() - job->started > t->job_time_s) {
		ca_proc_kill(&job->proc, SIGKILL);
		ca_proc_finish(&job->proc);
		job->status = CA_PROC_TIMEOUT_STATUS;
		job->finished = 1;
	}
}

/* The background command args name by its id, polled so that its state is current. */
static struct job *find_job(struct ca_tools *t, jv args, char **error, int *is_error)
{
	double id;
	int r = arg_number(args, "id", &id);
	if (r <= 0) {
		*error = invalid(is_error, "needs the numeric argument \"id\" of a background command");
		return NULL;
	}
	for (size_t i = 0; i < t->njobs; i++)
		if (t->jobs[i]->id == (int)id) {
			job_poll(t, t->jobs[i]);
			return t->jobs[i];
		}
	*error = fail(is_error, "no background command with id %d", (int)id);
	return NULL;
}

static char *tool_bash_output(struct ca_tools *t, jv args, int *is_error)
{
	char *error;
	struct job *job = find_job(t, args, &error, is_error);
	if (!job)
		return error;
	/* The new output's head and its real tail, however much came. */
	struct ca_buf news = {.keep_tail = 1};
	int fd = open(job->log_path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > job->offset) {
		size_t size = (size_t)(st.st_size - job->offset), half = t->max_output;
		size_t head = size > 2 * half ? half : size, tail = size > 2 * half ? half : 0;
		news.data = ca_xmalloc(head + tail + 1);
		news.len = pread_all(fd, news.data, head, job->offset);
		if (tail > 0 && news.len == head) {
			news.len += pread_all(fd, news.data + head, tail, st.st_size - (off_t)tail);
			news.dropped = size - head - tail;
			news.dropped_at = head;
		}
		news.data[news.len] = '\0';
		job->offset = st.st_size;
	}
	if (fd >= 0)
		close(fd);
	char *shown = ca_tools_truncate_buf(&news, news.len, NULL, t->max_output);
	ca_buf_free(&news);
	struct sb r = {0};
	sb_puts(&r, shown[0] ? shown : "(no new output)");
	free(shown);
	if (job->finished)
		sb_printf(&r, "\n[background command %d finished with status %d]", job->id, job->status);
	else
		sb_printf(&r, "\n[background command %d is still running]", job->id);
	return sb_take(&r);
}

static char *tool_kill_bash(struct ca_tools *t, jv args, int *is_error)
{
	char *error;
	struct job *job = find_job(t, args, &error, is_error);
	if (!job)
		return error;
	struct sb b = {0};
	if (job->finished) {
		sb_printf(&b, "background command %d had already finished with status %d", job->id, job->status);
	} else {
		ca_proc_kill(&job->proc, SIGKILL);
		job->status = ca_proc_finish(&job->proc);
		job->finished = 1;
		sb_printf(&b, "killed background command %d", job->id);
	}
	return sb_take(&b);
}

/* ---- the table ---- */

static const struct {
	const char *name;
	char *(*fn)(struct ca_tools *, jv, int *);
} tool_table[] = {
	{"bash", tool_bash},
	{"bash_output", tool_bash_output},
	{"edit", tool_edit},
	{"glob", tool_glob},
	{"grep", tool_grep},
	{"kill_bash", tool_kill_bash},
	{"multiedit", tool_multiedit},
	{"read", tool_read},
	{"write", tool_write},
};

int ca_tools_known(const char *name)
{
	for (size_t i = 0; i < sizeof tool_table / sizeof tool_table[0]; i++)
		if (strcmp(tool_table[i].name, name) == 0)
			return 1;
	return 0;
}

char *ca_tools_call(struct ca_tools *t, const char *name, jv args, int *is_error)
{
	*is_error = 0;
	if (jv_get_kind(args) != JV_KIND_OBJECT)
		return invalid(is_error, "the arguments of %s must be a JSON object", name);
	for (size_t i = 0; i < sizeof tool_table / sizeof tool_table[0]; i++)
		if (strcmp(tool_table[i].name, name) == 0)
			return tool_table[i].fn(t, args, is_error);
	return invalid(is_error, "unknown tool %s; the tools are bash, bash_output, edit, glob, grep, kill_bash, multiedit, read, write", name);
}

static const char schema_text[] =
"["
"{\"type\":\"function\",\"function\":{\"name\":\"bash\",\"description\":\"Run a shell command in the workspace. The working directory and exported variables carry over to the next command. No network. Output over the limit is truncated. ca-build, ca-verify and ca-profile typed alone as the whole command run the trusted build, check and timing of the current files.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"string\",\"description\":\"the command line\"},\"timeout\":{\"type\":\"number\",\"description\":\"seconds before the command is killed (capped by the session's limit)\"},\"run_in_background\":{\"type\":\"boolean\",\"description\":\"start it in the background and return an id for bash_output and kill_bash\"},\"description\":{\"type\":\"string\",\"description\":\"a few words on what the command does\"}},\"required\":[\"command\"]}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"bash_output\",\"description\":\"Read the new output of a background command and whether it is still running.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"]}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"kill_bash\",\"description\":\"Stop a background command.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"]}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"read\",\"description\":\"Read a text file of the workspace, with line numbers.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"offset\":{\"type\":\"integer\",\"description\":\"first line, from 1\"},\"limit\":{\"type\":\"integer\",\"description\":\"number of lines (default 2000)\"}},\"required\":[\"path\"]}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"write\",\"description\":\"Create a file, or replace one you have read before. Parent directories are created.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"}},\"required\":[\"path\",\"content\"]}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"edit\",\"description\":\"Replace one exact, unique occurrence of old_string by new_string in a file you have read (or every occurrence with replace_all).\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"old_string\":{\"type\":\"string\"},\"new_string\":{\"type\":\"string\"},\"replace_all\":{\"type\":\"boolean\"}},\"required\":[\"path\",\"old_string\",\"new_string\"]}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"multiedit\",\"description\":\"Apply several edits to one file in order; if any fails, none is applied.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"edits\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"old_string\":{\"type\":\"string\"},\"new_string\":{\"type\":\"string\"},\"replace_all\":{\"type\":\"boolean\"}},\"required\":[\"old_string\",\"new_string\"]}}},\"required\":[\"path\",\"edits\"]}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"glob\",\"description\":\"List files whose path relative to path (default the workspace) matches the pattern; ** matches any number of directories.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\"},\"path\":{\"type\":\"string\"}},\"required\":[\"pattern\"]}}},"
"{\"type\":\"function\",\"function\":{\"name\":\"grep\",\"description\":\"Search file contents with an extended regular expression.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\"},\"path\":{\"type\":\"string\",\"description\":\"file or directory (default the workspace)\"},\"glob\":{\"type\":\"string\",\"description\":\"only files whose name matches, for example *.cu\"},\"case_insensitive\":{\"type\":\"boolean\"},\"context\":{\"type\":\"integer\",\"description\":\"lines of context around each match\"},\"output_mode\":{\"type\":\"string\",\"enum\":[\"content\",\"files_with_matches\",\"count\"]}},\"required\":[\"pattern\"]}}}"
"]";

jv ca_tools_schema(void)
{
	return jv_parse(schema_text);
}

/* ---- life cycle ---- */

struct ca_tools *ca_tools_new(const struct ca_tools_config *c)
{
	struct ca_tools *t = ca_xcalloc(1, sizeof *t);
	if (!realpath(c->workspace, t->ws)) {
		free(t);
		return NULL;
	}
	t->wslen = strlen(t->ws);
	t->state_dir = ca_xstrdup(c->state_dir ? c->state_dir : "/tmp");
	for (size_t i = 0; c->protected && c->protected[i]; i++) {
		t->protected = ca_xrealloc(t->protected, (t->nprotected + 1) * sizeof *t->protected);
		struct sb b = {0};
		sb_printf(&b, "%s/%s", t->ws, c->protected[i]);
		t->protected[t->nprotected++] = sb_take(&b);
	}
	for (size_t i = 0; c->hide && c->hide[i]; i++) {
		t->hide = ca_xrealloc(t->hide, (t->nhide + 1) * sizeof *t->hide);
		t->hide[t->nhide++] = ca_xstrdup(c->hide[i]);
	}
	t->sandbox = c->sandbox;
	t->command_time_s = c->command_time_s > 0 ? c->command_time_s : 300;
	t->job_time_s = c->job_time_s > 0 ? c->job_time_s : 3600;
	t->max_output = c->max_output > 256 ? c->max_output : 30000;
	t->shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
	return t;
}

void ca_tools_free(struct ca_tools *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->njobs; i++) {
		struct job *job = t->jobs[i];
		if (!job->finished) {
			ca_proc_kill(&job->proc, SIGKILL);
			ca_proc_finish(&job->proc);
		}
		unlink(job->log_path);
		free(job->log_path);
		for (int k = 0; k < 4; k++)
			free(job->owned[k]);
		free(job->argv_storage);
		free(job);
	}
	free(t->jobs);
	ca_free_strings(t->protected, t->nprotected);
	ca_free_strings(t->hide, t->nhide);
	ca_free_strings(t->read_set, t->nread);
	free(t->state_dir);
	free(t->cwd);
	free(t->env);
	free(t);
}
