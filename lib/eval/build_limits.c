/* build_limits: the compilers' limits, telling a limit from a compile error, and trimming their output; see build.h. */
#include <ctype.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"
#include "build_impl.h"
#include "err.h"
#include "opt.h"
#include "proc.h"

/* ---- error trimming ---- */

static int error_line(const char *line)
{
	return strstr(line, ": error") || strstr(line, "error:") || strstr(line, "fatal error") ||
		strstr(line, "undefined reference") || strstr(line, "undefined symbol") || strstr(line, "ptxas fatal") ||
		strstr(line, "nvlink error") || strstr(line, "catastrophic error") || strstr(line, ": fatal");
}

void log_append(char **out, size_t *len, size_t *cap, const char *s, size_t n)
{
	if (*len + n + 1 > *cap) {
		*cap = (*len + n + 1) * 2;
		*out = ca_xrealloc(*out, *cap);
	}
	memcpy(*out + *len, s, n);
	*len += n;
	(*out)[*len] = '\0';
}

/* Append line with every occurrence of prefix removed. */
static void append_stripped(char **out, size_t *len, size_t *cap, const char *line, size_t n, const char *prefix)
{
	size_t plen = prefix ? strlen(prefix) : 0;
	for (size_t i = 0; i < n;) {
		if (plen && n - i >= plen && memcmp(line + i, prefix, plen) == 0) {
			i += plen;
			continue;
		}
		log_append(out, len, cap, line + i, 1);
		i++;
	}
	log_append(out, len, cap, "\n", 1);
}

char *ca_build_trim_log(const char *log, const char *strip_prefix, size_t max_bytes)
{
	size_t len = 0, cap = 256, errors = 0, shown = 0, omitted = 0;
	char *out = ca_xmalloc(cap);
	out[0] = '\0';
	if (!log)
		return out;
	const char *p = log;
	int context = 0;
	while (*p) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		int err = n > 0 && error_line(strndupa(p, n < 4096 ? n : 4096));
		if (err) {
			errors++;
			if (len + n + 1 < max_bytes && shown < 20) {
				append_stripped(&out, &len, &cap, p, n < 1024 ? n : 1024, strip_prefix);
				shown++;
				context = 3;
			} else {
				omitted++;
				context = 0;
			}
		} else if (context > 0 && n > 0 && len + n + 1 < max_bytes) {
			append_stripped(&out, &len, &cap, p, n < 1024 ? n : 1024, strip_prefix);
			context--;
		} else {
			context = 0;
		}
		p = eol ? eol + 1 : p + n;
	}
	if (errors == 0) {
		/* No recognisable error: the last lines say most. */
		const char *start = log + strlen(log);
		int lines = 0;
		while (start > log && lines < 21) {
			start--;
			if (*start == '\n')
				lines++;
		}
		if (*start == '\n')
			start++;
		size_t n = strlen(start);
		if (n > max_bytes)
			start += n - max_bytes, n = max_bytes;
		for (const char *q = start; *q;) {
			const char *eol = strchr(q, '\n');
			size_t m = eol ? (size_t)(eol - q) : strlen(q);
			append_stripped(&out, &len, &cap, q, m, strip_prefix);
			q = eol ? eol + 1 : q + m;
		}
	} else if (omitted) {
		char note[96];
		snprintf(note, sizeof note, "[%zu more error lines not shown]\n", omitted);
		log_append(&out, &len, &cap, note, strlen(note));
	}
	while (len > 0 && out[len - 1] == '\n')
		out[--len] = '\0';
	return out;
}

/* ---- limits on the compilers ---- */


/*
 * The heaviest honest build we know, a cold torch extension (CUDA-Agent's
 * layout), peaks at 1.6 GB resident and builds under a 2 GB address-space
 * limit, spends about 60 s of CPU in all (less in any one process) and
 * writes files of a few MB. A kernel that includes /dev/zero took a compiler to 4.2 GB
 * in 6.8 s with no limit. ca-verify and ca-profile build in their own
 * process under the same limits: these are all a build gets there.
 */
static const struct limits default_limits = {240, 120, 4096, 256};
static const long long max_limit = 1 << 20;

static int env_limit(const char *name, long long *value, char *why, size_t why_len)
{
	const char *text = getenv(name), *reason;
	long long v;
	if (!text || !*text)
		return 0;
	if (ca_parse_long(text, &v, &reason) != 0) {
		snprintf(why, why_len, "%s: '%s': %s", name, text, reason);
		return -1;
	}
	if (v < 1 || v > max_limit) {
		snprintf(why, why_len, "%s: '%s': must be between 1 and %lld", name, text, max_limit);
		return -1;
	}
	*value = v;
	return 0;
}

