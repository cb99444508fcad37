/*
 * Unit tests of lib/ndjson: the reader over files given as arguments
 * (plain or gzip), line numbers, empty lines, malformed lines, a line
 * longer than the reader's first buffer, the error record's shape.
 *
 *   test-ndjson DIR     (a scratch directory for its input files)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ndjson.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

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
	if (failures)
		fprintf(stderr, "test-ndjson: %d failures\n", failures);
	return failures != 0;
}
