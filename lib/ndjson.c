/* ndjson: see ndjson.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "err.h"
#include "ndjson.h"

enum { CHUNK = 1 << 20 };

/* The reader whose position ca_ndjson_record_warn reports: the last opened. */
static struct ca_ndjson_reader *current_reader;

struct ca_ndjson_reader {
	char **files;
	int nfiles, index;
	gzFile gz;           /* current input, NULL between files */
	const char *name;
	long line;
	int eof;             /* current file exhausted */
	int status;
	char *buf;           /* buffered bytes: [start, end) unread */
	size_t cap, start, end;
	char *linep;         /* last line, NUL-terminated in buf */
	size_t linelen;
};

struct ca_ndjson_reader *ca_ndjson_open(int nfiles, char **files)
{
	struct ca_ndjson_reader *r = ca_xcalloc(1, sizeof *r);
	static char *stdin_only[] = {"-"};
	if (nfiles == 0) {
		files = stdin_only;
		nfiles = 1;
	}
	r->files = files;
	r->nfiles = nfiles;
	r->index = -1;
	r->cap = CHUNK;
	r->buf = ca_xmalloc(r->cap + 1);
	current_reader = r;
	return r;
}

void ca_ndjson_close(struct ca_ndjson_reader *r)
{
	if (!r)
		return;
	if (current_reader == r)
		current_reader = NULL;
	if (r->gz)
		gzclose(r->gz);
	free(r->buf);
	free(r);
}

static int open_next(struct ca_ndjson_reader *r)
{
	for (;;) {
		if (r->gz) {
			gzclose(r->gz);
			r->gz = NULL;
		}
		if (++r->index >= r->nfiles)
			return 0;
		const char *path = r->files[r->index];
		int fd;
		if (strcmp(path, "-") == 0) {
			r->name = "stdin";
			fd = dup(0);
		} else {
			r->name = path;
			fd = open(path, O_RDONLY | O_CLOEXEC);
		}
		if (fd < 0 || !(r->gz = gzdopen(fd, "rb"))) {
			ca_err_warn_sys("%s", r->name);
			if (fd >= 0)
				close(fd);
			r->status = ca_err_worst(r->status, CA_EXIT_SYSTEM);
			continue;
		}
		gzbuffer(r->gz, CHUNK);
		r->line = 0;
		r->eof = 0;
		r->start = r->end = 0;
		return 1;
	}
}

/* Fill more bytes into buf; returns bytes added, 0 at EOF. */
static size_t fill(struct ca_ndjson_reader *r)
{
	if (r->eof)
		return 0;
	if (r->start > 0) {
		memmove(r->buf, r->buf + r->start, r->end - r->start);
		r->end -= r->start;
		r->start = 0;
	}
	if (r->cap - r->end < CHUNK / 2) {
		r->cap *= 2;
		r->buf = ca_xrealloc(r->buf, r->cap + 1);
	}
	int want = (int)((r->cap - r->end) > (1u << 30) ? (1u << 30) : (r->cap - r->end));
	int got = gzread(r->gz, r->buf + r->end, (unsigned)want);
	if (got < 0) {
		int errnum;
		const char *msg = gzerror(r->gz, &errnum);
		if (errnum == Z_ERRNO)
			ca_err_warn_sys("%s: read error", r->name);
		else
			ca_err_warn("%s: %s", r->name, msg);
		r->status = ca_err_worst(r->status, CA_EXIT_SYSTEM);
		r->eof = 1;
		return 0;
	}
	if (got == 0) {
		r->eof = 1;
		return 0;
	}
	r->end += (size_t)got;
	return (size_t)got;
}

/* Next raw line of the current file; 0 at its end. */
static int next_line(struct ca_ndjson_reader *r)
{
	size_t scanned = r->start;
	for (;;) {
		char *nl = memchr(r->buf + scanned, '\n', r->end - scanned);
		if (nl) {
			r->linep = r->buf + r->start;
			r->linelen = (size_t)(nl - r->linep);
			*nl = '\0';
			r->start = (size_t)(nl - r->buf) + 1;
			r->line++;
			return 1;
		}
		size_t offset = r->end - r->start;
		if (fill(r) == 0) {
			if (r->end > r->start) {  /* last line without newline */
				r->linep = r->buf + r->start;
				r->linelen = r->end - r->start;
				r->linep[r->linelen] = '\0';
				r->start = r->end;
				r->line++;
				return 1;
			}
			return 0;
		}
		scanned = r->start + offset;
	}
}

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return 0;
	return 1;
}

int ca_ndjson_next_text(struct ca_ndjson_reader *r, const char **text, size_t *len)
{
	for (;;) {
		if (!r->gz && !open_next(r))
			return CA_NDJSON_EOF;
		if (!next_line(r)) {
			gzclose(r->gz);
			r->gz = NULL;
			continue;
		}
		if (blank(r->linep, r->linelen))
			continue;
		*text = r->linep;
		*len = r->linelen;
		return CA_NDJSON_RECORD;
	}
}

