/* ndjson: see ndjson.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"

enum {
	CHUNK = 1 << 20,
	READY_PARTIAL = 16 << 20,  /* a partial line this long is read to its end, waiting (ca_ndjson_ready) */
};

/* The reader whose position ca_ndjson_record_warn reports: the last opened. */
static struct ca_ndjson_reader *current_reader;

struct ca_ndjson_reader {
	char **files;
	int nfiles, index;
	int fd;              /* current input, -1 between files */
	int gzip;            /* current input is gzip: inflate raw into buf */
	z_stream z;
	unsigned char *raw;  /* bytes read from fd: [raw_start, raw_end) not yet used */
	size_t raw_start, raw_end;
	const char *name;
	long line;
	int eof;             /* current file exhausted */
	int status;
	char *buf;           /* buffered bytes: [start, end) unread */
	size_t cap, start, end;
	char *linep;         /* last line, NUL-terminated in buf */
	size_t linelen;
	int sniffed;         /* whether the current input was looked at for gzip */
	int no_wait;         /* read only what is there (ca_ndjson_ready) ... */
	int again;           /* ... and nothing was: the read would have waited */
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
	r->fd = -1;
	r->cap = CHUNK;
	r->buf = ca_xmalloc(r->cap + 1);
	r->raw = ca_xmalloc(CHUNK);
	current_reader = r;
	return r;
}

static void close_current(struct ca_ndjson_reader *r)
{
	if (r->fd < 0)
		return;
	if (r->gzip)
		inflateEnd(&r->z);
	close(r->fd);
	r->fd = -1;
}

void ca_ndjson_close(struct ca_ndjson_reader *r)
{
	if (!r)
		return;
	if (current_reader == r)
		current_reader = NULL;
	close_current(r);
	free(r->raw);
	free(r->buf);
	free(r);
}

/*
 * read(2) whatever is there, not a full buffer: a command run as a
 * coprocess must see a line as soon as it is written. (zlib's gzread
 * waits for its whole request, so gzip is inflated here by hand.) With
 * no_wait, -2 (and again set) when nothing is there yet.
 */
static ssize_t read_some(struct ca_ndjson_reader *r, void *into, size_t n)
{
	if (r->no_wait) {
		struct pollfd p = {.fd = r->fd, .events = POLLIN};
		if (poll(&p, 1, 0) == 0) {
			r->again = 1;
			return -2;
		}
	}
	for (;;) {
		ssize_t got = read(r->fd, into, n);
		if (got >= 0)
			return got;
		if (errno != EINTR) {
			ca_err_warn_sys("%s: read error", r->name);
			r->status = ca_err_worst(r->status, CA_EXIT_SYSTEM);
			return -1;
		}
	}
}

static int open_next(struct ca_ndjson_reader *r)
{
	for (;;) {
		close_current(r);
		if (++r->index >= r->nfiles)
			return 0;
		const char *path = r->files[r->index];
		if (strcmp(path, "-") == 0) {
			r->name = "stdin";
			r->fd = dup(0);
		} else {
			r->name = path;
			r->fd = open(path, O_RDONLY | O_CLOEXEC);
		}
		if (r->fd < 0) {
			ca_err_warn_sys("%s", r->name);
			r->status = ca_err_worst(r->status, CA_EXIT_SYSTEM);
			continue;
		}
		r->line = 0;
		r->eof = 0;
		r->start = r->end = 0;
		r->raw_start = r->raw_end = 0;
		r->gzip = 0;
		r->sniffed = 0;
		return 1;
	}
}

/*
 * Sniff the gzip magic (1f 8b) at the first read of an input; a plain
 * first byte decides at once. -1 when, with no_wait, no byte was there.
 */
static int sniff(struct ca_ndjson_reader *r)
{
	while (r->raw_end < 2 && (r->raw_end == 0 || r->raw[0] == 0x1f)) {
		ssize_t got = read_some(r, r->raw + r->raw_end, CHUNK - r->raw_end);
		if (got == -2)
			return -1;
		if (got <= 0)
			break;
		r->raw_end += (size_t)got;
	}
	if (r->raw_end >= 2 && r->raw[0] == 0x1f && r->raw[1] == 0x8b) {
		memset(&r->z, 0, sizeof r->z);
		if (inflateInit2(&r->z, 15 + 16) != Z_OK)
			ca_err_die(CA_EXIT_SYSTEM, "%s: cannot start zlib", r->name);
		r->gzip = 1;
	}
	r->sniffed = 1;
	return 0;
}