/* Each limit from opt, else its CA_BUILD_* variable, else the default. */
int resolve_limits(const struct ca_build_options *opt, struct limits *lim, char *why, size_t why_len)
{
	*lim = default_limits;
	const char *text = getenv("CA_BUILD_TIME_S"), *reason = "must be between 0 and 1048576 seconds";
	if (text && *text && (ca_parse_double(text, &lim->time_s, &reason) != 0 || !(lim->time_s > 0) ||
			lim->time_s > max_limit)) {
		snprintf(why, why_len, "CA_BUILD_TIME_S: '%s': %s", text, reason);
		return -1;
	}
	if (env_limit("CA_BUILD_CPU_S", &lim->cpu_s, why, why_len) != 0 ||
			env_limit("CA_BUILD_MEM_MB", &lim->mem_mb, why, why_len) != 0 ||
			env_limit("CA_BUILD_FSIZE_MB", &lim->fsize_mb, why, why_len) != 0)
		return -1;
	if (opt->time_s > 0)
		lim->time_s = opt->time_s;
	if (opt->cpu_s > 0)
		lim->cpu_s = opt->cpu_s;
	if (opt->mem_mb > 0)
		lim->mem_mb = opt->mem_mb;
	if (opt->fsize_mb > 0)
		lim->fsize_mb = opt->fsize_mb;
	return 0;
}

/*
 * Lines the tools print when a limit stops them. where: 'S' the line
 * starts with text, 'E' it ends with it, 'T' it is a tool's own line (a
 * program name, without '/' or '.', then ':' or ' ') holding text. A
 * diagnostic about a source starts with the source's path, which has a
 * '/' or a '.', so an honest compile error never matches. A candidate can
 * still print such a line on purpose (static_assert and #pragma message
 * print newlines raw): these name only limits, the candidate's own doing,
 * never a fault of ours, which needs evidence from outside the log.
 */
static const struct {
	const char *cause;
	char where;
	const char *text;
} limit_lines[] = {
	{"cpu", 'S', "CPU time limit exceeded"},                          /* sh, for a child killed by SIGXCPU */
	{"cpu", 'S', "Internal error: CPU time limit exceeded"},           /* cicc's front end */
	{"cpu", 'T', "CPU time limit exceeded signal terminated program"}, /* gcc's driver */
	{"cpu", 'T', "died due to signal 24"},                             /* nvcc */
	{"fsize", 'S', "File size limit exceeded"},
	{"fsize", 'T', "File size limit exceeded signal terminated program"},
	{"fsize", 'T', "died due to signal 25"},
	{"memory", 'T', "out of memory"},  /* "cc1plus: out of memory allocating N bytes", "LLVM ERROR: out of memory" */
	{"memory", 'E', "): catastrophic error: out of memory"},  /* cicc's front end */
	{"memory", 'S', "terminate called after throwing an instance of 'std::bad_alloc'"},
	{"memory", 'T', "virtual memory exhausted"},
	{"memory", 'T', "Memory allocation failure"},  /* ptxas */
	{"memory", 'T', "Cannot allocate memory"},
	{"memory", 'T', "Killed signal terminated program"},  /* gcc's driver: SIGKILL, as the OOM killer sends */
	{"memory", 'T', "died due to signal 9"},
	{"no space", 'E', ": No space left on device"},  /* "...: error closing /tmp/ccX.s: No space ..." */
};

static int tool_line(const char *line, size_t n)
{
	size_t i = 0;
	while (i < n && (isalnum((unsigned char)line[i]) || line[i] == '_' || line[i] == '+' || line[i] == '-'))
		i++;
	return i > 0 && i < n && (line[i] == ':' || line[i] == ' ');
}

static int line_matches(const char *line, size_t n, char where, const char *text)
{
	size_t m = strlen(text);
	if (m > n)
		return 0;
	if (where == 'S')
		return memcmp(line, text, m) == 0;
	if (where == 'E')
		return memcmp(line + n - m, text, m) == 0;
	return tool_line(line, n) && memmem(line, n, text, m) != NULL;
}

const char *ca_build_failure_cause(int status, const char *log)
{
	if (status == 0)
		return NULL;
	if (status == CA_PROC_TIMEOUT_STATUS)
		return "time";
	if (status == 128 + SIGXCPU)
		return "cpu";
	if (status == 128 + SIGXFSZ)
		return "fsize";
	size_t best = sizeof limit_lines / sizeof limit_lines[0];
	for (const char *p = log ? log : ""; *p;) {
		const char *eol = strchr(p, '\n');
		size_t n = eol ? (size_t)(eol - p) : strlen(p);
		if (n > 0 && p[n - 1] == '\r')
			n--;
		for (size_t i = 0; i < best; i++)
			if (line_matches(p, n, limit_lines[i].where, limit_lines[i].text))
				best = i;
		p = eol ? eol + 1 : p + n;
	}
	if (best < sizeof limit_lines / sizeof limit_lines[0])
		return limit_lines[best].cause;
	if (status > 128 && status < 128 + 65)
		return "signal";
	return NULL;
}