int ca_ndjson_parse(const char *text, size_t len, jv *out)
{
	if (len > 0x7fffffff) {
		*out = jv_string("line too long for the JSON parser (over 2 GB)");
		return CA_NDJSON_BAD;
	}
	jv v = jv_parse_sized(text, (int)len);
	if (!jv_is_valid(v)) {
		jv msg = jv_invalid_get_msg(v);
		if (jv_get_kind(msg) == JV_KIND_STRING) {
			*out = jv_string_fmt("malformed JSON: %s", jv_string_value(msg));
			jv_free(msg);
		} else {
			jv_free(msg);
			*out = jv_string("malformed JSON");
		}
		return CA_NDJSON_BAD;
	}
	if (jv_get_kind(v) != JV_KIND_OBJECT) {
		const char *kind = jv_kind_name(jv_get_kind(v));
		jv_free(v);
		*out = jv_string_fmt("record is a JSON %s, not an object", kind);
		return CA_NDJSON_BAD;
	}
	*out = v;
	return CA_NDJSON_RECORD;
}

int ca_ndjson_next(struct ca_ndjson_reader *r, jv *out)
{
	const char *text;
	size_t len;
	if (ca_ndjson_next_text(r, &text, &len) == CA_NDJSON_EOF)
		return CA_NDJSON_EOF;
	return ca_ndjson_parse(text, len, out);
}

const char *ca_ndjson_name(const struct ca_ndjson_reader *r) { return r->name ? r->name : "stdin"; }
long ca_ndjson_line(const struct ca_ndjson_reader *r) { return r->line; }
int ca_ndjson_status(const struct ca_ndjson_reader *r) { return r->status; }

const char *ca_ndjson_text(const struct ca_ndjson_reader *r, size_t *len)
{
	*len = r->linelen;
	return r->linep;
}

void ca_ndjson_warn(const struct ca_ndjson_reader *r, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	ca_err_warn("%s:%ld: %s", ca_ndjson_name(r), ca_ndjson_line(r), buf);
}

/* ---- output ---- */

static int unbuffered;
static int progress_on = -1;  /* -1: decide from isatty(2) */
static long progress_count;
static struct timespec progress_last;

void ca_ndjson_set_unbuffered(int on) { unbuffered = on; }
void ca_ndjson_set_progress(int on) { progress_on = on; }

int ca_ndjson_write_raw(const char *text, size_t len)
{
	if (fwrite(text, 1, len, stdout) != len || putchar('\n') == EOF)
		return -1;
	if (unbuffered && fflush(stdout) != 0)
		return -1;
	return 0;
}

int ca_ndjson_write(jv record)
{
	jv text = jv_dump_string(record, 0);
	const char *s = jv_string_value(text);
	int rc = ca_ndjson_write_raw(s, (size_t)jv_string_length_bytes(jv_copy(text)));
	jv_free(text);
	return rc;
}

jv ca_ndjson_error_record(const char *file, long line, const char *message)
{
	jv e = jv_object();
	e = jv_object_set(e, jv_string("file"), jv_string(file));
	e = jv_object_set(e, jv_string("line"), jv_number((double)line));
	e = jv_object_set(e, jv_string("message"), jv_string(message));
	return jv_object_set(jv_object(), jv_string("error"), e);
}

void ca_ndjson_progress_tick(void)
{
	if (progress_on < 0)
		progress_on = isatty(2);
	progress_count++;
	if (!progress_on)
		return;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	double dt = (double)(now.tv_sec - progress_last.tv_sec) + 1e-9 * (double)(now.tv_nsec - progress_last.tv_nsec);
	if (dt >= 0.5) {
		progress_last = now;
		fprintf(stderr, "%s: %ld records\r", ca_err_prog(), progress_count);
	}
}

void ca_ndjson_progress_done(void)
{
	if (progress_on > 0)
		fprintf(stderr, "%s: %ld records, done\n", ca_err_prog(), progress_count);
}

void ca_ndjson_record_warn(const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (current_reader)
		ca_err_warn("%s:%ld: %s", ca_ndjson_name(current_reader), ca_ndjson_line(current_reader), buf);
	else
		ca_err_warn("%s", buf);
}

jv ca_ndjson_record_error(jv record, const char *message)
{
	const char *name = current_reader ? ca_ndjson_name(current_reader) : "stdin";
	long line = current_reader ? ca_ndjson_line(current_reader) : 0;
	ca_ndjson_record_warn("%s", message);
	jv e = jv_object_get(ca_ndjson_error_record(name, line, message), jv_string("error"));
	return jv_object_set(record, jv_string("error"), e);
}

int ca_ndjson_map(int nfiles, char **files, ca_record_fn fn, void *ctx)
{
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	int status = CA_EXIT_OK;
	jv v;
	int kind;
	while ((kind = ca_ndjson_next(r, &v)) != CA_NDJSON_EOF) {
		jv out;
		if (kind == CA_NDJSON_BAD) {
			ca_ndjson_warn(r, "%s", jv_string_value(v));
			out = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(v));
			jv_free(v);
			status = ca_err_worst(status, CA_EXIT_DATA);
		} else {
			int record_status = CA_EXIT_OK;
			out = fn(v, ctx, &record_status);
			status = ca_err_worst(status, record_status);
		}
		if (ca_ndjson_write(out) != 0) {
			ca_err_warn_sys("write error on stdout");
			ca_ndjson_close(r);
			return CA_EXIT_SYSTEM;
		}
		ca_ndjson_progress_tick();
	}
	ca_ndjson_progress_done();
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	return ca_err_finish(status);
}
