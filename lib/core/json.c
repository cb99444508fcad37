/* json: see json.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "file.h"
#include "json.h"

jv ca_json_get(jv obj, const char *key)
{
	if (jv_get_kind(obj) != JV_KIND_OBJECT)
		return jv_invalid();
	jv v = jv_object_get(jv_copy(obj), jv_string(key));
	return v;
}

int ca_json_int_array(jv a, double max, int **items)
{
	*items = NULL;
	if (jv_get_kind(a) != JV_KIND_ARRAY)
		return -1;
	int n = jv_array_length(jv_copy(a));
	int *x = ca_xmalloc(sizeof(int) * (size_t)(n ? n : 1));
	for (int i = 0; i < n; i++) {
		jv e = jv_array_get(jv_copy(a), i);
		double v = jv_get_kind(e) == JV_KIND_NUMBER ? jv_number_value(e) : -1;
		jv_free(e);
		if (!(v >= 0 && v < max) || v != floor(v)) {
			free(x);
			return -2;
		}
		x[i] = (int)v;
	}
	*items = x;
	return n;
}

jv ca_json_read_object(const char *path, char *why, size_t size)
{
	size_t len;
	char *text = ca_file_read(path, 0, 0, &len);
	if (!text) {
		ca_err_why(why, size, "%s: %s", path, strerror(errno));
		return jv_invalid();
	}
	jv v = jv_parse_sized(text, (int)len);
	free(text);
	if (jv_get_kind(v) != JV_KIND_OBJECT) {
		jv_free(v);
		ca_err_why(why, size, "%s: not a JSON object", path);
		return jv_invalid();
	}
	return v;
}

jv ca_json_path(jv obj, const char *path)
{
	jv cur = jv_copy(obj);
	const char *p = path;
	while (*p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (jv_get_kind(cur) != JV_KIND_OBJECT) {
			jv_free(cur);
			return jv_null();
		}
		jv next = jv_object_get(cur, jv_string_sized(p, (int)n));
		if (!jv_is_valid(next)) {
			jv_free(next);
			return jv_null();
		}
		cur = next;
		p += n + (dot ? 1 : 0);
		if (!dot)
			break;
	}
	return cur;
}

int ca_json_number(jv obj, const char *key, double *out)
{
	jv v = ca_json_get(obj, key);
	jv_kind kind = jv_get_kind(v);
	int rc;
	if (kind == JV_KIND_INVALID || kind == JV_KIND_NULL) {
		rc = 0;
	} else if (kind == JV_KIND_NUMBER && isfinite(jv_number_value(v))) {
		*out = jv_number_value(v);
		rc = 1;
	} else {
		rc = -1;
	}
	jv_free(v);
	return rc;
}

int ca_json_bool(jv obj, const char *key)
{
	jv v = ca_json_get(obj, key);
	jv_kind kind = jv_get_kind(v);
	jv_free(v);
	return kind == JV_KIND_TRUE ? 1 : kind == JV_KIND_FALSE ? 0 : -1;
}

char *ca_json_strdup(jv obj, const char *key)
{
	jv v = ca_json_get(obj, key);
	char *s = NULL;
	if (jv_get_kind(v) == JV_KIND_STRING)
		s = ca_xstrdup(jv_string_value(v));
	jv_free(v);
	return s;
}

jv ca_json_copy_field(jv dst, jv src, const char *key, jv_kind kind)
{
	jv v = ca_json_get(src, key);
	if (jv_get_kind(v) == kind)
		return jv_object_set(dst, jv_string(key), v);
	jv_free(v);
	return dst;
}

jv ca_json_num_or_null(double x)
{
	return isfinite(x) ? jv_number(x) : jv_null();
}

jv ca_json_parse(const char *text, size_t len)
{
	if (len > 0x7fffffff)
		return jv_invalid_with_msg(jv_string("text too long for libjq (over 2 GB)"));
	/* jv_parse_sized's steps, without the message that quotes the text. */
	jv_parser *parser = jv_parser_new(0);
	jv_parser_set_buf(parser, text, (int)len, 0);
	jv value = jv_parser_next(parser);
	if (jv_is_valid(value)) {
		jv next = jv_parser_next(parser);
		if (jv_is_valid(next)) {
			jv_free(value);
			jv_free(next);
			value = jv_invalid_with_msg(jv_string("Unexpected extra JSON values"));
		} else if (jv_invalid_has_msg(jv_copy(next))) {
			jv_free(value);
			value = next;
		} else {
			jv_free(next);
		}
	} else if (!jv_invalid_has_msg(jv_copy(value))) {
		jv_free(value);
		value = jv_invalid_with_msg(jv_string("Expected JSON value"));
	}
	jv_parser_free(parser);
	return value;
}

