/*
 * Unit tests of lib/ndjson: the reader over files given as arguments
 * (plain or gzip), line numbers, empty lines, malformed lines, a line
 * longer than the reader's first buffer, the error record's shape; a line
 * over the length limit read past and reported (the limit lowered to 1 MB:
 * the path a line over 1 GiB takes), an error record under 4 KB whatever
 * its message; ca_ndjson_ready over a pipe that is written a piece at a
 * time.
 *
 *   test-ndjson DIR     (a scratch directory for its input files)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "ndjson.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

static void put(int fd, const void *data, size_t n)
{
	if (write(fd, data, n) != (ssize_t)n)
		abort();
}

/* Standard input becomes a new pipe; returns its write end. */
static int stdin_pipe(void)
{
	int p[2];
	if (pipe(p) != 0 || dup2(p[0], 0) < 0)
		abort();
	close(p[0]);
	return p[1];
}

/* ca_ndjson_ready says whether a record can be read without waiting, as pieces arrive. */
static void test_ready(void)
{
	int w = stdin_pipe();
	struct ca_ndjson_reader *r = ca_ndjson_open(0, NULL);
	jv v;
	CHECK(ca_ndjson_ready(r) == 0 && ca_ndjson_fd(r) >= 0);
	put(w, "\n  \n{\"a\":", 9);                        /* blank lines, half a record */
	CHECK(ca_ndjson_ready(r) == 0);
	put(w, "1}\n{\"b\"", 7);
	CHECK(ca_ndjson_ready(r) == 1);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_RECORD && ca_ndjson_line(r) == 3);
	jv_free(v);
	CHECK(ca_ndjson_ready(r) == 0);
	put(w, ":2}", 3);                                    /* the last line has no newline */
	CHECK(ca_ndjson_ready(r) == 0);
	close(w);
	CHECK(ca_ndjson_ready(r) == 1);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_RECORD && ca_ndjson_line(r) == 4);
	jv_free(v);
	CHECK(ca_ndjson_ready(r) == 1 && ca_ndjson_next(r, &v) == CA_NDJSON_EOF);
	ca_ndjson_close(r);

	/* gzip arriving through a pipe: the first byte alone does not decide. */
	unsigned char packed[256];
	z_stream z = {0};
	const char *line = "{\"c\":3}\n";
	deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
	z.next_in = (unsigned char *)line;
	z.avail_in = (uInt)strlen(line);
	z.next_out = packed;
	z.avail_out = sizeof packed;
	deflate(&z, Z_FINISH);
	size_t n = sizeof packed - z.avail_out;
	deflateEnd(&z);
	w = stdin_pipe();
	r = ca_ndjson_open(0, NULL);
	put(w, packed, 1);
	CHECK(ca_ndjson_ready(r) == 0);
	put(w, packed + 1, n - 1);
	CHECK(ca_ndjson_ready(r) == 1);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_RECORD && jv_get_kind(v) == JV_KIND_OBJECT);
	jv_free(v);
	CHECK(ca_ndjson_ready(r) == 0);
	close(w);
	CHECK(ca_ndjson_ready(r) == 1 && ca_ndjson_next(r, &v) == CA_NDJSON_EOF);
	ca_ndjson_close(r);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test-ndjson DIR\n");
		return 2;
	}
	char plain[4096], packed[4096];
	snprintf(plain, sizeof plain, "%s/a.ndjson", argv[1]);
	snprintf(packed, sizeof packed, "%s/b.ndjson.gz", argv[1]);
	FILE *f = fopen(plain, "w");
	if (!f)
		return 2;
	fputs("{\"n\":1}\n\n   \n{bad\n[1]\n", f);
	/* A 3 MB line, longer than the first read buffer, without a final newline. */
	fputs("{\"big\":\"", f);
	for (int i = 0; i < 3 << 20; i++)
		fputc('x', f);
	fputs("\"}", f);
	fclose(f);
	gzFile g = gzopen(packed, "wb");
	gzputs(g, "{\"n\":2}\r\n{\"n\":3}\n");
	gzclose(g);

	char *files[] = {plain, packed};
	struct ca_ndjson_reader *r = ca_ndjson_open(2, files);
	jv v;
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_RECORD);
	CHECK(ca_ndjson_line(r) == 1 && strcmp(ca_ndjson_name(r), plain) == 0);
	jv_free(v);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_BAD);     /* empty lines skipped */
	CHECK(ca_ndjson_line(r) == 4);
	jv_free(v);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_BAD);     /* not an object */
	CHECK(jv_get_kind(v) == JV_KIND_STRING && strstr(jv_string_value(v), "array"));
	jv_free(v);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_RECORD);
	jv big = jv_object_get(v, jv_string("big"));
	CHECK(jv_get_kind(big) == JV_KIND_STRING && jv_string_length_bytes(jv_copy(big)) == 3 << 20);
	jv_free(big);
	CHECK(ca_ndjson_line(r) == 6);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_RECORD);  /* gzip, CRLF */
	CHECK(ca_ndjson_line(r) == 1 && strcmp(ca_ndjson_name(r), packed) == 0);
	jv_free(v);
	const char *text;
	size_t len;
	CHECK(ca_ndjson_next_text(r, &text, &len) == CA_NDJSON_RECORD && len == 7 && memcmp(text, "{\"n\":3}", 7) == 0);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_EOF);
	CHECK(ca_ndjson_status(r) == 0);
	ca_ndjson_close(r);

	char missing[] = "/nonexistent/x.ndjson";
	char *files2[] = {missing};
	r = ca_ndjson_open(1, files2);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_EOF);
	CHECK(ca_ndjson_status(r) == 4);
	ca_ndjson_close(r);

	jv e = ca_ndjson_error_record("f", 7, "why");
	jv text2 = jv_dump_string(e, 0);
	CHECK(strcmp(jv_string_value(text2), "{\"error\":{\"file\":\"f\",\"line\":7,\"message\":\"why\"}}") == 0);
	jv_free(text2);

	/* 100 KB of control characters and of invalid UTF-8: still under 4 KB. */
	char *noise = malloc(100001);
	for (int i = 0; i < 100000; i++)
		noise[i] = i % 2 ? '\x01' : '\xff';
	noise[100000] = '\0';
	text2 = jv_dump_string(ca_ndjson_error_record(noise, 1, noise), 0);
	CHECK(jv_string_length_bytes(jv_copy(text2)) < 4096);
	jv_free(text2);
	free(noise);

	/* Lines over the limit are read past, not kept, and reported; the next line is read as ever. */
	char longer[4096];
	snprintf(longer, sizeof longer, "%s/c.ndjson", argv[1]);
	f = fopen(longer, "w");
	if (!f)
		return 2;
	fputs("{\"n\":1}\n[", f);
	for (int i = 0; i < 3 << 20; i++)
		fputc('1', f);
	fputs("]\n{\"n\":2}\n{\"x\":\"", f);
	for (int i = 0; i < 3 << 20; i++)
		fputc('y', f);
	fclose(f);  /* the last line has no newline */
	ca_ndjson_set_line_max(1 << 20);
	char *files3[] = {longer};
	r = ca_ndjson_open(1, files3);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_RECORD && ca_ndjson_line(r) == 1);
	jv_free(v);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_BAD && ca_ndjson_line(r) == 2);
	CHECK(jv_get_kind(v) == JV_KIND_STRING && strstr(jv_string_value(v), "line too long (3145730 bytes"));
	jv_free(v);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_RECORD && ca_ndjson_line(r) == 3);
	jv_free(v);
	CHECK(ca_ndjson_next_text(r, &text, &len) == CA_NDJSON_BAD && ca_ndjson_line(r) == 4);
	CHECK(strstr(text, "line too long (3145734 bytes; the limit is 1048576)") != NULL);
	CHECK(ca_ndjson_next(r, &v) == CA_NDJSON_EOF);
	ca_ndjson_close(r);
	CHECK(ca_ndjson_parse("{}", (1 << 20) + 1, &v) == CA_NDJSON_BAD);  /* never parsed: too long */
	jv_free(v);
	ca_ndjson_set_line_max(CA_NDJSON_LINE_MAX);
	test_ready();
	if (failures)
		fprintf(stderr, "test-ndjson: %d failures\n", failures);
	return failures != 0;
}
