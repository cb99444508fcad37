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

/* The longest line kept (ca_ndjson_set_line_max changes it, for tests). */
static size_t line_max = CA_NDJSON_LINE_MAX;

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
	size_t too_long;     /* the last line's length when it was over line_max (and not kept), else 0 */
	char why[128];       /* the reason given for such a line */
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
			r->eof = 1;  /* once: a directory would say so at every read */
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
	if (r->eof)  /* the sniff's read failed, and said so */
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

/*
 * Next raw line of the current file; 0 at its end. A line longer than
 * line_max is read past without keeping it (memory stays near line_max
 * whatever comes): r->too_long is its length and r->linep is empty.
 */
static int next_line(struct ca_ndjson_reader *r)
{
	size_t scanned = r->start, dropped = 0;
	r->too_long = 0;
	for (;;) {
		char *nl = memchr(r->buf + scanned, '\n', r->end - scanned);
		if (nl) {
			r->linep = r->buf + r->start;
			r->linelen = (size_t)(nl - r->linep);
			*nl = '\0';
			r->start = (size_t)(nl - r->buf) + 1;
			break;
		}
		size_t offset = r->end - r->start;
		if (offset > line_max) {
			dropped += offset;
			r->start = r->end;
			offset = 0;
		}
		if (fill(r) == 0) {
			if (r->end == r->start && dropped == 0)
				return 0;
			/* last line without newline */
			r->linep = r->buf + r->start;
			r->linelen = r->end - r->start;
			r->linep[r->linelen] = '\0';
			r->start = r->end;
			break;
		}
		scanned = r->start + offset;
	}
	r->line++;
	if (dropped + r->linelen > line_max) {
		r->too_long = dropped + r->linelen;
		r->linelen = 0;
		r->linep[0] = '\0';
	}
	return 1;
}

void ca_ndjson_set_line_max(size_t bytes) { line_max = bytes; }

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
		if (r->too_long) {
			snprintf(r->why, sizeof r->why, "line too long (%zu bytes; the limit is %zu)", r->too_long, line_max);
			*text = r->why;
			*len = strlen(r->why);
			return CA_NDJSON_BAD;
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
	if (len > line_max) {
		*out = jv_string_fmt("line too long (%zu bytes; the limit is %zu)", len, line_max);
		return CA_NDJSON_BAD;
	}
	jv v = ca_json_parse(text, len);
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
	int kind = ca_ndjson_next_text(r, &text, &len);
	if (kind == CA_NDJSON_BAD)
		*out = jv_string(text);
	if (kind != CA_NDJSON_RECORD)
		return kind;
	return ca_ndjson_parse(text, len, out);
}

