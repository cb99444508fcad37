/* opt: see opt.h. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "ndjson.h"
#include "opt.h"

int ca_parse_double(const char *text, double *out, const char **why)
{
	char *end;
	errno = 0;
	if (!text || !*text) {
		*why = "empty number";
		return -1;
	}
	double v = strtod(text, &end);
	if (*end != '\0') {
		*why = "not a number";
		return -1;
	}
	if (errno == ERANGE || !isfinite(v)) {
		*why = "out of range";
		return -1;
	}
	*out = v;
	return 0;
}

int ca_parse_long(const char *text, long long *out, const char **why)
{
	char *end;
	errno = 0;
	if (!text || !*text) {
		*why = "empty number";
		return -1;
	}
	long long v = strtoll(text, &end, 10);
	if (*end != '\0') {
		*why = "not an integer";
		return -1;
	}
	if (errno == ERANGE) {
		*why = "out of range";
		return -1;
	}
	*out = v;
	return 0;
}

double ca_opt_double(const char *option, const char *text, double min, double max)
{
	double v;
	const char *why;
	if (ca_parse_double(text, &v, &why) != 0)
		ca_err_die(CA_EXIT_USAGE, "%s: '%s': %s", option, text, why);
	if (v < min || v > max)
		ca_err_die(CA_EXIT_USAGE, "%s: '%s': must be between %g and %g", option, text, min, max);
	return v;
}

long long ca_opt_long(const char *option, const char *text, long long min, long long max)
{
	long long v;
	const char *why;
	if (ca_parse_long(text, &v, &why) != 0)
		ca_err_die(CA_EXIT_USAGE, "%s: '%s': %s", option, text, why);
	if (v < min || v > max)
		ca_err_die(CA_EXIT_USAGE, "%s: '%s': must be between %lld and %lld", option, text, min, max);
	return v;
}

size_t ca_opt_double_list(const char *option, const char *text, double **items)
{
	size_t n = 0, cap = 8;
	double *out = ca_xmalloc(cap * sizeof *out);
	char *copy = ca_xstrdup(text), *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == cap)
			out = ca_xrealloc(out, (cap *= 2) * sizeof *out);
		out[n++] = ca_opt_double(option, tok, -INFINITY, INFINITY);
	}
	free(copy);
	if (n == 0)
		ca_err_die(CA_EXIT_USAGE, "%s: empty list", option);
	*items = out;
	return n;
}

void ca_opt_bad_usage(void)
{
	fprintf(stderr, "Try '%s --help' for more information.\n", ca_err_prog());
	exit(CA_EXIT_USAGE);
}

void ca_opt_common(int c, const char *usage)
{
	switch (c) {
	case 'h': fputs(usage, stdout); exit(ca_err_finish(CA_EXIT_OK));
	case 'P': ca_ndjson_set_progress(1); break;
	case 'u': ca_ndjson_set_unbuffered(1); break;
	default: fputs(usage, stderr); ca_opt_bad_usage();
	}
}