/* ---- the fast path over raw text ---- */

enum { SCAN_MAX_DEPTH = 200 };

struct scanner {
	const char *p, *end;
	int depth;
	int wide;  /* also vouch for UTF-8 and every \u escape (text libjq has accepted) */
};

static void scan_space(struct scanner *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/*
 * Length of the UTF-8 sequence at p when it is valid by RFC 3629 (shortest
 * form, no surrogates, at most U+10FFFF), else 0.
 */
static size_t utf8_length(const char *p, const char *end)
{
	const unsigned char *u = (const unsigned char *)p;
	unsigned char low = 0x80, high = 0xbf;
	size_t n;
	if (u[0] >= 0xc2 && u[0] <= 0xdf) {
		n = 2;
	} else if (u[0] >= 0xe0 && u[0] <= 0xef) {
		n = 3;
		low = u[0] == 0xe0 ? 0xa0 : 0x80;
		high = u[0] == 0xed ? 0x9f : 0xbf;
	} else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
		n = 4;
		low = u[0] == 0xf0 ? 0x90 : 0x80;
		high = u[0] == 0xf4 ? 0x8f : 0xbf;
	} else {
		return 0;
	}
	if ((size_t)(end - p) < n || u[1] < low || u[1] > high)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (u[i] < 0x80 || u[i] > 0xbf)
			return 0;
	return n;
}

/* A string at s->p; sets *escaped when it holds a backslash. */
static int scan_string(struct scanner *s, int *escaped)
{
	*escaped = 0;
	if (s->p >= s->end || *s->p != '"')
		return -1;
	s->p++;
	while (s->p < s->end) {
		unsigned char c = (unsigned char)*s->p;
		if (c == '"') {
			s->p++;
			return 0;
		}
		if (c < 0x20)
			return -1;
		if (c > 0x7f) {
			size_t n = s->wide ? utf8_length(s->p, s->end) : 0;
			if (n == 0)
				return -1;
			s->p += n;
			continue;
		}
		if (c == '\\') {
			*escaped = 1;
			if (s->end - s->p < 2)
				return -1;
			char e = s->p[1];
			if (e == 'u') {
				if (s->end - s->p < 6 || !is_hex(s->p[2]) || !is_hex(s->p[3]) || !is_hex(s->p[4]) || !is_hex(s->p[5]))
					return -1;
				/* Surrogates need pairing rules the scanner leaves to jv. */
				if (!s->wide && (s->p[2] == 'd' || s->p[2] == 'D') && strchr("89abcdefABCDEF", s->p[3]))
					return -1;
				s->p += 6;
			} else if (strchr("\"\\/bfnrt", e) && e) {
				s->p += 2;
			} else {
				return -1;
			}
			continue;
		}
		s->p++;
	}
	return -1;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int scan_number(struct scanner *s)
{
	const char *p = s->p, *e = s->end;
	if (p < e && *p == '-')
		p++;
	if (p >= e || !is_digit(*p))
		return -1;
	if (*p == '0')
		p++;
	else
		while (p < e && is_digit(*p))
			p++;
	if (p < e && *p == '.') {
		p++;
		if (p >= e || !is_digit(*p))
			return -1;
		while (p < e && is_digit(*p))
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < e && (*p == '+' || *p == '-'))
			p++;
		if (p >= e || !is_digit(*p))
			return -1;
		while (p < e && is_digit(*p))
			p++;
	}
	s->p = p;
	return 0;
}

static int scan_literal(struct scanner *s, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
		return -1;
	s->p += n;
	return 0;
}

static int scan_value(struct scanner *s);

static int scan_container(struct scanner *s, char open)
{
	char close = open == '{' ? '}' : ']';
	int escaped;
	if (++s->depth > SCAN_MAX_DEPTH)
		return -1;
	s->p++;
	scan_space(s);
	if (s->p < s->end && *s->p == close) {
		s->p++;
		s->depth--;
		return 0;
	}
	for (;;) {
		if (open == '{') {
			if (scan_string(s, &escaped) != 0)
				return -1;
			scan_space(s);
			if (s->p >= s->end || *s->p != ':')
				return -1;
			s->p++;
			scan_space(s);
		}
		if (scan_value(s) != 0)
			return -1;
		scan_space(s);
		if (s->p >= s->end)
			return -1;
		if (*s->p == ',') {
			s->p++;
			scan_space(s);
			continue;
		}
		if (*s->p != close)
			return -1;
		s->p++;
		s->depth--;
		return 0;
	}
}

