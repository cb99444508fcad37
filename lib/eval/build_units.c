/* build_units: the object cache of compile units and who may use torch's precompiled header; see build_impl.h. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_impl.h"
#include "file.h"
#include "paths.h"

enum { MAX_INCLUDE_DEPTH = 8 };

static int ident_char(int c)
{
	return isalnum(c) || c == '_';
}

/* Skip blanks, and line continuations, within one line. */
static const char *skip_blanks(const char *p, const char *end)
{
	while (p < end) {
		if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v')
			p++;
		else if (*p == '\\' && p + 1 < end && p[1] == '\n')
			p += 2;
		else
			break;
	}
	return p;
}

/* Skip blanks, newlines and comments. */
static const char *skip_space(const char *p, const char *end)
{
	for (;;) {
		while (p < end && isspace((unsigned char)*p))
			p++;
		if (p + 1 < end && p[0] == '/' && p[1] == '/') {
			while (p < end && *p != '\n')
				p++;
		} else if (p + 1 < end && p[0] == '/' && p[1] == '*') {
			const char *close = p + 2;
			while (close + 1 < end && !(close[0] == '*' && close[1] == '/'))
				close++;
			p = close + 1 < end ? close + 2 : end;
		} else {
			return p;
		}
	}
}

/* "a/b/../c" -> "a/c"; 0, or -1 when the path leaves the workspace. */
static int normalize(const char *path, char *out, size_t size)
{
	char buf[PATH_MAX];
	char *parts[PATH_MAX / 2];
	size_t n = 0;
	snprintf(buf, sizeof buf, "%s", path);
	for (char *save = NULL, *t = strtok_r(buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
		if (strcmp(t, ".") == 0)
			continue;
		if (strcmp(t, "..") == 0) {
			if (n == 0)
				return -1;
			n--;
			continue;
		}
		parts[n++] = t;
	}
	size_t len = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(out + len, len < size ? size - len : 0, "%s%s", i ? "/" : "", parts[i]);
	return len < size ? 0 : -1;
}

static ptrdiff_t find_source(const struct sources *src, const char *rel)
{
	for (size_t i = 0; i < src->n; i++)
		if (strcmp(src->v[i].rel, rel) == 0)
			return (ptrdiff_t)i;
	return -1;
}

/*
 * The workspace files an include of name from the file includer can reach:
 * the includer's directory, then -I. and -Ikernels. Each found is marked.
 * Returns the first found, or -1.
 */
static ptrdiff_t resolve(const struct sources *src, const char *includer, const char *name, unsigned char *mark)
{
	char dir[PATH_MAX], cand[PATH_MAX * 2], norm[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", includer);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		dir[0] = '\0';
	const char *bases[] = {dir, "", "kernels"};
	ptrdiff_t first = -1;
	for (int b = 0; b < 3; b++) {
		snprintf(cand, sizeof cand, "%s%s%s", bases[b], bases[b][0] ? "/" : "", name);
		if (normalize(cand, norm, sizeof norm) != 0)
			continue;
		ptrdiff_t i = find_source(src, norm);
		if (i >= 0) {
			if (mark)
				mark[i] = 1;
			if (first < 0)
				first = i;
		}
	}
	return first;
}

/* The name after an include-like word at p: 1 and [*name, *name_end), or 0 when none follows. */
static int include_name(const char *p, const char *end, const char **name, const char **name_end)
{
	p = skip_blanks(p, end);
	if (p >= end || (*p != '"' && *p != '<'))
		return 0;
	char close = *p == '"' ? '"' : '>';
	const char *q = ++p;
	while (q < end && *q != close && *q != '\n')
		q++;
	if (q >= end || *q != close || q == p)
		return 0;
	*name = p;
	*name_end = q;
	return 1;
}

/*
 * At most this many include directives are followed in a whole workspace;
 * past it every file counts for every unit. An honest workspace has tens;
 * the limit keeps the trusted process's work linear in the sources.
 */
enum { MAX_INCLUDES = 4096 };

/*
 * The workspace files source i names directly, marked in row (n bytes);
 * -1 when it cannot tell (a computed include, __has_include, an assembler
 * .incbin) or *budget of include directives ran out. One pass over the
 * text: whether a '#' came earlier on the line is carried along, not
 * looked for again, so a long line costs its length once.
 */
static int direct_includes(const struct sources *src, size_t i, unsigned char *row, size_t *budget)
{
	const char *text = src->v[i].data, *end = text + src->v[i].len;
	int hash_on_line = 0;
	for (const char *p = text; p < end; p++) {
		if (*p == '\n')
			hash_on_line = 0;
		else if (*p == '#')
			hash_on_line = 1;
		if (!isalpha((unsigned char)*p) && *p != '_')
			continue;
		if (p > text && ident_char((unsigned char)p[-1]))
			continue;
		const char *w = p;
		while (p < end && ident_char((unsigned char)*p))
			p++;
		size_t n = (size_t)(p - w);
		int include = (n == 7 && memcmp(w, "include", 7) == 0) || (n == 12 && memcmp(w, "include_next", 12) == 0) ||
			(n == 5 && memcmp(w, "embed", 5) == 0);
		if ((n == 13 && memcmp(w, "__has_include", 13) == 0) || (n == 11 && memcmp(w, "__has_embed", 11) == 0) ||
				(n == 6 && memcmp(w, "incbin", 6) == 0))
			return -1;
		if (include) {
			const char *name, *name_end;
			char buf[PATH_MAX];
			if (!include_name(p, end, &name, &name_end)) {
				if (hash_on_line)
					return -1;  /* #include MACRO */
			} else if ((size_t)(name_end - name) < sizeof buf) {
				if (*budget == 0)
					return -1;
				(*budget)--;
				snprintf(buf, sizeof buf, "%.*s", (int)(name_end - name), name);
				resolve(src, src->v[i].rel, buf, row);
			}
		}
		p--;
	}
	return 0;
}

void includes_find(const struct sources *src, struct includes *inc)
{
	size_t n = src->n, budget = MAX_INCLUDES;
	inc->n = n;
	inc->names = calloc(n ? n * n : 1, 1);
	inc->unknown = calloc(n ? n : 1, 1);
	inc->digest = calloc(n ? n : 1, sizeof *inc->digest);
	if (!inc->names || !inc->unknown || !inc->digest) {
		includes_free(inc);  /* every file counts, each hashed whole */
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct ca_sha256 h;
		inc->unknown[i] = direct_includes(src, i, inc->names + i * n, &budget) != 0;
		ca_sha256_init(&h);
		ca_sha256_update(&h, src->v[i].data, src->v[i].len);
		ca_sha256_final(&h, inc->digest[i]);
	}
}

void includes_free(struct includes *inc)
{
	free(inc->names);
	free(inc->unknown);
	free(inc->digest);
	inc->names = inc->unknown = NULL;
	inc->digest = NULL;
}

/*
 * Mark every workspace file unit reaches through includes (itself
 * included). -1 when it cannot tell: then every file counts.
 */
static int reach(const struct includes *inc, size_t unit, unsigned char *mark)
{
	size_t n = inc->n, top = 0;
	size_t *stack = inc->names ? malloc(n * sizeof *stack) : NULL;
	if (!stack)
		return -1;
	mark[unit] = 1;
	stack[top++] = unit;
	while (top > 0) {
		size_t i = stack[--top];
		if (inc->unknown[i]) {
			free(stack);
			return -1;
		}
		for (size_t j = 0; j < n; j++)
			if (inc->names[i * n + j] && !mark[j]) {
				mark[j] = 1;
				stack[top++] = j;
			}
	}
	free(stack);
	return 0;
}

void unit_key(const struct sources *src, const struct includes *known, size_t unit, const char *tools,
		const struct argv_list *argv, char hex[65])
{
	struct ca_sha256 h;
	struct includes own = {0};
	if (!known) {
		includes_find(src, &own);
		known = &own;
	}
	unsigned char *mark = calloc(src->n ? src->n : 1, 1);
	int all = !mark || reach(known, unit, mark) != 0;
	/* Each file by its own digest: a file every unit reaches is hashed once, not once per unit. */
	ca_sha256_init(&h);
	ca_sha256_string(&h, "ca-build unit 2");
	ca_sha256_string(&h, tools);
	argv_hash(&h, argv);
	ca_sha256_string(&h, src->v[unit].rel);
	for (size_t i = 0; i < src->n; i++) {
		if (!all && !mark[i])
			continue;
		unsigned char digest[32];
		if (known->digest) {
			memcpy(digest, known->digest[i], sizeof digest);
		} else {
			struct ca_sha256 f;
			ca_sha256_init(&f);
			ca_sha256_update(&f, src->v[i].data, src->v[i].len);
			ca_sha256_final(&f, digest);
		}
		ca_sha256_string(&h, src->v[i].rel);
		ca_sha256_update(&h, digest, sizeof digest);
	}
	ca_sha256_final_hex(&h, hex);
	includes_free(&own);
	free(mark);
}

static void unit_path(const char *cache, const char *key, char *path, size_t size)
{
	snprintf(path, size, "%s/units/%s.o", cache, key);
}

int unit_fetch(const char *cache, const char *key, const char *path)
{
	char from[PATH_MAX];
	size_t len;
	unit_path(cache, key, from, sizeof from);
	char *data = ca_file_read(from, CA_FILE_NOFOLLOW, (size_t)1 << 30, &len);
	if (!data)
		return -1;
	int r = ca_file_write(path, data, len, 0644);
	free(data);
	return r;
}

void unit_store(const char *cache, const char *key, const char *path)
{
	char to[PATH_MAX], tmp[PATH_MAX + 32], dir[PATH_MAX], unique[32];
	size_t len;
	char *data = ca_file_read(path, CA_FILE_NOFOLLOW, (size_t)1 << 30, &len);
	if (!data)
		return;
	snprintf(dir, sizeof dir, "%s/units", cache);
	ca_paths_mkdirs(dir, 0755);
	unit_path(cache, key, to, sizeof to);
	temp_suffix(unique);
	snprintf(tmp, sizeof tmp, "%s.%s", to, unique);
	if (ca_file_write(tmp, data, len, 0644) == 0 && rename(tmp, to) == 0)
		tmp[0] = '\0';
	if (tmp[0])
		unlink(tmp);
	free(data);
}

/* At p, a directive "#word": the word's start and end, else NULL. */
static const char *directive(const char *p, const char *end, const char **word_end)
{
	if (p >= end || *p != '#')
		return NULL;
	p = skip_blanks(p + 1, end);
	const char *w = p;
	while (p < end && ident_char((unsigned char)*p))
		p++;
	*word_end = p;
	return p > w ? w : NULL;
}

static int word_is(const char *w, const char *w_end, const char *s)
{
	return (size_t)(w_end - w) == strlen(s) && memcmp(w, s, strlen(s)) == 0;
}

/* One identifier after blanks at p: [*id, return). NULL when none. */
static const char *identifier(const char *p, const char *end, const char **id)
{
	p = skip_blanks(p, end);
	*id = p;
	while (p < end && ident_char((unsigned char)*p))
		p++;
	return p > *id ? p : NULL;
}

/* The end of the line at p. */
static const char *line_end(const char *p, const char *end)
{
	while (p < end && *p != '\n')
		p++;
	return p;
}

/* How far into a file its first #include is looked for: past it, no precompiled header. */
enum { MAX_PREFIX = 64 << 10 };

static int starts_with_torch(const struct sources *src, size_t i, int depth)
{
	const char *p = src->v[i].data;
	const char *end = p + (src->v[i].len < MAX_PREFIX ? src->v[i].len : MAX_PREFIX);
	const char *guard = NULL, *guard_end = NULL;
	if (depth > MAX_INCLUDE_DEPTH)
		return 0;
	for (;;) {
		const char *w, *w_end, *id, *id_end;
		p = skip_space(p, end);
		if (!(w = directive(p, end, &w_end)))
			return 0;
		if (word_is(w, w_end, "pragma")) {
			if (!(id_end = identifier(w_end, end, &id)) || !word_is(id, id_end, "once"))
				return 0;
			p = line_end(id_end, end);
		} else if (word_is(w, w_end, "ifndef") && !guard) {
			if (!(guard_end = identifier(w_end, end, &guard)))
				return 0;
			p = line_end(guard_end, end);
			const char *d = skip_space(p, end), *d_end;
			if (!(d = directive(d, end, &d_end)) || !word_is(d, d_end, "define") ||
					!(id_end = identifier(d_end, end, &id)) || id_end - id != guard_end - guard ||
					memcmp(id, guard, (size_t)(guard_end - guard)) != 0)
				return 0;
			p = line_end(id_end, end);
		} else if (word_is(w, w_end, "include")) {
			const char *name, *name_end;
			char buf[PATH_MAX];
			if (!include_name(w_end, end, &name, &name_end) || (size_t)(name_end - name) >= sizeof buf)
				return 0;
			snprintf(buf, sizeof buf, "%.*s", (int)(name_end - name), name);
			if (strcmp(buf, "torch/extension.h") == 0)
				return 1;
			ptrdiff_t j = resolve(src, src->v[i].rel, buf, NULL);
			return j >= 0 && (size_t)j != i && starts_with_torch(src, (size_t)j, depth + 1);
		} else {
			return 0;
		}
	}
}

int unit_starts_with_torch(const struct sources *src, size_t unit)
{
	return starts_with_torch(src, unit, 0);
}

int unit_includes_torch(const struct sources *src, size_t unit)
{
	const char *text = src->v[unit].data;
	return strstr(text, "torch/") || strstr(text, "ATen/") || strstr(text, "c10/");
}

int sources_shadow_headers(const struct sources *src, const char *const *dirs, size_t ndirs)
{
	for (size_t i = 0; i < src->n; i++) {
		const char *rel = src->v[i].rel;
		const char *base = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;
		if (!strchr(base, '.'))
			return 1;
		const char *names[2] = {rel, strncmp(rel, "kernels/", 8) == 0 ? rel + 8 : NULL};
		for (size_t d = 0; d < ndirs; d++) {
			for (int k = 0; k < 2; k++) {
				char path[PATH_MAX * 2];
				struct stat st;
				if (!names[k] || !dirs[d])
					continue;
				snprintf(path, sizeof path, "%s/%s", dirs[d], names[k]);
				if (stat(path, &st) == 0)
					return 1;
			}
		}
	}
	return 0;
}
