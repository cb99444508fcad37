/* build: see build.h. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "build.h"
#include "err.h"
#include "file.h"
#include "hash.h"
#include "opt.h"
#include "paths.h"
#include "proc.h"
#include "sandbox.h"

enum { MAX_SOURCES = 512, MAX_DEPTH = 6 };
static const size_t max_total_bytes = (size_t)32 << 20;
static const size_t max_log_bytes = (size_t)4 << 20;

struct source {
	char *rel;
	char *data;
	size_t len;
};

struct sources {
	struct source *v;
	size_t n;
	size_t bytes;
	char why[512];  /* set when the workspace cannot be used */
};

/* ---- small file helpers ---- */

static int copy_file(const char *from, const char *to, int mode)
{
	size_t len;
	char *data = ca_file_read(from, CA_FILE_NOFOLLOW, (size_t)1 << 30, &len);
	if (!data)
		return -1;
	int r = ca_file_write(to, data, len, mode);
	free(data);
	return r;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st; (void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) == 0 || errno == ENOENT ? 0 : 0;
	unlink(path);
	return 0;
}

static void remove_tree(const char *path)
{
	nftw(path, remove_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static int mkdirs_for(const char *file)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", file);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return 0;
	*slash = '\0';
	return ca_paths_mkdirs(dir, 0755);
}

static int has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* ---- collecting the sources that decide the build ---- */

static int by_rel(const void *a, const void *b)
{
	return strcmp(((const struct source *)a)->rel, ((const struct source *)b)->rel);
}

static void sources_free(struct sources *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].rel);
		free(s->v[i].data);
	}
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

static int add_source(struct sources *s, const char *root, const char *rel)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof path, "%s/%s", root, rel);
	if (lstat(path, &st) != 0) {
		snprintf(s->why, sizeof s->why, "%s: %s", rel, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(s->why, sizeof s->why, "%s: not a regular file (links are not followed)", rel);
		return -1;
	}
	if (s->n >= MAX_SOURCES) {
		snprintf(s->why, sizeof s->why, "more than %d source files", MAX_SOURCES);
		return -1;
	}
	size_t len;
	char *data = ca_file_read(path, CA_FILE_NOFOLLOW, max_total_bytes, &len);
	if (!data) {
		snprintf(s->why, sizeof s->why, "%s: %s", rel, strerror(errno));
		return -1;
	}
	s->bytes += len;
	if (s->bytes > max_total_bytes) {
		free(data);
		snprintf(s->why, sizeof s->why, "sources larger than %zu MB", max_total_bytes >> 20);
		return -1;
	}
	s->v = ca_xrealloc(s->v, (s->n + 1) * sizeof *s->v);
	s->v[s->n++] = (struct source){ca_xstrdup(rel), data, len};
	return 0;
}

static int wanted_in_kernels(const char *name)
{
	static const char *const skip[] = {".o", ".so", ".a", ".pyc", NULL};
	if (name[0] == '.')
		return 0;
	for (int i = 0; skip[i]; i++)
		if (has_suffix(name, skip[i]))
			return 0;
	return 1;
}

static int walk_kernels(struct sources *s, const char *root, const char *rel, int depth)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/%s", root, rel);
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);
	if (n < 0) {
		snprintf(s->why, sizeof s->why, "%s: %s", rel, strerror(errno));
		return -1;
	}
	int r = 0;
	for (int i = 0; i < n; i++) {
		char sub[PATH_MAX];
		struct stat st;
		const char *name = names[i]->d_name;
		if (r == 0 && wanted_in_kernels(name)) {
			snprintf(sub, sizeof sub, "%s/%s", rel, name);
			snprintf(dir, sizeof dir, "%s/%s", root, sub);
			if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
				if (depth + 1 > MAX_DEPTH) {
					/* Skipping it would build without files the candidate wrote: refuse instead. */
					snprintf(s->why, sizeof s->why, "%s: directories nested more than %d deep below kernels/",
						sub, MAX_DEPTH);
					r = -1;
				} else {
					r = walk_kernels(s, root, sub, depth + 1);
				}
			} else if (has_suffix(name, "build") || strcmp(name, "__pycache__") == 0) {
				/* build products of a hand build */
			} else {
				r = add_source(s, root, sub);
			}
		}
		free(names[i]);
	}
	free(names);
	return r;
}

static int any_file(const char *dir, const char *suffix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int found = 0;
	if (!d)
		return 0;
	while (!found && (e = readdir(d)))
		found = has_suffix(e->d_name, suffix);
	closedir(d);
	return found;
}

static const char *detect_flavour(const char *dir)
{
	char p[PATH_MAX];
	snprintf(p, sizeof p, "%s/kernels", dir);
	int has_kernels = any_file(p, ".cu") || any_file(p, ".cpp");
	int binding = any_file(p, "_binding.cpp");
	const char *markers[] = {"binding.cpp", "binding_registry.h", "kernels/binding.cpp", "kernels/binding_registry.h"};
	for (int i = 0; i < 4 && !binding; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, markers[i]);
		binding = exists(p);
	}
	if (binding)
		return "cuda-agent";
	if (has_kernels)
		return "ca";
	snprintf(p, sizeof p, "%s/model_new.py", dir);
	if (exists(p))
		return "kernelbench";
	return NULL;
}

