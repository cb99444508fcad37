/* Unit tests of lib/json: dotted paths, typed getters, the raw-text scanner,
 * the number parser and the double formatter (round trip on random doubles). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_random(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void round_trip(double x)
{
	char buf[40];
	size_t n = ca_json_format_double(x, buf);
	buf[n] = '\0';
	double y = strtod(buf, NULL);
	if (!(y == x) || n >= 32) {
		fprintf(stderr, "format %.17g gave '%s' which reads back as %.17g\n", x, buf, y);
		failures++;
	}
	/* The text must be a JSON number that libjq reads as the same value. */
	jv v = jv_parse(buf);
	if (jv_get_kind(v) != JV_KIND_NUMBER || jv_number_value(v) != x) {
		fprintf(stderr, "format %.17g gave '%s' which jq does not read back\n", x, buf);
		failures++;
	}
	jv_free(v);
}

static void scan(const char *text, int want, const char *values)
{
	static const char *const keys[] = {"values", "reward"};
	struct ca_json_span spans[2];
	size_t close;
	int rc = ca_json_scan_object(text, strlen(text), keys, 2, spans, &close);
	if (rc != want) {
		fprintf(stderr, "scan '%s': got %d, want %d\n", text, rc, want);
		failures++;
		return;
	}
	if (rc == 0 && values) {
		if (!spans[0].start || strlen(values) != spans[0].len || memcmp(values, spans[0].start, spans[0].len) != 0) {
			fprintf(stderr, "scan '%s': wrong values span\n", text);
			failures++;
		}
		CHECK(text[close] == '}');
	}
}