static int scan_value(struct scanner *s)
{
	int escaped;
	if (s->p >= s->end)
		return -1;
	switch (*s->p) {
	case '{': case '[': return scan_container(s, *s->p);
	case '"': return scan_string(s, &escaped);
	case 't': return scan_literal(s, "true");
	case 'f': return scan_literal(s, "false");
	case 'n': return scan_literal(s, "null");
	default: return scan_number(s);
	}
}

/*
 * Past the '{' that opens an object and the white space after it: 1 when
 * a member follows, 0 when '}' does (an empty object), -1 when the text
 * opens no object.
 */
static int open_object(struct scanner *s)
{
	scan_space(s);
	if (s->p >= s->end || *s->p != '{')
		return -1;
	s->p++;
	scan_space(s);
	return s->p < s->end && *s->p == '}' ? 0 : 1;
}

int ca_json_scan_object(const char *text, size_t len, const char *const *keys, size_t nkeys,
	struct ca_json_span *spans, size_t *close)
{
	struct scanner s = {text, text + len, 1, 0};
	int escaped;
	for (size_t i = 0; i < nkeys; i++)
		spans[i] = (struct ca_json_span){NULL, 0};
	int any = open_object(&s);
	if (any < 0)
		return -1;
	if (any == 0)
		goto closed;
	for (;;) {
		const char *key = s.p + 1;
		if (scan_string(&s, &escaped) != 0 || escaped)
			return -1;
		size_t keylen = (size_t)(s.p - 1 - key);
		scan_space(&s);
		if (s.p >= s.end || *s.p != ':')
			return -1;
		s.p++;
		scan_space(&s);
		const char *value = s.p;
		if (scan_value(&s) != 0)
			return -1;
		for (size_t i = 0; i < nkeys; i++) {
			if (strlen(keys[i]) == keylen && memcmp(keys[i], key, keylen) == 0) {
				if (spans[i].start)
					return -1;
				spans[i] = (struct ca_json_span){value, (size_t)(s.p - value)};
			}
		}
		scan_space(&s);
		if (s.p >= s.end)
			return -1;
		if (*s.p == ',') {
			s.p++;
			scan_space(&s);
			continue;
		}
		if (*s.p != '}')
			return -1;
		break;
	}
closed:
	*close = (size_t)(s.p - text);
	s.p++;
	scan_space(&s);
	return s.p == s.end ? 0 : -1;
}

/* Past a string whatever it holds (libjq has accepted it). */
static int skip_string(struct scanner *s)
{
	for (s->p++; s->p < s->end; s->p++) {
		if (*s->p == '\\')
			s->p++;
		else if (*s->p == '"')
			return s->p++, 0;
	}
	return -1;
}

/* Past a value libjq accepted though the scanner would not vouch for it (nan, 01, +1, deep nesting). */
static int skip_value(struct scanner *s)
{
	if (s->p >= s->end)
		return -1;
	if (*s->p == '"')
		return skip_string(s);
	if (*s->p == '{' || *s->p == '[') {
		long depth = 0;
		while (s->p < s->end) {
			char c = *s->p;
			if (c == '"') {
				if (skip_string(s) != 0)
					return -1;
				continue;
			}
			s->p++;
			if (c == '{' || c == '[')
				depth++;
			else if ((c == '}' || c == ']') && --depth == 0)
				return 0;
		}
		return -1;
	}
	const char *from = s->p;
	while (s->p < s->end && *s->p != ',' && *s->p != '}' && *s->p != ']' && *s->p != ' ' && *s->p != '\t' &&
	       *s->p != '\n' && *s->p != '\r')
		s->p++;
	return s->p > from ? 0 : -1;
}

/* At the end of a member's value: white space, then ',' or '}'. */
static int at_member_end(struct scanner *s)
{
	scan_space(s);
	return s->p < s->end && (*s->p == ',' || *s->p == '}');
}