static int collect(struct sources *s, const char *dir, const char *flavour)
{
	char p[PATH_MAX];
	struct stat st;
	/*
	 * Links below kernels/ are refused one by one; kernels/ itself must be
	 * checked here, or every path through it would lead wherever it points.
	 */
	snprintf(p, sizeof p, "%s/kernels", dir);
	int has_kernels = lstat(p, &st) == 0;
	if (has_kernels && S_ISLNK(st.st_mode)) {
		snprintf(s->why, sizeof s->why, "kernels: a symbolic link (links are not followed)");
		return -1;
	}
	if (has_kernels && !S_ISDIR(st.st_mode)) {
		snprintf(s->why, sizeof s->why, "kernels: not a directory");
		return -1;
	}
	if (strcmp(flavour, "kernelbench") == 0)
		return add_source(s, dir, "model_new.py");
	if (has_kernels && walk_kernels(s, dir, "kernels", 0) != 0)
		return -1;
	if (strcmp(flavour, "cuda-agent") == 0) {
		DIR *d = opendir(dir);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			const char *n = e->d_name;
			if (n[0] != '.' && (strcmp(n, "binding.cpp") == 0 || has_suffix(n, ".h") || has_suffix(n, ".cuh") ||
					has_suffix(n, ".hpp"))) {
				snprintf(p, sizeof p, "%s/%s", dir, n);
				if (lstat(p, &st) == 0 && !S_ISDIR(st.st_mode) && add_source(s, dir, n) != 0) {
					closedir(d);
					return -1;
				}
			}
		}
		if (d)
			closedir(d);
	}
	if (s->n > 1)
		qsort(s->v, s->n, sizeof *s->v, by_rel);
	return 0;
}

/* Does any source #include a header whose name contains needle? */
static const char *includes(const struct sources *s, const char *needle)
{
	for (size_t i = 0; i < s->n; i++) {
		const char *p = s->v[i].data;
		while ((p = strstr(p, "#include"))) {
			const char *eol = strchr(p, '\n');
			size_t len = eol ? (size_t)(eol - p) : strlen(p);
			char line[512];
			snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
			if (strstr(line, needle))
				return s->v[i].rel;
			p += 8;
		}
	}
	return NULL;
}

/* ---- tools and their versions, cached ---- */

static char *cache_root(const struct ca_build_options *opt)
{
	char buf[PATH_MAX];
	if (opt && opt->cache)
		snprintf(buf, sizeof buf, "%s", opt->cache);
	else
		snprintf(buf, sizeof buf, "%s/build", ca_paths_cache());
	ca_paths_mkdirs(buf, 0755);
	return ca_xstrdup(buf);
}

static char *find_nvcc(void)
{
	const char *env = getenv("NVCC");
	if (env && *env && access(env, X_OK) == 0)
		return ca_xstrdup(env);
	const char *path = getenv("PATH");
	char buf[PATH_MAX];
	for (const char *dir = path ? path : ""; dir && *dir;) {
		const char *colon = strchr(dir, ':');
		int len = colon ? (int)(colon - dir) : (int)strlen(dir);
		snprintf(buf, sizeof buf, "%.*s/nvcc", len, dir);
		if (len && access(buf, X_OK) == 0)
			return ca_xstrdup(buf);
		dir = colon ? colon + 1 : NULL;
	}
	const char *home = getenv("CUDA_HOME");
	snprintf(buf, sizeof buf, "%s/bin/nvcc", home && *home ? home : "/usr/local/cuda");
	if (access(buf, X_OK) == 0)
		return ca_xstrdup(buf);
	return NULL;
}

/* A value computed by a slow command, kept in the cache under a key of what it depends on. */
static char *cached_value(const char *cache, const char *name, const char *key_text)
{
	char hex[65], path[PATH_MAX];
	ca_sha256_hex(key_text, strlen(key_text), hex);
	snprintf(path, sizeof path, "%s/%s-%.16s", cache, name, hex);
	return ca_file_read(path, CA_FILE_NOFOLLOW, 1 << 20, NULL);
}