int ca_ndjson_next_valid(struct ca_ndjson_reader *r, jv *out, int *status)
{
	int kind;
	while ((kind = ca_ndjson_next(r, out)) == CA_NDJSON_BAD) {
		ca_ndjson_warn(r, "%s", jv_string_value(*out));
		jv_free(*out);
		if (status)
			*status = ca_err_worst(*status, CA_EXIT_DATA);
	}
	return kind;
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

/* ---- passing fields through as they were written ---- */

/* A member of the input line and the name libjq knows it by. */
struct named_member {
	const char *name;  /* the key's bytes, decoded */
	size_t namelen;
	jv decoded;        /* owns name when the key had to be decoded, else invalid */
	const struct ca_json_member *member;
	size_t order;
};

static int compare_names(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);
	if (c != 0)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static int compare_named(const void *a, const void *b)
{
	const struct named_member *x = a, *y = b;
	int c = compare_names(x->name, x->namelen, y->name, y->namelen);
	if (c != 0)
		return c;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* The last member called name (libjq keeps the last of repeated keys), or NULL. */
static const struct named_member *find_named(const struct named_member *v, size_t n, const char *name, size_t len)
{
	size_t low = 0, high = n;  /* the first entry after name */
	while (low < high) {
		size_t mid = low + (high - low) / 2;
		if (compare_names(v[mid].name, v[mid].namelen, name, len) <= 0)
			low = mid + 1;
		else
			high = mid;
	}
	if (low == 0 || compare_names(v[low - 1].name, v[low - 1].namelen, name, len) != 0)
		return NULL;
	return &v[low - 1];
}

/* The members of text by name; NULL when its layout or a key is not as expected. */
static struct named_member *name_members(const char *text, size_t len, struct ca_json_member **members, size_t *n)
{
	size_t cap = 0;
	long count = ca_json_members(text, len, members, &cap);
	if (count < 0)
		return NULL;
	struct named_member *names = ca_xmalloc(((size_t)count + 1) * sizeof *names);
	for (long i = 0; i < count; i++) {
		struct named_member *e = &names[i];
		const struct ca_json_member *m = &(*members)[i];
		*e = (struct named_member){.member = m, .order = (size_t)i, .decoded = jv_invalid()};
		if (m->key_plain) {
			e->name = m->key.start + 1;
			e->namelen = m->key.len - 2;
			continue;
		}
		e->decoded = ca_json_parse(m->key.start, m->key.len);
		if (jv_get_kind(e->decoded) != JV_KIND_STRING) {
			for (long j = 0; j <= i; j++)
				jv_free(names[j].decoded);
			free(names);
			return NULL;
		}
		e->name = jv_string_value(e->decoded);
		e->namelen = (size_t)jv_string_length_bytes(jv_copy(e->decoded));
	}
	qsort(names, (size_t)count, sizeof *names, compare_named);
	*n = (size_t)count;
	return names;
}

static int put(const char *text, size_t len)
{
	return len == 0 || fwrite(text, 1, len, stdout) == len ? 0 : -1;
}

/* Write a value as libjq prints it. Borrows value. */
static int put_jv(jv value)
{
	jv text = jv_dump_string(jv_copy(value), 0);
	int rc = put(jv_string_value(text), (size_t)jv_string_length_bytes(jv_copy(text)));
	jv_free(text);
	return rc;
}

/* Write a member "key":value, copied from a source line's text when member is not NULL,
 * else printed as libjq prints it. Borrows key and value. */
static int put_member(const struct ca_json_member *member, jv key, jv value)
{
	int rc = member ? put(member->key.start, member->key.len) : put_jv(key);
	if (rc == 0)
		rc = put(":", 1);
	if (rc == 0)
		rc = member ? put(member->value.start, member->value.len) : put_jv(value);
	return rc;
}

static int end_line(void)
{
	if (putchar('\n') == EOF)
		return -1;
	return unbuffered && fflush(stdout) != 0 ? -1 : 0;
}

/* A line a record's fields may be copied from, and the members it holds by name. */
struct source {
	jv parsed;  /* borrowed */
	const char *text;
	size_t len;
	struct ca_json_member *members;
	struct named_member *names;  /* NULL when the line's layout is not as expected */
	size_t n;
};

/* The source whose text holds key with exactly value, or NULL. */
static const struct named_member *find_source(const struct source *sources, size_t nsources, jv key, jv value)
{
	const char *name = jv_string_value(key);
	size_t len = (size_t)jv_string_length_bytes(jv_copy(key));
	for (size_t i = 0; i < nsources; i++) {
		if (!sources[i].names)
			continue;
		const struct named_member *e = find_named(sources[i].names, sources[i].n, name, len);
		/* Untouched: the very value parsed from this member's text (a
		 * changed field is a new jv, even when it prints the same). */
		if (e && e->member->strict && jv_identical(jv_object_get(jv_copy(sources[i].parsed), jv_copy(key)), jv_copy(value)))
			return e;
	}
	return NULL;
}

/* ca_ndjson_write_spliced over several source lines. */
static int write_from(jv record, struct source *sources, size_t nsources)
{
	if (jv_get_kind(record) != JV_KIND_OBJECT)
		return ca_ndjson_write(record);
	int any = 0;
	for (size_t i = 0; i < nsources; i++) {
		struct source *src = &sources[i];
		src->members = NULL;
		src->names = NULL;
		if (jv_get_kind(src->parsed) == JV_KIND_OBJECT)
			src->names = name_members(src->text, src->len, &src->members, &src->n);
		any |= src->names != NULL;
	}
	int rc = 0;
	if (!any) {
		rc = ca_ndjson_write(record);
		record = jv_invalid();
	} else {
		int first = 1;
		rc = put("{", 1);
		jv_object_foreach(record, key, value) {
			const struct named_member *e = find_source(sources, nsources, key, value);
			if (rc == 0 && !first)
				rc = put(",", 1);
			first = 0;
			if (rc == 0)
				rc = put_member(e ? e->member : NULL, key, value);
			jv_free(key);
			jv_free(value);
		}
		if (rc == 0)
			rc = put("}", 1);
		if (rc == 0)
			rc = end_line();
	}
	for (size_t i = 0; i < nsources; i++) {
		for (size_t k = 0; sources[i].names && k < sources[i].n; k++)
			jv_free(sources[i].names[k].decoded);
		free(sources[i].names);
		free(sources[i].members);
	}
	jv_free(record);
	return rc;
}

int ca_ndjson_write_spliced(jv record, jv parsed, const char *text, size_t len)
{
	struct source one = {.parsed = parsed, .text = text, .len = len};
	return write_from(record, &one, 1);
}

jv ca_ndjson_keep_equal(jv record, jv parsed)
{
	if (jv_get_kind(record) != JV_KIND_OBJECT || jv_get_kind(parsed) != JV_KIND_OBJECT)
		return record;
	jv_object_foreach(parsed, key, value) {  /* borrows parsed */
		jv theirs = jv_object_get(jv_copy(record), jv_copy(key));
		if (jv_is_valid(theirs) && jv_equal(theirs, jv_copy(value))) {
			record = jv_object_set(record, key, value);
		} else {
			jv_free(key);
			jv_free(value);
		}
	}
	return record;
}

/* Lines a record function named with ca_ndjson_pass_from, for the output written next. */
enum { MAX_SOURCES = 4 };
static struct source extra[MAX_SOURCES];
static size_t nextra;

void ca_ndjson_pass_from(jv parsed, const char *text, size_t len)
{
	if (nextra < MAX_SOURCES)
		extra[nextra++] = (struct source){.parsed = jv_copy(parsed), .text = text, .len = len};
}

/* Write one output of the current line, from it and the lines named with ca_ndjson_pass_from. */
static int write_passed(jv record, jv parsed, const char *text, size_t len)
{
	struct source sources[1 + MAX_SOURCES] = {{.parsed = parsed, .text = text, .len = len}};
	for (size_t i = 0; i < nextra; i++)
		sources[1 + i] = extra[i];
	return write_from(record, sources, 1 + nextra);
}

static void forget_passed(void)
{
	for (size_t i = 0; i < nextra; i++)
		jv_free(extra[i].parsed);
	nextra = 0;
}

/* ---- error records ---- */

/* What a file name or a message may take in an error record, escaped: the record stays under 4 KB. */
enum { ERROR_TEXT_MAX = 1024 };

/*
 * text as a JSON string that prints in at most ERROR_TEXT_MAX bytes,
 * counting each byte at its worst (a control character as \u001f, a byte
 * of invalid UTF-8 as U+FFFD); longer text is cut at a character
 * boundary and ends in "...".
 */
static jv bounded_string(const char *text)
{
	size_t cost = 0, cut = 0, i;
	for (i = 0; text[i]; i++) {
		unsigned char c = (unsigned char)text[i];
		cost += c < 0x20 || c == 0x7f ? 6 : c == '"' || c == '\\' ? 2 : c >= 0x80 ? 3 : 1;
		if (cost <= ERROR_TEXT_MAX - 3)
			cut = i + 1;
	}
	if (cost <= ERROR_TEXT_MAX)
		return jv_string(text);
	while (cut > 0 && ((unsigned char)text[cut] & 0xc0) == 0x80)
		cut--;
	return jv_string_fmt("%.*s...", (int)cut, text);
}

jv ca_ndjson_error_record(const char *file, long line, const char *message)
{
	jv e = jv_object();
	e = jv_object_set(e, jv_string("file"), bounded_string(file));
	e = jv_object_set(e, jv_string("line"), jv_number((double)line));
	e = jv_object_set(e, jv_string("message"), bounded_string(message));
	return jv_object_set(jv_object(), jv_string("error"), e);
}

void ca_ndjson_progress_tick(void)
{
	/* isatty sets errno (ENOTTY) even when it answers yes or no: a write
	 * error reported after the tick must still name its own reason. */
	int saved = errno;
	if (progress_on < 0)
		progress_on = isatty(2);
	progress_count++;
	if (progress_on) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		double dt = (double)(now.tv_sec - progress_last.tv_sec) + 1e-9 * (double)(now.tv_nsec - progress_last.tv_nsec);
		if (dt >= 0.5) {
			progress_last = now;
			fprintf(stderr, "%s: %ld records\r", ca_err_prog(), progress_count);
		}
	}
	errno = saved;
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

/* ---- the record loops ---- */

/* A line read (CA_NDJSON_RECORD or CA_NDJSON_BAD from ca_ndjson_next_text) as a record or the reason it is none. */
static int to_record(int kind, const char *text, size_t len, jv *record)
{
	if (kind == CA_NDJSON_RECORD)
		return ca_ndjson_parse(text, len, record);
	*record = jv_string(text);
	return CA_NDJSON_BAD;
}

/* A line that is no record: its diagnostic and its error record. */
static int write_bad_line(const struct ca_ndjson_reader *r, const char *reason, int *status)
{
	ca_ndjson_warn(r, "%s", reason);
	*status = ca_err_worst(*status, CA_EXIT_DATA);
	return ca_ndjson_write(ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), reason));
}