long ca_json_members(const char *text, size_t len, struct ca_json_member **members, size_t *cap)
{
	struct scanner s = {text, text + len, 1, 1};
	long n = 0;
	int any = open_object(&s);
	if (any <= 0)
		return any;
	for (;;) {
		if ((size_t)n == *cap)
			*members = ca_xrealloc(*members, (*cap = *cap ? 2 * *cap : 32) * sizeof **members);
		struct ca_json_member *m = &(*members)[n++];
		int escaped;
		if (s.p >= s.end || *s.p != '"')
			return -1;
		m->key.start = s.p;
		int strict = scan_string(&s, &escaped) == 0;
		if (!strict) {
			s.p = m->key.start;
			if (skip_string(&s) != 0)
				return -1;
		}
		m->key.len = (size_t)(s.p - m->key.start);
		m->key_plain = strict && !escaped;
		scan_space(&s);
		if (s.p >= s.end || *s.p != ':')
			return -1;
		s.p++;
		scan_space(&s);
		m->value.start = s.p;
		if (scan_value(&s) != 0 || !at_member_end(&s)) {
			strict = 0;
			s.p = m->value.start;
			if (skip_value(&s) != 0 || !at_member_end(&s))
				return -1;
		}
		m->value.len = (size_t)(s.p - m->value.start);
		while (m->value.len > 0 && (m->value.start[m->value.len - 1] == ' ' || m->value.start[m->value.len - 1] == '\t' ||
					   m->value.start[m->value.len - 1] == '\n' || m->value.start[m->value.len - 1] == '\r'))
			m->value.len--;
		m->strict = strict;
		if (*s.p == '}')
			return n;
		s.p++;
		scan_space(&s);
	}
}