static void store_value(const char *cache, const char *name, const char *key_text, const char *value)
{
	char hex[65], path[PATH_MAX], tmp[PATH_MAX + 32];
	ca_sha256_hex(key_text, strlen(key_text), hex);
	snprintf(path, sizeof path, "%s/%s-%.16s", cache, name, hex);
	snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
	if (ca_file_write(tmp, value, strlen(value), 0644) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
}

static char *nvcc_version(const char *cache, const char *nvcc)
{
	struct stat st;
	char key[PATH_MAX + 64];
	if (stat(nvcc, &st) != 0)
		return NULL;
	snprintf(key, sizeof key, "%s %lld %lld", nvcc, (long long)st.st_size, (long long)st.st_mtime);
	char *v = cached_value(cache, "nvcc", key);
	if (v)
		return v;
	const char *argv[] = {nvcc, "--version", NULL};
	int status;
	v = ca_proc_output(argv, 60, 1 << 16, &status);
	if (!v || status != 0) {
		free(v);
		return NULL;
	}
	store_value(cache, "nvcc", key, v);
	return v;
}

static char boot_key[256];

const char *ca_build_default_arch(void)
{
	static char arch[16];
	if (arch[0])
		return arch;
	char *cache = cache_root(NULL);
	char *boot = ca_file_read("/proc/sys/kernel/random/boot_id", CA_FILE_NOFOLLOW, 256, NULL);
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	snprintf(boot_key, sizeof boot_key, "%s %s", boot ? boot : "", visible ? visible : "");
	free(boot);
	char *v = cached_value(cache, "arch", boot_key);
	if (v && strncmp(v, "sm_", 3) == 0 && strlen(v) < sizeof arch) {
		snprintf(arch, sizeof arch, "%s", v);
		free(v);
		free(cache);
		return arch;
	}
	free(v);
	snprintf(arch, sizeof arch, "sm_90");
	const char *argv[] = {"nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader", NULL};
	int status;
	char *out = ca_proc_output(argv, 20, 4096, &status);
	int major, minor;
	if (out && status == 0 && sscanf(out, "%d.%d", &major, &minor) == 2 && major > 0 && major < 100 && minor >= 0 && minor < 10)
		snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
	if (out)  /* nvidia-smi ran: remember its answer for this boot */
		store_value(cache, "arch", boot_key, arch);
	free(out);
	free(cache);
	return arch;
}

/* What the torch extension build needs from the interpreter, cached. */
struct torch_info {
	jv info;  /* {"version","include":[...],"lib":[...],"abi":0|1,"pyinclude","stamp"} */
};

static const char torch_probe[] =
	"import json, os, sysconfig, torch\n"
	"from torch.utils import cpp_extension as c\n"
	"v = os.path.join(os.path.dirname(torch.__file__), 'version.py')\n"
	"print(json.dumps({'version': torch.__version__, 'include': c.include_paths(), 'lib': c.library_paths(),\n"
	"  'abi': int(torch._C._GLIBCXX_USE_CXX11_ABI), 'pyinclude': sysconfig.get_paths()['include'],\n"
	"  'stamp': v + ' ' + str(int(os.stat(v).st_mtime))}))\n";

static int stamp_valid(const char *stamp)
{
	char path[PATH_MAX];
	long long mtime;
	const char *space = strrchr(stamp, ' ');
	struct stat st;
	if (!space || (size_t)(space - stamp) >= sizeof path)
		return 0;
	snprintf(path, sizeof path, "%.*s", (int)(space - stamp), stamp);
	mtime = strtoll(space + 1, NULL, 10);
	return stat(path, &st) == 0 && (long long)st.st_mtime == mtime;
}

static jv torch_flags(const char *cache, char *why, size_t why_len)
{
	const char *python = ca_paths_python();
	char *v = cached_value(cache, "torch", python);
	if (v) {
		jv info = jv_parse(v);
		free(v);
		jv stamp = jv_get_kind(info) == JV_KIND_OBJECT ? jv_object_get(jv_copy(info), jv_string("stamp")) : jv_invalid();
		int ok = jv_get_kind(stamp) == JV_KIND_STRING && stamp_valid(jv_string_value(stamp));
		jv_free(stamp);
		if (ok)
			return info;
		jv_free(info);
	}
	const char *argv[] = {python, "-c", torch_probe, NULL};
	struct ca_proc p;
	struct ca_buf out = {0}, err = {0};
	ca_proc_init(&p, argv);
	p.timeout_s = 120;
	int status = ca_proc_capture(&p, NULL, 0, &out, &err, 1 << 20);
	jv info = status == 0 ? jv_parse(out.data) : jv_invalid();
	if (jv_get_kind(info) != JV_KIND_OBJECT) {
		jv_free(info);
		char *tail = err.data ? strrchr(err.data, '\n') : NULL;
		while (tail && tail > err.data && tail[1] == '\0') {
			*tail = '\0';
			tail = strrchr(err.data, '\n');
		}
		snprintf(why, why_len, "cannot get torch's build flags from %s: %s", python,
			status < 0 ? strerror(errno) : tail ? tail + 1 : err.data ? err.data : "no output");
		ca_buf_free(&out);
		ca_buf_free(&err);
		return jv_invalid();
	}
	store_value(cache, "torch", python, out.data);
	ca_buf_free(&out);
	ca_buf_free(&err);
	return info;
}

/* ---- argv lists ---- */

struct argv_list {
	char **v;
	size_t n, cap;
};

static void arg(struct argv_list *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(struct argv_list *a, const char *fmt, ...)
{
	char buf[PATH_MAX + 256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (a->n + 2 > a->cap)
		a->v = ca_xrealloc(a->v, (a->cap = a->cap * 2 + 16) * sizeof *a->v);
	a->v[a->n++] = ca_xstrdup(buf);
	a->v[a->n] = NULL;
}

static void args_append(struct argv_list *a, const struct argv_list *b)
{
	for (size_t i = 0; i < b->n; i++)
		arg(a, "%s", b->v[i]);
}

static void args_free(struct argv_list *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	memset(a, 0, sizeof *a);
}

/* The flags as one string, for the cache key. */
static void hash_args(struct ca_sha256 *h, const struct argv_list *a)
{
	for (size_t i = 0; i < a->n; i++)
		ca_sha256_string(h, a->v[i]);
	ca_sha256_string(h, "--");
}

/* ---- error trimming ---- */

static int error_line(const char *line)
{
	return strstr(line, ": error") || strstr(line, "error:") || strstr(line, "fatal error") ||
		strstr(line, "undefined reference") || strstr(line, "undefined symbol") || strstr(line, "ptxas fatal") ||
		strstr(line, "nvlink error") || strstr(line, "catastrophic error") || strstr(line, ": fatal");
}

static void append(char **out, size_t *len, size_t *cap, const char *s, size_t n)
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
		append(out, len, cap, line + i, 1);
		i++;
	}
	append(out, len, cap, "\n", 1);
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
		append(&out, &len, &cap, note, strlen(note));
	}
	while (len > 0 && out[len - 1] == '\n')
		out[--len] = '\0';
	return out;
}

/* ---- limits on the compilers ---- */

struct limits {
	double time_s;       /* the whole build, wall clock */
	long long cpu_s;     /* CPU seconds of each compiler process */
	long long mem_mb;    /* address space of each compiler process */
	long long fsize_mb;  /* each file written, and the private /tmp */
};

/*
 * The heaviest honest build we know, a cold torch extension (CUDA-Agent's
 * layout), peaks at 1.6 GB resident and builds under a 2 GB address-space
 * limit, spends about 60 s of CPU in all (less in any one process) and
 * writes files of a few MB. A kernel that includes /dev/zero took a compiler to 4.2 GB
 * in 6.8 s with no limit. The wall clock stays under the 300 s that
 * ca-verify and ca-profile give the whole ca-build run, so the answer
 * comes from us, with its reason, and not from their timeout.
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
static int resolve_limits(const struct ca_build_options *opt, struct limits *lim, char *why, size_t why_len)
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

/* ---- the build ---- */

struct step {
	struct argv_list argv;
	char log_path[PATH_MAX];
};