/* What a record function returned (consumed): a record, an array of records, or invalid for none. */
static int write_output(jv out, jv parsed, const char *text, size_t len)
{
	int rc = 0;
	if (jv_get_kind(out) == JV_KIND_ARRAY) {
		jv_array_foreach(out, i, one) {
			if (rc == 0)
				rc = write_passed(one, parsed, text, len);
			else
				jv_free(one);
		}
		jv_free(out);
	} else if (jv_get_kind(out) != JV_KIND_INVALID) {
		rc = write_passed(out, parsed, text, len);
	} else {
		jv_free(out);
	}
	forget_passed();
	return rc;
}

/* The end of a record loop: the one report of a failed write, or the final status. */
static int loop_done(struct ca_ndjson_reader *r, int status, int write_failed)
{
	if (write_failed) {
		ca_err_warn_sys("write error on stdout");
		ca_ndjson_close(r);
		return CA_EXIT_SYSTEM;
	}
	ca_ndjson_progress_done();
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	return ca_err_finish(status);
}

/* A record taken by a batch command and waiting for its batch to run. */
struct held {
	jv parsed;   /* as read: its field values are the originals */
	char *text;  /* the line, for passing untouched fields through */
	size_t len;
};

struct batch {
	struct held *items;
	jv *out;
	int n, cap;
};