int main(void)
{
	/* Paths and getters. */
	jv r = jv_parse("{\"verify\": {\"ok\": true, \"n\": 3}, \"s\": \"x\", \"inf\": null}");
	jv v = ca_json_path(r, "verify.ok");
	CHECK(jv_get_kind(v) == JV_KIND_TRUE);
	jv_free(v);
	v = ca_json_path(r, "verify.missing.deeper");
	CHECK(jv_get_kind(v) == JV_KIND_NULL);
	jv_free(v);
	jv verify = ca_json_get(r, "verify");
	double n = 0;
	CHECK(ca_json_number(verify, "n", &n) == 1 && n == 3);
	CHECK(ca_json_number(verify, "ok", &n) == -1);
	CHECK(ca_json_number(verify, "absent", &n) == 0);
	CHECK(ca_json_bool(verify, "ok") == 1);
	jv_free(verify);
	char *s = ca_json_strdup(r, "s");
	CHECK(s && strcmp(s, "x") == 0);
	free(s);
	/* A field copied only when it is of the kind asked for. */
	jv dst = ca_json_copy_field(jv_object(), r, "s", JV_KIND_STRING);
	dst = ca_json_copy_field(dst, r, "verify", JV_KIND_ARRAY);
	dst = ca_json_copy_field(dst, r, "absent", JV_KIND_STRING);
	dst = ca_json_copy_field(dst, jv_null(), "s", JV_KIND_STRING);
	jv want = jv_parse("{\"s\": \"x\"}");
	CHECK(jv_equal(dst, want));
	jv_free(r);

	/* The scanner accepts exactly what it can vouch for. */
	scan("{\"values\":[1,2.5,-3e2],\"reward\":1}", 0, "[1,2.5,-3e2]");
	scan("  { \"a\" : {\"values\": 5}, \"values\" : [ 1 , 2 ] }  ", 0, "[ 1 , 2 ]");
	scan("{}", 0, NULL);
	scan("{\"s\":\"a\\\"b\\u0041\\n\",\"t\":[true,false,null,{}]}", 0, NULL);
	scan("{\"values\":[1,2]", -1, NULL);            /* unterminated */
	scan("{\"values\":[1,2]} x", -1, NULL);         /* trailing garbage */
	scan("{\"values\":[01]}", -1, NULL);            /* leading zero */
	scan("{\"values\":[1.]}", -1, NULL);
	scan("{\"values\":[nan]}", -1, NULL);
	scan("{\"values\":[1],\"values\":[2]}", -1, NULL); /* duplicate wanted key */
	scan("{\"val\\u0075es\":[1]}", -1, NULL);       /* escaped key */
	scan("{\"s\":\"\xc3\xa9\"}", -1, NULL);           /* non-ASCII: jv decides */
	scan("{\"s\":\"a\tb\"}", -1, NULL);              /* raw control character */
	scan("[1,2]", -1, NULL);
	scan("{\"a\":[1,]}", -1, NULL);
	scan("{\"a\":tru}", -1, NULL);
	char deep[1000];
	size_t k = 0;
	k += (size_t)sprintf(deep, "{\"a\":");
	for (int i = 0; i < 300; i++)
		deep[k++] = '[';
	for (int i = 0; i < 300; i++)
		deep[k++] = ']';
	deep[k++] = '}';
	deep[k] = '\0';
	scan(deep, -1, NULL);

	/* Members for passing fields through: strict ones may be copied as written. */
	const char *line = " {\"a\": 1 , \"b\\u0041\":[01],\"c\":\"\xc3\xa9\\ud800\",\"d\":\"\xff\", \"e\" : {\"f\":nan}}";
	struct ca_json_member *members = NULL;
	size_t mcap = 0;
	CHECK(ca_json_members(line, strlen(line), &members, &mcap) == 5);
	CHECK(members[0].strict && members[0].key_plain && members[0].value.len == 1 && members[0].value.start[0] == '1');
	CHECK(!members[1].strict && !members[1].key_plain && members[1].value.len == 4);
	CHECK(members[2].strict && members[2].key_plain && members[2].value.len == 10);
	CHECK(!members[3].strict && members[3].key_plain);
	CHECK(!members[4].strict && members[4].value.len == 9);
	CHECK(ca_json_members("{}", 2, &members, &mcap) == 0);
	CHECK(ca_json_members("[1]", 3, &members, &mcap) == -1);
	const char *bad_utf8[] = {"{\"s\":\"\xc0\xaf\"}", "{\"s\":\"\xed\xa0\x80\"}", "{\"s\":\"\xf4\x90\x80\x80\"}", "{\"s\":\"\xe2\x82\"}"};
	for (size_t i = 0; i < sizeof bad_utf8 / sizeof *bad_utf8; i++)  /* overlong, surrogate, too high, cut short */
		CHECK(ca_json_members(bad_utf8[i], strlen(bad_utf8[i]), &members, &mcap) == 1 && !members[0].strict);
	free(members);
	/* A parse error is short: libjq's own quotes the whole text. */
	jv bad = ca_json_parse("{\"x\": \"unterminated", 20);
	jv why = jv_invalid_get_msg(bad);
	CHECK(jv_get_kind(why) == JV_KIND_STRING && !strstr(jv_string_value(why), "unterminated"));
	jv_free(why);

	/* Number arrays. */
	double *items = NULL;
	size_t cap = 0;
	const char *arr = "[0.1, -2, 3e-5,1E3 ,0]";
	long got = ca_json_number_array((struct ca_json_span){arr, strlen(arr)}, &items, &cap);
	CHECK(got == 5 && items[0] == 0.1 && items[1] == -2 && items[2] == 3e-5 && items[3] == 1000 && items[4] == 0);
	arr = "[]";
	CHECK(ca_json_number_array((struct ca_json_span){arr, 2}, &items, &cap) == 0);
	arr = "[1,\"x\"]";
	CHECK(ca_json_number_array((struct ca_json_span){arr, strlen(arr)}, &items, &cap) == -1);
	arr = "[1e400]";
	CHECK(ca_json_number_array((struct ca_json_span){arr, strlen(arr)}, &items, &cap) == -1);
	free(items);

	/* ca_json_strtod agrees with strtod on short and long decimals. */
	const char *numbers[] = {"0", "-0", "0.1", "123456789012345", "1234567890123456789", "0.000001",
		"3.141592653589793", "1e22", "9007199254740993", "0.30000000000000004", "-1.5", "2.2250738585072014e-308"};
	for (size_t i = 0; i < sizeof numbers / sizeof *numbers; i++) {
		char *e1, *e2;
		double a = ca_json_strtod(numbers[i], &e1), b = strtod(numbers[i], &e2);
		if (memcmp(&a, &b, sizeof a) != 0 || e1 != e2) {
			fprintf(stderr, "ca_json_strtod(%s) = %.17g, strtod %.17g\n", numbers[i], a, b);
			failures++;
		}
	}
	for (int i = 0; i < 200000; i++) {  /* random short decimals */
		char text[40];
		snprintf(text, sizeof text, "%.*f", (int)(next_random() % 12), (double)(next_random() % 2000000) / 997.0 - 1000);
		char *e1, *e2;
		double a = ca_json_strtod(text, &e1), b = strtod(text, &e2);
		if (a != b || e1 != e2) {
			fprintf(stderr, "ca_json_strtod(%s) = %.17g, strtod %.17g\n", text, a, b);
			failures++;
			break;
		}
	}

	/* The formatter: exact round trip, short where short is exact. */
	char buf[40];
	buf[ca_json_format_double(0.86, buf)] = '\0';
	CHECK(strcmp(buf, "0.86") == 0);
	buf[ca_json_format_double(-3, buf)] = '\0';
	CHECK(strcmp(buf, "-3") == 0);
	buf[ca_json_format_double(1.5e-7, buf)] = '\0';
	CHECK(strcmp(buf, "1.5e-07") == 0);
	buf[ca_json_format_double(NAN, buf)] = '\0';
	CHECK(strcmp(buf, "null") == 0);
	double specials[] = {0.1, 1e-300, 5e-324, 1.7976931348623157e308, 123456.789, 0.30000000000000004,
		9007199254740993.0, 1e15, 1e16, 1e17, 99999999999999999.0, 0.000099999999999999991, 1e-5, 1e-6, 1e11, 1e12};
	for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
		round_trip(specials[i]);
		round_trip(-specials[i]);
	}
	for (int i = 0; i < 300000; i++) {
		double x;
		uint64_t bits = next_random();
		if (i % 2) {  /* any finite double */
			memcpy(&x, &bits, sizeof x);
			if (!isfinite(x))
				continue;
		} else {      /* the range GAE produces */
			x = ((double)(bits >> 11) / 9007199254740992.0 - 0.5) * pow(10, (int)(next_random() % 12) - 6);
		}
		round_trip(x);
		if (failures > 10)
			break;
	}
	if (failures)
		fprintf(stderr, "test-json: %d failures\n", failures);
	return failures != 0;
}