/* Exact powers of ten: every 10^k for k <= 22 is a double. */
static const double exact_pow10[] = {
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/*
 * The digits at *p onto the mantissa, *p moved past them: how many there
 * were, or -1 once more than 15 are significant (no longer exact).
 */
static int read_digits(const char **p, unsigned long long *mantissa, int *digits)
{
	int n = 0;
	for (; is_digit(**p); (*p)++, n++) {
		if (*mantissa || **p != '0')
			(*digits)++;
		*mantissa = *mantissa * 10 + (unsigned)(**p - '0');
		if (*digits > 15)
			return -1;
	}
	return n;
}

double ca_json_strtod(const char *text, char **end)
{
	/*
	 * Clinger's fast path: with at most 15 significant digits and a
	 * decimal exponent of at most 22, digits and 10^k are exact doubles
	 * and one IEEE multiplication or division rounds correctly.
	 */
	const char *p = text;
	int negative = 0, digits = 0, scale = 0;
	unsigned long long mantissa = 0;
	if (*p == '-') {
		negative = 1;
		p++;
	}
	if (!is_digit(*p) || read_digits(&p, &mantissa, &digits) < 0)
		return strtod(text, end);
	if (*p == '.') {
		p++;
		int n = is_digit(*p) ? read_digits(&p, &mantissa, &digits) : -1;
		if (n < 0)
			return strtod(text, end);
		scale = -n;
	}
	if (*p == 'e' || *p == 'E')
		return strtod(text, end);
	if (scale < -22)
		return strtod(text, end);
	double x = (double)mantissa;
	if (scale < 0)
		x /= exact_pow10[-scale];
	*end = (char *)p;
	return negative ? -x : x;
}

long ca_json_number_array(struct ca_json_span span, double **items, size_t *cap)
{
	const char *p = span.start, *end = span.start + span.len;
	long n = 0;
	if (!p || p >= end || *p != '[')
		return -1;
	p++;
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	if (p < end && *p == ']')
		return 0;
	for (;;) {
		/* The span was validated by the scanner and is followed by more text, so strtod stops inside it. */
		char *stop;
		if (p >= end || !(is_digit(*p) || *p == '-'))
			return -1;
		double x = ca_json_strtod(p, &stop);
		if (stop == p || stop > end || !isfinite(x))
			return -1;
		if ((size_t)n == *cap) {
			*cap = *cap ? *cap * 2 : 1024;
			*items = ca_xrealloc(*items, *cap * sizeof **items);
		}
		(*items)[n++] = x;
		p = stop;
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
			p++;
		if (p < end && *p == ',') {
			p++;
			while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
				p++;
			continue;
		}
		if (p < end && *p == ']' && p + 1 == end)
			return n;
		return -1;
	}
}

/* Exact long double powers of ten: 5^27 < 2^64, so 10^k is exact up to k = 27. */
static const long double exact_pow10l[] = {
	1e0L, 1e1L, 1e2L, 1e3L, 1e4L, 1e5L, 1e6L, 1e7L, 1e8L, 1e9L, 1e10L, 1e11L, 1e12L, 1e13L,
	1e14L, 1e15L, 1e16L, 1e17L, 1e18L, 1e19L, 1e20L, 1e21L, 1e22L, 1e23L, 1e24L, 1e25L, 1e26L, 1e27L,
};

/* |x| * 10^k in long double (one rounding, 2^-64 relative), |k| <= 27. */
static long double scale10(double x, int k)
{
	return k >= 0 ? (long double)fabs(x) * exact_pow10l[k] : (long double)fabs(x) / exact_pow10l[-k];
}

/* Lay out the decimal digits * 10^(e10 - ndigits + 1) as %g would. */
static size_t layout(char *buf, int negative, unsigned long long digits, int ndigits, int e10)
{
	char d[24];
	size_t len = 0;
	while (ndigits > 1 && digits % 10 == 0) {
		digits /= 10;
		ndigits--;
	}
	for (int i = ndigits - 1; i >= 0; i--) {
		d[i] = (char)('0' + digits % 10);
		digits /= 10;
	}
	if (negative)
		buf[len++] = '-';
	if (e10 >= 0 && e10 < 17) {
		for (int i = 0; i <= e10; i++)
			buf[len++] = i < ndigits ? d[i] : '0';
		if (ndigits > e10 + 1) {
			buf[len++] = '.';
			for (int i = e10 + 1; i < ndigits; i++)
				buf[len++] = d[i];
		}
	} else if (e10 < 0 && e10 >= -5) {
		buf[len++] = '0';
		buf[len++] = '.';
		for (int i = 0; i < -e10 - 1; i++)
			buf[len++] = '0';
		for (int i = 0; i < ndigits; i++)
			buf[len++] = d[i];
	} else {
		buf[len++] = d[0];
		if (ndigits > 1) {
			buf[len++] = '.';
			for (int i = 1; i < ndigits; i++)
				buf[len++] = d[i];
		}
		len += (size_t)snprintf(buf + len, 8, "e%+03d", e10);
	}
	return len;
}

size_t ca_json_format_double(double x, char *buf)
{
	if (!isfinite(x)) {
		memcpy(buf, "null", 4);
		return 4;
	}
	if (x == 0) {
		buf[0] = '0';
		return 1;
	}
	if (fabs(x) < 1e15 && x == (double)(long long)x) {
		char tmp[24];
		long long v = (long long)x;
		unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
		size_t n = 0, len = 0;
		while (u) {
			tmp[n++] = (char)('0' + u % 10);
			u /= 10;
		}
		if (v < 0)
			buf[len++] = '-';
		while (n)
			buf[len++] = tmp[--n];
		return len;
	}
	/*
	 * 17 significant digits always identify a double. We get them from
	 * |x| * 10^(16 - e10) in 80-bit long double: the scaling is exact or
	 * off by 2^-64 relative, so the rounded 17-digit integer is within
	 * 0.5 + 0.01 units of the exact decimal, and a unit is at most 1e-16
	 * of |x|: still inside half an ulp (>= 1.1e-16 / 2 of |x|), so the
	 * text reads back as x. Outside the exact range of powers, snprintf.
	 * First, 15 and 16 digits are tried and checked exactly (Clinger's
	 * fast path), which gives the short form of values like 0.86.
	 */
	int e10 = (int)floor(log10(fabs(x)));
	if (e10 < -11 || e10 > 11)
		return (size_t)snprintf(buf, 32, "%.17g", x);
	long double scaled = scale10(x, 16 - e10);
	if (scaled >= 1e17L) {
		e10++;
		scaled = scale10(x, 16 - e10);
	} else if (scaled < 1e16L) {
		e10--;
		scaled = scale10(x, 16 - e10);
	}
	unsigned long long d15 = (unsigned long long)llrintl(scaled / 100);
	int m = e10 - 14;
	if (d15 < 1000000000000000ULL && m >= -22 && m <= 22) {
		double y = m < 0 ? (double)d15 / exact_pow10[-m] : (double)d15 * exact_pow10[m];
		if (y == fabs(x))
			return layout(buf, x < 0, d15, 15, e10);
	}
	/* 16 digits, checked the same way while they fit in 53 bits (leading digit 1 to 8). */
	unsigned long long d16 = (unsigned long long)llrintl(scaled / 10);
	m = e10 - 15;
	if (d16 < 9007199254740992ULL && d16 >= 1000000000000000ULL && m >= -22 && m <= 22) {
		double y = m < 0 ? (double)d16 / exact_pow10[-m] : (double)d16 * exact_pow10[m];
		if (y == fabs(x))
			return layout(buf, x < 0, d16, 16, e10);
	}
	unsigned long long d17 = (unsigned long long)llrintl(scaled);
	if (d17 >= 100000000000000000ULL)
		return (size_t)snprintf(buf, 32, "%.17g", x);
	return layout(buf, x < 0, d17, 17, e10);
}