/* Run the records taken since the last run and write their outputs in order. */
static int run_batch(struct batch *b, ca_batch_run_fn run, void *ctx, int *status)
{
	if (b->n == 0)
		return 0;
	for (int i = 0; i < b->n; i++)
		b->out[i] = jv_invalid();
	int batch_status = CA_EXIT_OK, rc = 0;
	run(ctx, b->out, b->n, &batch_status);
	*status = ca_err_worst(*status, batch_status);
	for (int i = 0; i < b->n; i++) {
		struct held *h = &b->items[i];
		if (rc == 0)
			rc = write_output(b->out[i], h->parsed, h->text, h->len);
		else
			jv_free(b->out[i]);
		jv_free(h->parsed);
		free(h->text);
		ca_ndjson_progress_tick();
	}
	b->n = 0;
	return rc;
}

int ca_ndjson_map_batch(int nfiles, char **files, ca_batch_take_fn take, ca_batch_run_fn run, void *ctx)
{
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	struct batch b = {0};
	int status = CA_EXIT_OK, rc = 0, kind;
	const char *text;
	size_t len;
	while (rc == 0 && (kind = ca_ndjson_next_text(r, &text, &len)) != CA_NDJSON_EOF) {
		jv record;
		if (to_record(kind, text, len, &record) == CA_NDJSON_BAD) {
			rc = run_batch(&b, run, ctx, &status);  /* the records before it come out first */
			if (rc == 0)
				rc = write_bad_line(r, jv_string_value(record), &status);
			jv_free(record);
			ca_ndjson_progress_tick();
			continue;
		}
		if (b.n == b.cap) {
			b.cap = b.cap ? 2 * b.cap : 16;
			b.items = ca_xrealloc(b.items, (size_t)b.cap * sizeof *b.items);
			b.out = ca_xrealloc(b.out, (size_t)b.cap * sizeof *b.out);
		}
		b.items[b.n++] = (struct held){jv_copy(record), memcpy(ca_xmalloc(len + 1), text, len), len};
		char where[4200];
		snprintf(where, sizeof where, "%s:%ld", ca_ndjson_name(r), ca_ndjson_line(r));
		int record_status = CA_EXIT_OK;
		int now = take(record, where, ctx, &record_status);
		status = ca_err_worst(status, record_status);
		if (now || unbuffered)
			rc = run_batch(&b, run, ctx, &status);
	}
	if (rc == 0)
		rc = run_batch(&b, run, ctx, &status);
	free(b.items);
	free(b.out);
	return loop_done(r, status, rc != 0);
}

