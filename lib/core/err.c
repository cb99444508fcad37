/* err: see err.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

static const char *program_name = "ca";
static jmp_buf *catcher;
static char caught[4096];

void ca_err_init(const char *argv0)
{
	const char *slash = strrchr(argv0, '/');
	program_name = slash ? slash + 1 : argv0;
}

const char *ca_err_prog(void) { return program_name; }

/*
 * A message is one line whatever it quotes: control characters (a newline
 * in a record's id, a terminal escape) are written as C escapes, so data
 * cannot forge a diagnostic line or drive the terminal.
 */
static void escape_controls(const char *in, char *out, size_t outsize)
{
	size_t n = 0;
	for (; *in && n + 5 < outsize; in++) {
		unsigned char c = (unsigned char)*in;
		if (c >= 0x20 && c != 0x7f) {
			out[n++] = (char)c;
			continue;
		}
		out[n++] = '\\';
		switch (c) {
		case '\n': out[n++] = 'n'; break;
		case '\r': out[n++] = 'r'; break;
		case '\t': out[n++] = 't'; break;
		default: n += (size_t)snprintf(out + n, outsize - n, "x%02x", c); break;
		}
	}
	out[n] = '\0';
}

static void vwarn(int errnum, const char *fmt, va_list ap)
{
	char buf[4096], line[4 * sizeof buf];
	vsnprintf(buf, sizeof buf, fmt, ap);
	escape_controls(buf, line, sizeof line);
	if (errnum)
		fprintf(stderr, "%s: %s: %s\n", program_name, line, strerror(errnum));
	else
		fprintf(stderr, "%s: %s\n", program_name, line);
	if (catcher) {
		if (errnum)
			snprintf(caught, sizeof caught, "%s: %s", buf, strerror(errnum));
		else
			snprintf(caught, sizeof caught, "%s", buf);
	}
}

void ca_err_catch(jmp_buf *to) { catcher = to; }

const char *ca_err_caught(void) { return caught; }

static noreturn void die_now(int status)
{
	fflush(stdout);
	if (catcher)
		longjmp(*catcher, status ? status : CA_EXIT_SYSTEM);
	exit(status);
}

void ca_err_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vwarn(0, fmt, ap);
	va_end(ap);
}

void ca_err_warn_sys(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;
	va_start(ap, fmt);
	vwarn(saved, fmt, ap);
	va_end(ap);
}

void ca_err_die(int status, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vwarn(0, fmt, ap);
	va_end(ap);
	die_now(status);
}

void ca_err_die_sys(int status, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;
	va_start(ap, fmt);
	vwarn(saved, fmt, ap);
	va_end(ap);
	die_now(status);
}

void ca_err_why(char *why, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
}

void *ca_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		ca_err_die(CA_EXIT_SYSTEM, "out of memory allocating %zu bytes", n);
	return p;
}

void *ca_xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		ca_err_die(CA_EXIT_SYSTEM, "out of memory allocating %zu x %zu bytes", n, size);
	return p;
}

void *ca_xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		ca_err_die(CA_EXIT_SYSTEM, "out of memory allocating %zu bytes", n);
	return q;
}

char *ca_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(ca_xmalloc(n), s, n);
}

void ca_free_strings(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

int ca_err_finish(int status)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		ca_err_warn_sys("write error on stdout");
		return CA_EXIT_SYSTEM;
	}
	return status;
}

int ca_err_worst(int a, int b)
{
	/* Signal-derived statuses (128+n) are the most serious of all. */
	return a > b ? a : b;
}