static void set_result(struct ca_build_result *res, int ok, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void set_result(struct ca_build_result *res, int ok, int status, const char *fmt, ...)
{
	res->ok = ok;
	res->status = status;
	/* Our own failures say nothing about the sources; limit hits set it themselves. */
	res->transient = status == CA_EXIT_SYSTEM || status == CA_EXIT_USAGE;
	res->limit[0] = '\0';
	free(res->log);
	if (fmt) {
		char buf[4096];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(buf, sizeof buf, fmt, ap);
		va_end(ap);
		res->log = ca_xstrdup(buf);
	} else {
		res->log = ca_xstrdup("");
	}
}

/*
 * Run the steps, at most jobs at a time, each inside ca-sandbox unless
 * told otherwise; output to each step's log file. Returns 0 when all
 * succeeded, else the first failing status (124 timeout, 125 sandbox
 * failure, 126/127 could not run, other: compile error).
 */
static int run_steps(struct step *steps, size_t n, const char *build, const char *cache, const char *compiler,
		double deadline, int jobs, int no_sandbox, const struct limits *lim)
{
	struct ca_proc *procs = ca_xcalloc(n, sizeof *procs);
	char ***wrapped = ca_xcalloc(n, sizeof *wrapped);
	int *fds = ca_xcalloc(n, sizeof *fds);
	int first_bad = 0;
	size_t started = 0, finished = 0;
	struct ca_sandbox sb;
	ca_sandbox_init(&sb);
	sb.dir = build;
	/* rlimits are inherited: nvcc's cicc, ptxas and host compiler each get them whole. */
	sb.cpu_s = lim->cpu_s;
	sb.mem_mb = lim->mem_mb;
	sb.fsize_mb = lim->fsize_mb;
	/*
	 * The cache is not hidden: it holds libraries and logs, no secrets, and
	 * --hide would make the sandbox refuse to run on hosts without mount
	 * namespaces. Landlock and the uid keep the compiler from writing there.
	 */
	(void)cache;
	/* A compiler kept below /tmp would vanish under the sandbox's private /tmp: show it read-only. */
	char compiler_dir[PATH_MAX];
	const char *ro[1];
	snprintf(compiler_dir, sizeof compiler_dir, "%s", compiler);
	char *slash = strrchr(compiler_dir, '/');
	if (slash && slash != compiler_dir && strncmp(compiler_dir, "/tmp/", 5) == 0) {
		*slash = '\0';
		ro[0] = compiler_dir;
		sb.ro = ro;
		sb.nro = 1;
	}
	while (finished < n) {
		while (started < n && started - finished < (size_t)jobs && !first_bad) {
			size_t i = started++;
			double left = deadline - ca_proc_now();
			fds[i] = open(steps[i].log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			sb.time_s = left > 0.001 ? left : 0.001;
			ca_proc_init(&procs[i], NULL);
			if (no_sandbox) {
				procs[i].argv = (const char *const *)steps[i].argv.v;
				procs[i].cwd = build;
				procs[i].timeout_s = sb.time_s;
			} else {
				wrapped[i] = ca_sandbox_command(&sb, NULL, (const char *const *)steps[i].argv.v);
				procs[i].argv = (const char *const *)wrapped[i];
				procs[i].timeout_s = sb.time_s + 10;  /* the sandbox keeps the time; this is a backstop */
			}
			procs[i].in_mode = CA_PROC_NULL;
			procs[i].out_mode = fds[i] >= 0 ? CA_PROC_FD : CA_PROC_NULL;
			procs[i].out = fds[i];
			procs[i].err_mode = CA_PROC_TO_STDOUT;
			if (ca_proc_start(&procs[i]) != 0) {
				procs[i].status = errno == ENOENT ? 127 : 126;
				procs[i].pid = 0;
			}
		}
		if (finished == started)
			break;
		size_t i = finished++;
		int status = procs[i].pid > 0 ? ca_proc_finish(&procs[i]) : procs[i].status;
		if (procs[i].timed_out)
			status = CA_PROC_TIMEOUT_STATUS;
		if (fds[i] >= 0)
			close(fds[i]);
		if (status != 0 && !first_bad)
			first_bad = status;
	}
	for (size_t i = 0; i < n; i++)
		if (wrapped[i])
			ca_sandbox_command_free(wrapped[i]);
	free(wrapped);
	free(procs);
	free(fds);
	return first_bad;
}

/* Is every directory on the way to path searchable, and path readable, by others? */
static int world_readable(const char *path)
{
	char buf[PATH_MAX];
	struct stat st;
	snprintf(buf, sizeof buf, "%s", path);
	for (char *p = buf + strlen(buf); p > buf; p = strrchr(buf, '/')) {
		*p = '\0';
		if (!*buf)
			break;
		if (stat(buf, &st) != 0 || !(st.st_mode & S_IXOTH))
			return 0;
	}
	return stat(path, &st) == 0 && (st.st_mode & S_IROTH);
}

static int copy_tree(const char *from, const char *to)
{
	DIR *d = opendir(from);
	struct dirent *e;
	if (!d)
		return -1;
	ca_paths_mkdirs(to, 0755);
	int r = 0;
	while (r == 0 && (e = readdir(d))) {
		char a[PATH_MAX], b[PATH_MAX];
		struct stat st;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(a, sizeof a, "%s/%s", from, e->d_name);
		snprintf(b, sizeof b, "%s/%s", to, e->d_name);
		if (stat(a, &st) != 0)
			continue;
		r = S_ISDIR(st.st_mode) ? copy_tree(a, b) : copy_file(a, b, 0644);
	}
	closedir(d);
	return r;
}

static int jv_strings(jv array, struct argv_list *out, const char *prefix)
{
	if (jv_get_kind(array) != JV_KIND_ARRAY)
		return -1;
	jv_array_foreach(array, i, x) {
		if (jv_get_kind(x) == JV_KIND_STRING)
			arg(out, "%s%s", prefix, jv_string_value(x));
		jv_free(x);
	}
	return 0;
}

static char *result_text(const struct ca_build_result *res)
{
	jv j = ca_build_result_json(res);
	j = jv_object_delete(j, jv_string("cached"));
	j = jv_object_delete(j, jv_string("seconds"));
	j = jv_object_delete(j, jv_string("library"));
	j = jv_object_delete(j, jv_string("transient"));
	j = jv_object_delete(j, jv_string("limit"));
	jv s = jv_dump_string(j, 0);
	char *text = ca_xstrdup(jv_string_value(s));
	jv_free(s);
	return text;
}

static int load_cached(const char *entry, const char *libname, struct ca_build_result *res)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/result.json", entry);
	char *text = ca_file_read(path, CA_FILE_NOFOLLOW, 1 << 24, NULL);
	if (!text)
		return -1;
	jv j = jv_parse(text);
	free(text);
	if (jv_get_kind(j) != JV_KIND_OBJECT) {
		jv_free(j);
		return -1;
	}
	jv ok = jv_object_get(jv_copy(j), jv_string("ok"));
	jv log = jv_object_get(jv_copy(j), jv_string("log"));
	int good = jv_get_kind(ok) == JV_KIND_TRUE;
	int known = good || jv_get_kind(ok) == JV_KIND_FALSE;
	free(res->log);
	res->log = ca_xstrdup(jv_get_kind(log) == JV_KIND_STRING ? jv_string_value(log) : "");
	jv_free(ok);
	jv_free(log);
	jv_free(j);
	if (!known)
		return -1;
	if (!good) {
		/* An older ca-build cached limits and crashes as compile errors: build those again. */
		snprintf(path, sizeof path, "%s/build.log", entry);
		char *full = ca_file_read(path, CA_FILE_NOFOLLOW, max_log_bytes, NULL);
		const char *cause = ca_build_failure_cause(1, full ? full : res->log);
		free(full);
		if (cause) {
			/* Out of the way first, so the new build's entry can take its name. */
			char stale[PATH_MAX + 32];
			snprintf(stale, sizeof stale, "%s.stale-%d", entry, (int)getpid());
			if (rename(entry, stale) == 0)
				remove_tree(stale);
			return -1;
		}
	}
	res->ok = good;
	res->status = good ? CA_EXIT_OK : CA_EXIT_NEGATIVE;
	if (good) {
		snprintf(path, sizeof path, "%s/%s", entry, libname);
		if (!exists(path))
			return -1;
		res->library = ca_xstrdup(path);
	}
	res->cached = 1;
	return 0;
}

static void store_cached(const char *cache, const char *build, const char *libname, const char *full_log,
		struct ca_build_result *res)
{
	char tmp[PATH_MAX], entry[PATH_MAX], path[PATH_MAX], from[PATH_MAX];
	snprintf(entry, sizeof entry, "%s/%s", cache, res->hash);
	snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%d", cache, res->hash, (int)getpid());
	remove_tree(tmp);
	if (mkdir(tmp, 0755) != 0)
		return;
	if (res->ok) {
		snprintf(from, sizeof from, "%s/out/%s", build, libname);
		snprintf(path, sizeof path, "%s/%s", tmp, libname);
		if (copy_file(from, path, 0755) != 0) {
			set_result(res, 0, CA_EXIT_SYSTEM, "cannot copy the built library into the cache: %s", strerror(errno));
			remove_tree(tmp);
			return;
		}
	}
	snprintf(path, sizeof path, "%s/build.log", tmp);
	ca_file_write(path, full_log, strlen(full_log), 0644);
	char *text = result_text(res);
	snprintf(path, sizeof path, "%s/result.json", tmp);
	ca_file_write(path, text, strlen(text), 0644);
	free(text);
	if (rename(tmp, entry) != 0)
		remove_tree(tmp);  /* someone else stored the same build first: theirs is as good */
	if (res->ok) {
		snprintf(path, sizeof path, "%s/%s", entry, libname);
		res->library = ca_xstrdup(path);
	}
}

/* The first of paths whose filesystem has less than mb MB free, or NULL. */
static const char *short_of_space(const char *const *paths, size_t n, long long mb)
{
	struct statvfs vfs;
	for (size_t i = 0; i < n; i++)
		if (paths[i] && statvfs(paths[i], &vfs) == 0 && (double)vfs.f_bavail * (double)vfs.f_frsize < (double)mb * (1 << 20))
			return paths[i];
	return NULL;
}

/*
 * A failure that is not a compile error: which limit stopped the compiler,
 * or that it was killed or the disk is full (our fault, not the
 * candidate's: status 4). Either way transient, and nothing is cached.
 */
static void not_compiled(struct ca_build_result *res, const char *cause, int status, const struct limits *lim,
		const char *const *disks, size_t ndisks, const char *trimmed)
{
	char why[512];
	int code = CA_EXIT_NEGATIVE;
	const char *full_disk = NULL;
	if (strcmp(cause, "no space") == 0) {
		/* Where the disks have room, what filled up was the compiler's private /tmp, sized by --fsize. */
		full_disk = short_of_space(disks, ndisks, lim->fsize_mb);
		cause = full_disk ? NULL : "fsize";
	}
	if (!cause) {
		code = CA_EXIT_SYSTEM;
		snprintf(why, sizeof why, "no space left on device: %s has less than %lld MB free", full_disk, lim->fsize_mb);
	} else if (strcmp(cause, "time") == 0)
		snprintf(why, sizeof why, "compilation timed out: over the wall-clock limit of %g s for the whole build "
			"(--time, CA_BUILD_TIME_S)", lim->time_s);
	else if (strcmp(cause, "cpu") == 0)
		snprintf(why, sizeof why, "the compiler ran out of CPU time: over the limit of %lld s per compiler process "
			"(--cpu, CA_BUILD_CPU_S)", lim->cpu_s);
	else if (strcmp(cause, "memory") == 0)
		snprintf(why, sizeof why, "the compiler ran out of memory: over the limit of %lld MB of address space per "
			"compiler process (--mem, CA_BUILD_MEM_MB)", lim->mem_mb);
	else if (strcmp(cause, "fsize") == 0)
		snprintf(why, sizeof why, "the compiler's output grew too large: over the limit of %lld MB per file and in "
			"its private /tmp (--fsize, CA_BUILD_FSIZE_MB)", lim->fsize_mb);
	else {
		code = CA_EXIT_SYSTEM;
		cause = NULL;
		snprintf(why, sizeof why, "the compiler was killed by signal %d (%s)", status - 128, strsignal(status - 128));
	}
	set_result(res, 0, code, "%s%s%s", why, trimmed[0] ? "\n" : "", trimmed);
	res->transient = 1;
	snprintf(res->limit, sizeof res->limit, "%s", cause ? cause : "");
}

int ca_build_workspace(const char *dir, const struct ca_build_options *opt, struct ca_build_result *res)
{
	struct ca_build_options defaults = {0};
	struct sources src = {0};
	struct argv_list common = {0}, cu_flags = {0}, cxx_flags = {0}, link_flags = {0};
	struct step *steps = NULL;
	size_t nsteps = 0;
	char *cache = NULL, *nvcc = NULL, *version = NULL;
	char build[PATH_MAX] = "", wsdir[PATH_MAX];
	jv torch = jv_invalid();
	double t0 = ca_proc_now();
	if (!opt)
		opt = &defaults;
	memset(res, 0, sizeof *res);
	res->log = ca_xstrdup("");

	struct limits lim;
	char bad_limit[512];
	if (resolve_limits(opt, &lim, bad_limit, sizeof bad_limit) != 0) {
		set_result(res, 0, CA_EXIT_USAGE, "%s", bad_limit);
		goto done;
	}
	if (!realpath(dir, wsdir)) {
		set_result(res, 0, CA_EXIT_DATA, "%s: %s", dir, strerror(errno));
		goto done;
	}
	const char *flavour = opt->flavour && strcmp(opt->flavour, "auto") != 0 ? opt->flavour : detect_flavour(wsdir);
	if (!flavour) {
		set_result(res, 0, CA_EXIT_DATA, "%s: not a workspace: no kernels/*.cu, no binding.cpp and no model_new.py", dir);
		goto done;
	}
	if (strcmp(flavour, "ca") != 0 && strcmp(flavour, "cuda-agent") != 0 && strcmp(flavour, "kernelbench") != 0) {
		set_result(res, 0, CA_EXIT_DATA, "unknown flavour '%s'", flavour);
		goto done;
	}
	snprintf(res->flavour, sizeof res->flavour, "%s", flavour);
	const char *arch = opt->arch ? opt->arch : ca_build_default_arch();
	snprintf(res->arch, sizeof res->arch, "%s", arch);
	if (collect(&src, wsdir, flavour) != 0) {
		set_result(res, 0, CA_EXIT_DATA, "%s", src.why);
		goto done;
	}

	struct ca_sha256 h;
	ca_sha256_init(&h);
	ca_sha256_string(&h, "ca-build 1");
	ca_sha256_string(&h, flavour);
	if (strcmp(flavour, "kernelbench") == 0) {
		/* load_inline builds at run time; the hash still names the candidate. */
		for (size_t i = 0; i < src.n; i++) {
			ca_sha256_string(&h, src.v[i].rel);
			ca_sha256_update(&h, src.v[i].data, src.v[i].len);
		}
		ca_sha256_final_hex(&h, res->hash);
		set_result(res, 1, CA_EXIT_OK, NULL);
		goto done;
	}
	size_t ncompile = 0;
	for (size_t i = 0; i < src.n; i++)
		if (has_suffix(src.v[i].rel, ".cu") || has_suffix(src.v[i].rel, ".cpp") || has_suffix(src.v[i].rel, ".cc"))
			ncompile++;
	if (ncompile == 0) {
		set_result(res, 0, CA_EXIT_DATA, "%s: no .cu or .cpp files to compile in kernels/", dir);
		goto done;
	}
	const char *torch_header = includes(&src, "torch/") ? includes(&src, "torch/") : includes(&src, "ATen/");
	if (strcmp(flavour, "ca") == 0 && torch_header) {
		set_result(res, 0, CA_EXIT_NEGATIVE,
			"%s includes torch headers: the ca flavour builds without torch (extern \"C\" launchers called "
			"through ca_kernels); use the cuda-agent layout for torch extensions", torch_header);
		goto done;
	}
	nvcc = find_nvcc();
	if (!nvcc) {
		set_result(res, 0, CA_EXIT_SYSTEM, "nvcc not found (set NVCC or CUDA_HOME, or put it in PATH)");
		goto done;
	}
	cache = cache_root(opt);
	version = nvcc_version(cache, nvcc);
	if (!version) {
		set_result(res, 0, CA_EXIT_SYSTEM, "%s --version failed", nvcc);
		goto done;
	}
	char cuda_home[PATH_MAX];
	snprintf(cuda_home, sizeof cuda_home, "%s", nvcc);
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(cuda_home, '/');
		if (slash)
			*slash = '\0';
	}

	/* Flags. Paths in them are relative to the build directory, so logs are too. */
	const char *libname = strcmp(flavour, "ca") == 0 ? "libkernels.so" : "cuda_extension.so";
	arg(&common, "-O3");
	/* Recent torch headers require C++20; our own flavour stays at C++17 for the widest nvcc support. */
	arg(&common, strcmp(flavour, "cuda-agent") == 0 ? "-std=c++20" : "-std=c++17");
	arg(&common, "-I.");
	arg(&common, "-Ikernels");
	if (strcmp(flavour, "cuda-agent") == 0) {
		char why[1024];
		torch = torch_flags(cache, why, sizeof why);
		if (!jv_is_valid(torch)) {
			set_result(res, 0, CA_EXIT_SYSTEM, "%s", why);
			goto done;
		}
		jv abi = jv_object_get(jv_copy(torch), jv_string("abi"));
		jv version_tag = jv_object_get(jv_copy(torch), jv_string("version"));
		arg(&common, "-DTORCH_EXTENSION_NAME=cuda_extension");
		arg(&common, "-DTORCH_API_INCLUDE_EXTENSION_H");
		arg(&common, "-D_GLIBCXX_USE_CXX11_ABI=%d", jv_get_kind(abi) == JV_KIND_NUMBER ? (int)jv_number_value(abi) : 1);
		jv_strings(jv_object_get(jv_copy(torch), jv_string("include")), &common, "-I");
		jv pyinc = jv_object_get(jv_copy(torch), jv_string("pyinclude"));
		if (jv_get_kind(pyinc) == JV_KIND_STRING) {
			/* The sandbox user may not be able to read the interpreter's headers: bring a copy. */
			if (geteuid() == 0 && !opt->no_sandbox && !world_readable(jv_string_value(pyinc)))
				arg(&common, "-Ipyinclude");
			else
				arg(&common, "-I%s", jv_string_value(pyinc));
		}
		arg(&cu_flags, "-D__CUDA_NO_HALF_OPERATORS__");
		arg(&cu_flags, "-D__CUDA_NO_HALF_CONVERSIONS__");
		arg(&cu_flags, "-D__CUDA_NO_BFLOAT16_CONVERSIONS__");
		arg(&cu_flags, "-D__CUDA_NO_HALF2_OPERATORS__");
		arg(&cu_flags, "--expt-relaxed-constexpr");
		arg(&cxx_flags, "-I%s/include", cuda_home);
		jv_strings(jv_object_get(jv_copy(torch), jv_string("lib")), &link_flags, "-L");
		jv libs = jv_object_get(jv_copy(torch), jv_string("lib"));
		char libdir[PATH_MAX] = "";
		if (jv_get_kind(libs) == JV_KIND_ARRAY && jv_array_length(jv_copy(libs)) > 0) {
			jv first = jv_array_get(jv_copy(libs), 0);
			if (jv_get_kind(first) == JV_KIND_STRING)
				snprintf(libdir, sizeof libdir, "%s", jv_string_value(first));
			jv_free(first);
		}
		jv_free(libs);
		arg(&link_flags, "-lc10");
		arg(&link_flags, "-ltorch");
		arg(&link_flags, "-ltorch_cpu");
		arg(&link_flags, "-ltorch_python");
		char probe[PATH_MAX + 32];
		snprintf(probe, sizeof probe, "%s/libtorch_cuda.so", libdir);
		if (exists(probe)) {
			arg(&link_flags, "-lc10_cuda");
			arg(&link_flags, "-ltorch_cuda");
		}
		if (libdir[0])
			arg(&link_flags, "-Wl,-rpath,%s", libdir);
		arg(&link_flags, "-L%s/lib64", cuda_home);
		arg(&link_flags, "-lcudart");
		jv_free(abi);
		jv_free(version_tag);
		jv_free(pyinc);
	}
	if (includes(&src, "cublas"))
		arg(&link_flags, "-lcublas");
	if (includes(&src, "cublasLt"))
		arg(&link_flags, "-lcublasLt");
	if (includes(&src, "cudnn"))
		arg(&link_flags, "-lcudnn");

	ca_sha256_string(&h, arch);
	ca_sha256_string(&h, version);
	hash_args(&h, &common);
	hash_args(&h, &cu_flags);
	hash_args(&h, &cxx_flags);
	hash_args(&h, &link_flags);
	if (jv_is_valid(torch)) {
		jv t = jv_dump_string(jv_copy(torch), 0);
		ca_sha256_string(&h, jv_string_value(t));
		jv_free(t);
	}
	for (size_t i = 0; i < src.n; i++) {
		unsigned char size[8];
		for (int b = 0; b < 8; b++)
			size[b] = (unsigned char)((unsigned long long)src.v[i].len >> (8 * b));
		ca_sha256_string(&h, src.v[i].rel);
		ca_sha256_update(&h, size, sizeof size);
		ca_sha256_update(&h, src.v[i].data, src.v[i].len);
	}
	ca_sha256_final_hex(&h, res->hash);

	char entry[PATH_MAX];
	snprintf(entry, sizeof entry, "%s/%s", cache, res->hash);
	if (load_cached(entry, libname, res) == 0)
		goto done;
	free(res->library);
	res->library = NULL;

	/* A private build directory with exactly the hashed sources. */
	const char *tmp = getenv("TMPDIR");
	snprintf(build, sizeof build, "%s/ca-build.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(build)) {
		set_result(res, 0, CA_EXIT_SYSTEM, "cannot create a build directory: %s", strerror(errno));
		build[0] = '\0';
		goto done;
	}
	chmod(build, 0755);
	char path[PATH_MAX * 2];
	for (size_t i = 0; i < src.n; i++) {
		snprintf(path, sizeof path, "%s/%s", build, src.v[i].rel);
		if (mkdirs_for(path) != 0 || ca_file_write(path, src.v[i].data, src.v[i].len, 0644) != 0) {
			set_result(res, 0, CA_EXIT_SYSTEM, "cannot write %s: %s", path, strerror(errno));
			goto done;
		}
	}
	snprintf(path, sizeof path, "%s/out", build);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/obj", build);
	mkdir(path, 0755);
	for (size_t i = 0; i < common.n; i++) {
		if (strcmp(common.v[i], "-Ipyinclude") == 0) {
			jv pyinc = jv_object_get(jv_copy(torch), jv_string("pyinclude"));
			snprintf(path, sizeof path, "%s/pyinclude", build);
			int r = copy_tree(jv_string_value(pyinc), path);
			jv_free(pyinc);
			if (r != 0) {
				set_result(res, 0, CA_EXIT_SYSTEM, "cannot copy the Python headers: %s", strerror(errno));
				goto done;
			}
		}
	}

	/* Steps: one nvcc for a single .cu of the ca flavour, else compile in parallel and link. */
	steps = ca_xcalloc(ncompile + 1, sizeof *steps);
	size_t ncu = 0;
	for (size_t i = 0; i < src.n; i++)
		ncu += has_suffix(src.v[i].rel, ".cu");
	int single = strcmp(flavour, "ca") == 0 && ncompile == 1 && ncu == 1;
	for (size_t i = 0; i < src.n; i++) {
		const char *rel = src.v[i].rel;
		int cu = has_suffix(rel, ".cu");
		if (!cu && !has_suffix(rel, ".cpp") && !has_suffix(rel, ".cc"))
			continue;
		if (single && !cu)
			continue;
		struct step *s = &steps[nsteps];
		snprintf(s->log_path, sizeof s->log_path, "%s.log.%zu", build, nsteps);
		if (cu || strcmp(flavour, "ca") == 0) {
			arg(&s->argv, "%s", nvcc);
			if (single)
				arg(&s->argv, "-shared");
			else
				arg(&s->argv, "-c");
			arg(&s->argv, "-arch=%s", arch);
			arg(&s->argv, "-Xcompiler");
			arg(&s->argv, "-fPIC");
			args_append(&s->argv, &common);
			if (cu)
				args_append(&s->argv, &cu_flags);
		} else {
			arg(&s->argv, "g++");
			arg(&s->argv, "-c");
			arg(&s->argv, "-fPIC");
			args_append(&s->argv, &common);
			args_append(&s->argv, &cxx_flags);
		}
		if (single) {
			arg(&s->argv, "-o");
			arg(&s->argv, "out/%s", libname);
			arg(&s->argv, "%s", rel);
			args_append(&s->argv, &link_flags);
		} else {
			arg(&s->argv, "-o");
			arg(&s->argv, "obj/%zu.o", nsteps);
			arg(&s->argv, "%s", rel);
		}
		nsteps++;
	}
	int jobs = opt->jobs > 0 ? opt->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
	if (jobs < 1)
		jobs = 1;
	double deadline = t0 + lim.time_s;
	int status = run_steps(steps, nsteps, build, cache, nvcc, deadline, jobs, opt->no_sandbox, &lim);
	struct step link = {0};
	if (status == 0 && !single) {
		snprintf(link.log_path, sizeof link.log_path, "%s.log.link", build);
		arg(&link.argv, "%s", strcmp(flavour, "ca") == 0 ? nvcc : "g++");
		arg(&link.argv, "-shared");
		if (strcmp(flavour, "ca") == 0)
			arg(&link.argv, "-arch=%s", arch);
		arg(&link.argv, "-o");
		arg(&link.argv, "out/%s", libname);
		for (size_t i = 0; i < nsteps; i++)
			arg(&link.argv, "obj/%zu.o", i);
		args_append(&link.argv, &link_flags);
		status = run_steps(&link, 1, build, cache, nvcc, deadline, 1, opt->no_sandbox, &lim);
	}

	/* The log: every step's output in order. */
	size_t log_len = 0, log_cap = 1024;
	char *full = ca_xmalloc(log_cap);
	full[0] = '\0';
	for (size_t i = 0; i <= nsteps; i++) {
		const char *lp = i < nsteps ? steps[i].log_path : link.log_path;
		if (!lp[0])
			continue;
		size_t n;
		char *text = ca_file_read(lp, CA_FILE_NOFOLLOW, max_log_bytes, &n);
		if (text) {
			if (log_len + n < max_log_bytes)
				append(&full, &log_len, &log_cap, text, n);
			free(text);
		}
		unlink(lp);
	}
	args_free(&link.argv);
	char prefix[PATH_MAX + 2];
	snprintf(prefix, sizeof prefix, "%s/", build);
	const char *cause = ca_build_failure_cause(status, full);
	if (status == 0) {
		set_result(res, 1, CA_EXIT_OK, NULL);
		store_cached(cache, build, libname, full, res);
	} else if (status == CA_SANDBOX_SETUP_FAILED || status == 126 || status == 127) {
		char *trimmed = ca_build_trim_log(full, prefix, 2000);
		set_result(res, 0, CA_EXIT_SYSTEM, "could not run the compiler (status %d): %s", status, trimmed);
		free(trimmed);
	} else if (cause) {
		/* Not an answer about the sources alone: nothing is cached. */
		char *trimmed = ca_build_trim_log(full, prefix, 3000);
		const char *disks[] = {build, cache, "/tmp"};
		not_compiled(res, cause, status, &lim, disks, 3, trimmed);
		free(trimmed);
	} else {
		res->ok = 0;
		res->status = CA_EXIT_NEGATIVE;
		free(res->log);
		res->log = ca_build_trim_log(full, prefix, 4000);
		store_cached(cache, build, libname, full, res);
	}
	free(full);

done:
	res->seconds = ca_proc_now() - t0;
	for (size_t i = 0; i < nsteps; i++)
		args_free(&steps[i].argv);
	free(steps);
	if (build[0])
		remove_tree(build);
	args_free(&common);
	args_free(&cu_flags);
	args_free(&cxx_flags);
	args_free(&link_flags);
	jv_free(torch);
	sources_free(&src);
	free(cache);
	free(nvcc);
	free(version);
	return res->status;
}

void ca_build_result_free(struct ca_build_result *res)
{
	free(res->library);
	free(res->log);
	res->library = res->log = NULL;
}

jv ca_build_result_json(const struct ca_build_result *res)
{
	jv j = jv_object();
	j = jv_object_set(j, jv_string("ok"), jv_bool(res->ok));
	j = jv_object_set(j, jv_string("flavour"), res->flavour[0] ? jv_string(res->flavour) : jv_null());
	j = jv_object_set(j, jv_string("hash"), res->hash[0] ? jv_string(res->hash) : jv_null());
	j = jv_object_set(j, jv_string("cached"), jv_bool(res->cached));
	j = jv_object_set(j, jv_string("seconds"), jv_number(res->seconds));
	j = jv_object_set(j, jv_string("library"), res->library ? jv_string(res->library) : jv_null());
	j = jv_object_set(j, jv_string("log"), jv_string(res->log ? res->log : ""));
	j = jv_object_set(j, jv_string("arch"), res->arch[0] ? jv_string(res->arch) : jv_null());
	j = jv_object_set(j, jv_string("transient"), jv_bool(res->transient));
	j = jv_object_set(j, jv_string("limit"), res->limit[0] ? jv_string(res->limit) : jv_null());
	return j;
}