/* ca_ndjson_map is the batch loop with batches of one: fn's output waits in out for run to hand it over. */
struct one_at_a_time {
	ca_record_fn fn;
	void *ctx;
	jv out;
};

static int take_one(jv record, const char *where, void *ctx, int *status)
{
	struct one_at_a_time *one = ctx;
	one->out = one->fn(record, one->ctx, status);
	return 1;
}

static void run_one(void *ctx, jv *out, int n, int *status)
{
	struct one_at_a_time *one = ctx;
	out[0] = one->out;
}

int ca_ndjson_map(int nfiles, char **files, ca_record_fn fn, void *ctx)
{
	struct one_at_a_time one = {.fn = fn, .ctx = ctx};
	return ca_ndjson_map_batch(nfiles, files, take_one, run_one, &one);
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
	int status = CA_EXIT_OK, rc = 0, kind;
	const char *text;
	size_t len;
	char *out = NULL;
	size_t outcap = 0;
	while (rc == 0 && (kind = ca_ndjson_next_text(r, &text, &len)) != CA_NDJSON_EOF) {
		int record_status = CA_EXIT_OK;
		int done = kind == CA_NDJSON_RECORD ?
			map_field_fast(text, len, keys, nkeys, field, fn, ctx, &record_status, &out, &outcap) : 0;
		if (done == 0) {
			jv record;
			if (to_record(kind, text, len, &record) == CA_NDJSON_BAD) {
				rc = write_bad_line(r, jv_string_value(record), &record_status);
			} else {
				jv value = fn(record, ctx, &record_status);
				jv result = jv_object_set(jv_copy(record), jv_string(field), value);
				rc = ca_ndjson_write_spliced(result, record, text, len);
			}
			jv_free(record);
		} else if (done < 0) {
			rc = -1;
		}
		status = ca_err_worst(status, record_status);
		ca_ndjson_progress_tick();
	}
	free(out);
	return loop_done(r, status, rc != 0);
}