/* Inflate into buf[end..cap); returns bytes produced, 0 at the end of input. */
static size_t inflate_some(struct ca_ndjson_reader *r)
{
	for (;;) {
		if (r->raw_start == r->raw_end) {
			ssize_t got = read_some(r, r->raw, CHUNK);
			if (got < 0)
				return 0;
			if (got == 0) {
				if (r->z.total_in > 0 || r->z.avail_in > 0) {
					ca_err_warn("%s: truncated gzip data", r->name);
					r->status = ca_err_worst(r->status, CA_EXIT_DATA);
				}
				return 0;
			}
			r->raw_start = 0;
			r->raw_end = (size_t)got;
		}
		r->z.next_in = r->raw + r->raw_start;
		r->z.avail_in = (uInt)(r->raw_end - r->raw_start);
		size_t room = r->cap - r->end;
		if (room > (1u << 30))
			room = 1u << 30;
		r->z.next_out = (unsigned char *)r->buf + r->end;
		r->z.avail_out = (uInt)room;
		int rc = inflate(&r->z, Z_NO_FLUSH);
		size_t produced = room - r->z.avail_out;
		r->raw_start = r->raw_end - r->z.avail_in;
		if (rc == Z_STREAM_END) {
			/* Concatenated gzip members (cat a.gz b.gz) continue the stream. */
			inflateReset(&r->z);
			r->z.total_in = 0;
		} else if (rc != Z_OK && rc != Z_BUF_ERROR) {
			ca_err_warn("%s: gzip: %s", r->name, r->z.msg ? r->z.msg : "corrupt data");
			r->status = ca_err_worst(r->status, CA_EXIT_DATA);
			return 0;
		}
		if (produced > 0)
			return produced;
	}
}

/* Fill more bytes into buf; returns bytes added, 0 at EOF (or with again set, for now). */
static size_t fill(struct ca_ndjson_reader *r)
{
	r->again = 0;
	if (r->eof)
		return 0;
	if (!r->sniffed && sniff(r) != 0)
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
	size_t got;
	if (r->gzip) {
		got = inflate_some(r);
	} else if (r->raw_start < r->raw_end) {  /* the sniffed bytes first */
		got = r->raw_end - r->raw_start;
		if (got > r->cap - r->end)
			got = r->cap - r->end;
		memcpy(r->buf + r->end, r->raw + r->raw_start, got);
		r->raw_start += got;
	} else {
		ssize_t n = read_some(r, r->buf + r->end, r->cap - r->end);
		got = n > 0 ? (size_t)n : 0;
	}
	if (got == 0) {
		if (!r->again)
			r->eof = 1;
		return 0;
	}
	r->end += got;
	return got;
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
		if (r->fd < 0 && !open_next(r))
			return CA_NDJSON_EOF;
		if (!next_line(r)) {
			close_current(r);
			continue;
		}
		if (blank(r->linep, r->linelen))
			continue;
		*text = r->linep;
		*len = r->linelen;
		return CA_NDJSON_RECORD;
	}
}

/* 1 when buf[from, end) holds a whole line that is not blank. */
static int whole_line_buffered(const struct ca_ndjson_reader *r)
{
	size_t from = r->start;
	char *nl;
	while ((nl = memchr(r->buf + from, '\n', r->end - from))) {
		if (!blank(r->buf + from, (size_t)(nl - r->buf) - from))
			return 1;
		from = (size_t)(nl - r->buf) + 1;
	}
	return 0;
}

int ca_ndjson_ready(struct ca_ndjson_reader *r)
{
	for (;;) {
		if (r->fd < 0 && !open_next(r))
			return 1;  /* the next call says EOF */
		if (whole_line_buffered(r) || r->end - r->start >= READY_PARTIAL)
			return 1;
		if (r->eof) {
			if (!blank(r->buf + r->start, r->end - r->start))
				return 1;  /* a last line without a newline */
			close_current(r);  /* nothing but blank lines left: on to the next input */
			continue;
		}
		r->no_wait = 1;
		size_t got = fill(r);
		r->no_wait = 0;
		if (got == 0 && r->again)
			return 0;
	}
}

int ca_ndjson_fd(const struct ca_ndjson_reader *r) { return r->fd; }

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

/* The fast path of ca_ndjson_map_field; 0 when the caller must use jv. */
static int map_field_fast(const char *text, size_t len, const char *const *keys, size_t nkeys, const char *field,
	ca_field_fn fn, void *ctx, int *status, char **out, size_t *outcap)
{
	enum { MAX_KEYS = 16 };
	const char *all[MAX_KEYS + 1];
	struct ca_json_span spans[MAX_KEYS + 1];
	size_t close;
	if (nkeys > MAX_KEYS || len > 0x7fffffff)
		return 0;
	memcpy(all, keys, nkeys * sizeof *keys);
	all[nkeys] = field;
	if (ca_json_scan_object(text, len, all, nkeys + 1, spans, &close) != 0)
		return 0;
	jv view = jv_object();
	for (size_t i = 0; i < nkeys; i++) {
		if (!spans[i].start)
			continue;
		jv v = jv_parse_sized(spans[i].start, (int)spans[i].len);
		if (!jv_is_valid(v)) {  /* cannot happen after the scanner; be safe */
			jv_free(v);
			jv_free(view);
			return 0;
		}
		view = jv_object_set(view, jv_string(keys[i]), v);
	}
	jv value = fn(view, ctx, status);
	jv_free(view);
	jv dumped = jv_dump_string(value, 0);
	size_t vlen = (size_t)jv_string_length_bytes(jv_copy(dumped));
	size_t flen = strlen(field);
	size_t need = len + flen + vlen + 8;
	if (need > *outcap) {
		*outcap = need * 2;
		*out = ca_xrealloc(*out, *outcap);
	}
	size_t n = 0;
	len = close + 1;  /* trailing white space (a CR) is not passed on */
	if (spans[nkeys].start) {
		/* Replace the old value where it stands, as jv_object_set keeps the key's place. */
		size_t at = (size_t)(spans[nkeys].start - text), after = at + spans[nkeys].len;
		memcpy(*out, text, at);
		memcpy(*out + at, jv_string_value(dumped), vlen);
		memcpy(*out + at + vlen, text + after, len - after);
		n = len - spans[nkeys].len + vlen;
	} else {
		/* Is there a member before the closing brace? Look back over white space. */
		size_t k = close;
		while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t' || text[k - 1] == '\n' || text[k - 1] == '\r'))
			k--;
		int empty = text[k - 1] == '{';
		memcpy(*out, text, close);
		n = close;
		if (!empty)
			(*out)[n++] = ',';
		(*out)[n++] = '"';
		memcpy(*out + n, field, flen);
		n += flen;
		(*out)[n++] = '"';
		(*out)[n++] = ':';
		memcpy(*out + n, jv_string_value(dumped), vlen);
		n += vlen;
		(*out)[n++] = '}';
	}
	jv_free(dumped);
	int rc = ca_ndjson_write_raw(*out, n);
	return rc == 0 ? 1 : -1;
}

int ca_ndjson_map_field(int nfiles, char **files, const char *const *keys, size_t nkeys, const char *field,
	ca_field_fn fn, void *ctx)
{
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	int status = CA_EXIT_OK;
	const char *text;
	size_t len;
	char *out = NULL;
	size_t outcap = 0;
	while (ca_ndjson_next_text(r, &text, &len) != CA_NDJSON_EOF) {
		int record_status = CA_EXIT_OK;
		int done = map_field_fast(text, len, keys, nkeys, field, fn, ctx, &record_status, &out, &outcap);
		if (done == 0) {
			jv v, result;
			if (ca_ndjson_parse(text, len, &v) == CA_NDJSON_BAD) {
				ca_ndjson_warn(r, "%s", jv_string_value(v));
				result = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(v));
				jv_free(v);
				record_status = CA_EXIT_DATA;
			} else {
				jv value = fn(v, ctx, &record_status);
				result = jv_object_set(v, jv_string(field), value);
			}
			done = ca_ndjson_write(result) == 0 ? 1 : -1;
		}
		status = ca_err_worst(status, record_status);
		if (done < 0) {
			ca_err_warn_sys("write error on stdout");
			ca_ndjson_close(r);
			free(out);
			return CA_EXIT_SYSTEM;
		}
		ca_ndjson_progress_tick();
	}
	free(out);
	ca_ndjson_progress_done();
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	return ca_err_finish(status);
}
