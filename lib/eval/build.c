/* build: see build.h. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "build.h"
#include "build_impl.h"
#include "err.h"
#include "file.h"
#include "hash.h"
#include "opt.h"
#include "paths.h"
#include "proc.h"
#include "sandbox.h"

enum { MAX_SOURCES = 512, MAX_DEPTH = 6 };
static const size_t max_total_bytes = (size_t)32 << 20;

/* ---- small file helpers ---- */

int build_copy_file(const char *from, const char *to, int mode)
{
	size_t len;
	char *data = ca_file_read(from, CA_FILE_NOFOLLOW, (size_t)1 << 30, &len);
	if (!data)
		return -1;
	int r = ca_file_write(to, data, len, mode);
	free(data);
	return r;
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

/*
 * A suffix for a temporary name, unique to this process and this call:
 * threads of one process (ca-verify's slots) may store the same entry at
 * once, and a name by pid alone would have them write one file.
 */
void temp_suffix(char out[32])
{
	static atomic_uint counter;
	snprintf(out, 32, "%d-%u", (int)getpid(), atomic_fetch_add(&counter, 1));
}

int build_exists(const char *path)
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
	if ((size_t)st.st_size > max_total_bytes - s->bytes) {
		snprintf(s->why, sizeof s->why, "sources larger than %zu MB", max_total_bytes >> 20);
		return -1;
	}
	/* Checked again as opened: what was a file may have been replaced by a FIFO or a link since. */
	size_t len;
	char *data = ca_file_read(path, CA_FILE_NOFOLLOW | CA_FILE_REGULAR, max_total_bytes - s->bytes, &len);
	if (!data) {
		if (errno == EINVAL)
			snprintf(s->why, sizeof s->why, "%s: not a regular file (links are not followed)", rel);
		else if (errno == EFBIG)
			snprintf(s->why, sizeof s->why, "sources larger than %zu MB", max_total_bytes >> 20);
		else
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
		binding = build_exists(p);
	}
	if (binding)
		return "cuda-agent";
	if (has_kernels)
		return "ca";
	snprintf(p, sizeof p, "%s/model_new.py", dir);
	if (build_exists(p))
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

/*
 * The next "#include" in [p, end), or NULL. By memchr: memmem over the
 * rest of a file each time would cost the rest of the file each time
 * where the library checks its whole range first (ASan's does).
 */
static const char *next_include(const char *p, const char *end)
{
	while (p < end && (p = memchr(p, '#', (size_t)(end - p)))) {
		if (end - p >= 8 && memcmp(p, "#include", 8) == 0)
			return p;
		p++;
	}
	return NULL;
}

/*
 * Does any source #include a header whose name contains needle (within
 * the directive's first 511 bytes)? What was searched for one directive
 * is not searched again for the next, so a long line of directives costs
 * its length once.
 */
static const char *includes(const struct sources *s, const char *needle)
{
	enum { LINE = 511 };
	size_t m = strlen(needle);
	for (size_t i = 0; i < s->n; i++) {
		const char *p = s->v[i].data, *end = p + s->v[i].len, *searched = p;
		while ((p = next_include(p, end))) {
			size_t left = (size_t)(end - p), len = left < LINE ? left : LINE;
			const char *eol = memchr(p, '\n', len);
			const char *stop = eol ? eol : p + len;
			/* A match wholly before searched was looked for already. */
			const char *from = searched - p > (ptrdiff_t)m ? searched - (m - 1) : p;
			if (from < stop && memmem(from, (size_t)(stop - from), needle, m))
				return s->v[i].rel;
			if (stop > searched)
				searched = stop;
			p += 8;
		}
	}
	return NULL;
}

/* ---- tools and their versions, cached ---- */

char *build_cache_root(const struct ca_build_options *opt)
{
	char buf[PATH_MAX];
	if (opt && opt->cache)
		snprintf(buf, sizeof buf, "%s", opt->cache);
	else
		snprintf(buf, sizeof buf, "%s/build", ca_paths_cache());
	ca_paths_mkdirs(buf, 0755);
	return ca_xstrdup(buf);
}

static char *find_in_path(const char *name)
{
	const char *list = getenv("PATH");
	char dir[PATH_MAX], buf[PATH_MAX * 2];
	while (ca_paths_next_dir(&list, dir, sizeof dir)) {
		snprintf(buf, sizeof buf, "%s/%s", dir, name);
		if (*dir && access(buf, X_OK) == 0)
			return ca_xstrdup(buf);
	}
	return NULL;
}

/* The newest NAME-N (N a version number: clang++-16) in PATH's directories, or NULL. */
static char *find_versioned(const char *name)
{
	const char *list = getenv("PATH");
	char buf[PATH_MAX], *best = NULL;
	long best_v = -1;
	size_t n = strlen(name);
	while (ca_paths_next_dir(&list, buf, sizeof buf)) {
		DIR *d = *buf ? opendir(buf) : NULL;
		for (struct dirent *e; d && (e = readdir(d));) {
			const char *v = e->d_name + n + 1;
			if (strncmp(e->d_name, name, n) != 0 || e->d_name[n] != '-' || !*v || strspn(v, "0123456789") != strlen(v))
				continue;
			char full[PATH_MAX * 2];
			snprintf(full, sizeof full, "%s/%s", buf, e->d_name);
			long ver = strtol(v, NULL, 10);
			if (ver > best_v && access(full, X_OK) == 0) {
				free(best);
				best = ca_xstrdup(full);
				best_v = ver;
			}
		}
		if (d)
			closedir(d);
	}
	return best;
}

static char *find_nvcc(void)
{
	const char *env = getenv("NVCC");
	if (env && *env && access(env, X_OK) == 0)
		return ca_xstrdup(env);
	char *found = find_in_path("nvcc");
	if (found)
		return found;
	char buf[PATH_MAX];
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
	char hex[65], path[PATH_MAX], tmp[PATH_MAX + 32], unique[32];
	ca_sha256_hex(key_text, strlen(key_text), hex);
	snprintf(path, sizeof path, "%s/%s-%.16s", cache, name, hex);
	temp_suffix(unique);
	snprintf(tmp, sizeof tmp, "%s.%s", path, unique);
	if (ca_file_write(tmp, value, strlen(value), 0644) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
}

/* "TOOL --version", cached under the tool's path, size and time. NULL when it does not run. */
static char *tool_version(const char *cache, const char *tool)
{
	struct stat st;
	char key[PATH_MAX + 64];
	if (stat(tool, &st) != 0)
		return NULL;
	snprintf(key, sizeof key, "%s %lld %lld", tool, (long long)st.st_size, (long long)st.st_mtime);
	char *v = cached_value(cache, "version", key);
	if (v)
		return v;
	const char *argv[] = {tool, "--version", NULL};
	int status;
	v = ca_proc_output(argv, 60, 1 << 16, &status);
	if (!v || status != 0) {
		free(v);
		return NULL;
	}
	store_value(cache, "version", key, v);
	return v;
}

/*
 * The default architecture, found once per process: ca-verify builds in
 * several slots' threads at once, and each would otherwise write it.
 */
static pthread_once_t default_arch_once = PTHREAD_ONCE_INIT;
static char default_arch[16];

static void find_default_arch(void)
{
	char boot_key[256];
	char *cache = build_cache_root(NULL);
	char *boot = ca_file_read("/proc/sys/kernel/random/boot_id", CA_FILE_NOFOLLOW, 256, NULL);
	const char *visible = getenv("CUDA_VISIBLE_DEVICES");
	snprintf(boot_key, sizeof boot_key, "%s %s", boot ? boot : "", visible ? visible : "");
	free(boot);
	char *v = cached_value(cache, "arch", boot_key);
	if (v && strncmp(v, "sm_", 3) == 0 && strlen(v) < sizeof default_arch) {
		snprintf(default_arch, sizeof default_arch, "%s", v);
		free(v);
		free(cache);
		return;
	}
	free(v);
	snprintf(default_arch, sizeof default_arch, "sm_90");
	const char *argv[] = {"nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader", NULL};
	int status;
	char *out = ca_proc_output(argv, 20, 4096, &status);
	int major, minor;
	if (out && status == 0 && sscanf(out, "%d.%d", &major, &minor) == 2 && major > 0 && major < 100 && minor >= 0 && minor < 10)
		snprintf(default_arch, sizeof default_arch, "sm_%d%d", major, minor);
	if (out)  /* nvidia-smi ran: remember its answer for this boot */
		store_value(cache, "arch", boot_key, default_arch);
	free(out);
	free(cache);
}

const char *ca_build_default_arch(void)
{
	pthread_once(&default_arch_once, find_default_arch);
	return default_arch;
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

void argv_add(struct argv_list *a, const char *fmt, ...)
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

void argv_append(struct argv_list *a, const struct argv_list *b)
{
	for (size_t i = 0; i < b->n; i++)
		argv_add(a, "%s", b->v[i]);
}

/* "-Idir" into a compiler's argv, first after the compiler, before torch's own -I. */
void argv_insert_include(struct argv_list *a, const char *dir)
{
	argv_add(a, "-I%s", dir);
	char *flag = a->v[a->n - 1];
	memmove(a->v + 2, a->v + 1, (a->n - 2) * sizeof *a->v);
	a->v[1] = flag;
}

void argv_free(struct argv_list *a)
{
	ca_free_strings(a->v, a->n);
	memset(a, 0, sizeof *a);
}

/* The flags as one string, for the cache key. */
void argv_hash(struct ca_sha256 *h, const struct argv_list *a)
{
	for (size_t i = 0; i < a->n; i++)
		ca_sha256_string(h, a->v[i]);
	ca_sha256_string(h, "--");
}

/* ---- the build ---- */

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

/* Add path's directory (path itself when it is one) to out, unless it is there already. */
static void show_dir(const char *path, struct argv_list *out)
{
	char dir[PATH_MAX];
	struct stat st;
	if (stat(path, &st) != 0 || snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
		return;
	if (!S_ISDIR(st.st_mode))
		*strrchr(dir, '/') = '\0';
	for (size_t i = 0; i < out->n; i++)
		if (strcmp(dir, out->v[i]) == 0)
			return;
	argv_add(out, "%s", dir);
}

/*
 * The directories the steps name: the compiler's, torch's include and
 * library directories, the light header's. Those below /tmp (a checkout
 * and its .venv kept there) the sandbox's private /tmp would hide: it
 * shows them read-only (ca-sandbox --show, which decides which are
 * hidden and leaves the build's own).
 */
static void named_dirs(const struct step *steps, size_t n, const char *compiler, struct argv_list *out)
{
	static const char *const prefixes[] = {"-isystem", "-I", "-L", ""};
	if (compiler[0] == '/')
		show_dir(compiler, out);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < steps[i].argv.n; j++)
			for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++) {
				const char *arg = steps[i].argv.v[j];
				size_t len = strlen(prefixes[k]);
				if (strncmp(arg, prefixes[k], len) == 0 && arg[len] == '/') {
					show_dir(arg + len, out);
					break;
				}
			}
}

/*
 * Run the steps, at most jobs at a time, each inside ca-sandbox unless
 * told otherwise; output to each step's log file. Returns 0 when all
 * succeeded, else the first failing status (124 timeout, 125 sandbox
 * failure, 126/127 could not run, other: compile error).
 */
int run_steps(struct step *steps, size_t n, const char *build, const char *cache, const char *compiler,
		double deadline, int jobs, int no_sandbox, const struct limits *lim)
{
	struct ca_proc *procs = ca_xcalloc(n, sizeof *procs);
	char ***wrapped = ca_xcalloc(n, sizeof *wrapped);
	int *fds = ca_xcalloc(n, sizeof *fds), *ins = ca_xcalloc(n, sizeof *ins);
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
	struct argv_list shown = {0};
	named_dirs(steps, n, compiler, &shown);
	sb.show = (const char **)shown.v;
	sb.nshow = shown.n;
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
			ins[i] = steps[i].input ? open(steps[i].input, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
			if (ins[i] >= 0) {
				procs[i].in_mode = CA_PROC_FD;
				procs[i].in = ins[i];
			}
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
		if (ins[i] >= 0)
			close(ins[i]);
		if (status != 0 && !first_bad)
			first_bad = status;
	}
	for (size_t i = 0; i < n; i++)
		if (wrapped[i])
			ca_sandbox_command_free(wrapped[i]);
	free(wrapped);
	free(procs);
	free(fds);
	free(ins);
	argv_free(&shown);
	return first_bad;
}

/* Is every directory on the way to path searchable, and path readable, by others? */
int world_readable(const char *path)
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

/* May the sandbox's user run the program at path (when it is another user: we are root and sandboxed)? */
static int sandbox_can_run(const struct build *b, const char *path)
{
	struct stat st;
	if (geteuid() != 0 || b->opt->no_sandbox)
		return 1;
	return world_readable(path) && stat(path, &st) == 0 && (st.st_mode & S_IXOTH);
}

/* Each string of array (consumed), prefixed, onto out. */
static int jv_strings(jv array, struct argv_list *out, const char *prefix)
{
	if (jv_get_kind(array) != JV_KIND_ARRAY) {
		jv_free(array);
		return -1;
	}
	jv_array_foreach(array, i, x) {
		if (jv_get_kind(x) == JV_KIND_STRING)
			argv_add(out, "%s%s", prefix, jv_string_value(x));
		jv_free(x);
	}
	jv_free(array);
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
	j = jv_object_delete(j, jv_string("units"));
	j = jv_object_delete(j, jv_string("pch"));
	j = jv_object_delete(j, jv_string("light"));
	j = jv_object_delete(j, jv_string("linker"));
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
		char *full = ca_file_read(path, CA_FILE_NOFOLLOW, BUILD_MAX_LOG_BYTES, NULL);
		const char *cause = ca_build_failure_cause(1, full ? full : res->log);
		free(full);
		if (cause) {
			/* Out of the way first, so the new build's entry can take its name. */
			char stale[PATH_MAX + 32], unique[32];
			temp_suffix(unique);
			snprintf(stale, sizeof stale, "%s.stale-%s", entry, unique);
			if (rename(entry, stale) == 0)
				ca_file_remove_tree(stale);
			return -1;
		}
	}
	res->ok = good;
	res->status = good ? CA_EXIT_OK : CA_EXIT_NEGATIVE;
	if (good) {
		snprintf(path, sizeof path, "%s/%s", entry, libname);
		if (!build_exists(path))
			return -1;
		res->library = ca_xstrdup(path);
	}
	res->cached = 1;
	return 0;
}

static void store_cached(const char *cache, const char *build, const char *libname, const char *full_log,
		struct ca_build_result *res)
{
	char tmp[PATH_MAX], entry[PATH_MAX], path[PATH_MAX], from[PATH_MAX], unique[32];
	snprintf(entry, sizeof entry, "%s/%s", cache, res->hash);
	temp_suffix(unique);
	snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%s", cache, res->hash, unique);
	ca_file_remove_tree(tmp);
	if (mkdir(tmp, 0755) != 0)
		return;
	if (res->ok) {
		snprintf(from, sizeof from, "%s/out/%s", build, libname);
		snprintf(path, sizeof path, "%s/%s", tmp, libname);
		if (build_copy_file(from, path, 0755) != 0) {
			set_result(res, 0, CA_EXIT_SYSTEM, "cannot copy the built library into the cache: %s", strerror(errno));
			ca_file_remove_tree(tmp);
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
		ca_file_remove_tree(tmp);  /* someone else stored the same build first: theirs is as good */
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

static int compiled(const char *rel)
{
	return has_suffix(rel, ".cu") || has_suffix(rel, ".cpp") || has_suffix(rel, ".cc");
}

/* torch's flags for the cuda-agent flavour (include and library paths, ABI, libraries). */
static int torch_args(struct build *b)
{
	char why[1024];
	b->torch = torch_flags(b->cache, why, sizeof why);
	if (!jv_is_valid(b->torch)) {
		set_result(b->res, 0, CA_EXIT_SYSTEM, "%s", why);
		return -1;
	}
	jv abi = jv_object_get(jv_copy(b->torch), jv_string("abi"));
	argv_add(&b->common, "-DTORCH_EXTENSION_NAME=cuda_extension");
	argv_add(&b->common, "-DTORCH_API_INCLUDE_EXTENSION_H");
	argv_add(&b->common, "-D_GLIBCXX_USE_CXX11_ABI=%d", jv_get_kind(abi) == JV_KIND_NUMBER ? (int)jv_number_value(abi) : 1);
	jv_free(abi);
	jv_strings(jv_object_get(jv_copy(b->torch), jv_string("include")), &b->common, "-I");
	jv pyinc = jv_object_get(jv_copy(b->torch), jv_string("pyinclude"));
	if (jv_get_kind(pyinc) == JV_KIND_STRING) {
		/* The sandbox user may not be able to read the interpreter's headers: bring a copy. */
		if (geteuid() == 0 && !b->opt->no_sandbox && !world_readable(jv_string_value(pyinc)))
			argv_add(&b->common, "-Ipyinclude");
		else
			argv_add(&b->common, "-I%s", jv_string_value(pyinc));
	}
	jv_free(pyinc);
	argv_add(&b->cu_flags, "-D__CUDA_NO_HALF_OPERATORS__");
	argv_add(&b->cu_flags, "-D__CUDA_NO_HALF_CONVERSIONS__");
	argv_add(&b->cu_flags, "-D__CUDA_NO_BFLOAT16_CONVERSIONS__");
	argv_add(&b->cu_flags, "-D__CUDA_NO_HALF2_OPERATORS__");
	argv_add(&b->cu_flags, "--expt-relaxed-constexpr");
	argv_add(&b->cxx_flags, "-I%s/include", b->cuda_home);
	jv libs = jv_object_get(jv_copy(b->torch), jv_string("lib"));
	jv_strings(jv_copy(libs), &b->link_flags, "-L");
	char libdir[PATH_MAX] = "";
	if (jv_get_kind(libs) == JV_KIND_ARRAY && jv_array_length(jv_copy(libs)) > 0) {
		jv first = jv_array_get(jv_copy(libs), 0);
		if (jv_get_kind(first) == JV_KIND_STRING)
			snprintf(libdir, sizeof libdir, "%s", jv_string_value(first));
		jv_free(first);
	}
	jv_free(libs);
	argv_add(&b->link_flags, "-lc10");
	argv_add(&b->link_flags, "-ltorch");
	argv_add(&b->link_flags, "-ltorch_cpu");
	argv_add(&b->link_flags, "-ltorch_python");
	char probe[PATH_MAX + 32];
	snprintf(probe, sizeof probe, "%s/libtorch_cuda.so", libdir);
	if (build_exists(probe)) {
		argv_add(&b->link_flags, "-lc10_cuda");
		argv_add(&b->link_flags, "-ltorch_cuda");
	}
	if (libdir[0])
		argv_add(&b->link_flags, "-Wl,-rpath,%s", libdir);
	argv_add(&b->link_flags, "-L%s/lib64", b->cuda_home);
	argv_add(&b->link_flags, "-lcudart");
	return 0;
}

/* g++ as PATH finds it, as --cxx g++ would name it (the header's maker is told so), else "g++". */
static char *gxx_path(void)
{
	char *path = find_in_path("g++");
	return path ? path : ca_xstrdup("g++");
}

/*
 * The compiler of the cuda-agent flavour's C++ units, bindings (pybind11
 * glue around torch's headers): opt->cxx, else CA_CXX, else clang++ (or
 * the newest clang++-N) where PATH has one the sandbox's user can run,
 * else g++. clang keeps in the precompiled header the templates torch's
 * headers instantiate, which g++ instantiates again in every unit
 * (build_pch.c): with the header made, a new binding takes clang about
 * 2.8 s at -O1 where g++ takes 4.9-5.2 s (session 23, a 2-core CPU,
 * CUDA-Agent's relu_binding.cpp). A build
 * clang fails is built again with g++ (ca_build_workspace). clang's
 * version joins the tools, so its objects and libraries have keys of
 * their own. 0, or -1 when the compiler asked for is not there.
 */
/*
 * With clang, the link goes through a linker faster than GNU ld where
 * there is one: LLVM's (ld.lld, or the newest ld.lld-N), else gold. They
 * read torch's libraries (about a gigabyte) several times faster, lld
 * 0.1 s and gold 0.2 s against 0.65 s on a 2-core machine with the
 * header's archive (build_pch.c), gold 0.1 s against 0.23-0.35 s on an
 * H100 host without it. The version names the library (workspace_hash),
 * not the units' objects nor the precompiled header, which it does not
 * touch.
 */
static void choose_linker(struct build *b)
{
	static const char *const names[] = {"lld", "gold"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char prog[16];
		snprintf(prog, sizeof prog, "ld.%s", names[i]);
		char *path = find_in_path(prog);
		if (!path)
			path = find_versioned(prog);
		char *v = path && sandbox_can_run(b, path) ? tool_version(b->cache, path) : NULL;
		if (v) {
			b->linker = path;
			b->linker_name = names[i];
			b->linker_version = v;
			return;
		}
		free(path);
	}
}

static int choose_cxx(struct build *b)
{
	const char *want = b->opt->cxx ? b->opt->cxx : getenv("CA_CXX");
	int asked = want && *want;
	b->tools_gxx = strlen(b->tools);
	char *path;
	if (asked)
		path = strchr(want, '/') ? (access(want, X_OK) == 0 ? ca_xstrdup(want) : NULL) : find_in_path(want);
	else if (!(path = find_in_path("clang++")))
		path = find_versioned("clang++");
	if (asked && !path) {
		set_result(b->res, 0, CA_EXIT_USAGE, "%s: '%s': no such compiler in PATH", b->opt->cxx ? "--cxx" : "CA_CXX", want);
		return -1;
	}
	char *v = path && (asked || sandbox_can_run(b, path)) ? tool_version(b->cache, path) : NULL;
	if (asked && !v) {
		set_result(b->res, 0, CA_EXIT_SYSTEM, "%s --version failed", path);
		free(path);
		return -1;
	}
	b->clang = v && strstr(v, "clang version") != NULL;
	if (!asked && !b->clang) {
		free(path);
		free(v);
		b->cxx = gxx_path();
		return 0;
	}
	b->cxx = path;
	if (b->clang) {
		size_t len = strlen(b->tools) + strlen(v) + 2;
		char *tools = ca_xmalloc(len);
		snprintf(tools, len, "%s\n%s", b->tools, v);
		free(b->tools);
		b->tools = tools;
		choose_linker(b);
	}
	free(v);
	return 0;
}

/* The compilers, their versions and every flag. Paths in flags are relative to the build directory, so logs are too. */
static int prepare_flags(struct build *b)
{
	b->nvcc = find_nvcc();
	if (!b->nvcc) {
		set_result(b->res, 0, CA_EXIT_SYSTEM, "nvcc not found (set NVCC or CUDA_HOME, or put it in PATH)");
		return -1;
	}
	char *nv = tool_version(b->cache, b->nvcc);
	if (!nv) {
		set_result(b->res, 0, CA_EXIT_SYSTEM, "%s --version failed", b->nvcc);
		return -1;
	}
	/* nvcc's host compiler is g++ from PATH: its version decides objects too. */
	char *gxx = find_in_path("g++");
	char *gv = gxx ? tool_version(b->cache, gxx) : NULL;
	size_t len = strlen(nv) + (gv ? strlen(gv) : 0) + 2;
	b->tools = ca_xmalloc(len);
	snprintf(b->tools, len, "%s\n%s", nv, gv ? gv : "");
	free(nv);
	free(gv);
	free(gxx);
	snprintf(b->cuda_home, sizeof b->cuda_home, "%s", b->nvcc);
	for (int up = 0; up < 2; up++) {
		char *slash = strrchr(b->cuda_home, '/');
		if (slash)
			*slash = '\0';
	}
	int agent = strcmp(b->flavour, "cuda-agent") == 0;
	if (agent && choose_cxx(b) != 0)
		return -1;
	b->libname = agent ? "cuda_extension.so" : "libkernels.so";
	argv_add(&b->common, "-O3");
	/* Recent torch headers require C++20; our own flavour stays at C++17 for the widest nvcc support. */
	argv_add(&b->common, agent ? "-std=c++20" : "-std=c++17");
	argv_add(&b->common, "-I.");
	argv_add(&b->common, "-Ikernels");
	if (agent && torch_args(b) != 0)
		return -1;
	if (includes(&b->src, "cublas"))
		argv_add(&b->link_flags, "-lcublas");
	if (includes(&b->src, "cublasLt"))
		argv_add(&b->link_flags, "-lcublasLt");
	if (includes(&b->src, "cudnn"))
		argv_add(&b->link_flags, "-lcudnn");
	return 0;
}

/* How every candidate's name starts: the format of the name, then the flavour. */
static void name_begin(struct ca_sha256 *h, const char *flavour)
{
	ca_sha256_init(h);
	ca_sha256_string(h, "ca-build 1");
	ca_sha256_string(h, flavour);
}

/* The candidate's name: the flavour, architecture, compilers, flags, torch and every source. */
static void workspace_hash(struct build *b)
{
	struct ca_sha256 h;
	name_begin(&h, b->flavour);
	ca_sha256_string(&h, b->arch);
	ca_sha256_string(&h, b->tools);
	argv_hash(&h, &b->common);
	argv_hash(&h, &b->cu_flags);
	argv_hash(&h, &b->cxx_flags);
	argv_hash(&h, &b->link_flags);
	if (b->linker_version)
		ca_sha256_string(&h, b->linker_version);
	if (jv_is_valid(b->torch)) {
		jv t = jv_dump_string(jv_copy(b->torch), 0);
		ca_sha256_string(&h, jv_string_value(t));
		jv_free(t);
	}
	for (size_t i = 0; i < b->src.n; i++) {
		unsigned char size[8];
		for (int k = 0; k < 8; k++)
			size[k] = (unsigned char)((unsigned long long)b->src.v[i].len >> (8 * k));
		ca_sha256_string(&h, b->src.v[i].rel);
		ca_sha256_update(&h, size, sizeof size);
		ca_sha256_update(&h, b->src.v[i].data, b->src.v[i].len);
	}
	ca_sha256_final_hex(&h, b->res->hash);
}

/* A private directory below TMPDIR with dirs; the Python headers copied in when the flags ask for them. */
int make_private_dir(struct build *b, char *dir, size_t size, const char *prefix)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, size, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
	if (!mkdtemp(dir)) {
		set_result(b->res, 0, CA_EXIT_SYSTEM, "cannot create a build directory: %s", strerror(errno));
		dir[0] = '\0';
		return -1;
	}
	chmod(dir, 0755);
	char path[PATH_MAX * 2];
	for (size_t i = 0; i < b->common.n; i++) {
		if (strcmp(b->common.v[i], "-Ipyinclude") != 0)
			continue;
		jv pyinc = jv_object_get(jv_copy(b->torch), jv_string("pyinclude"));
		snprintf(path, sizeof path, "%s/pyinclude", dir);
		int r = ca_file_copy_tree(jv_string_value(pyinc), path, CA_FILE_SKIP_LINKS);
		jv_free(pyinc);
		if (r != 0) {
			set_result(b->res, 0, CA_EXIT_SYSTEM, "cannot copy the Python headers: %s", strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* The private build directory with exactly the hashed sources. */
static int make_build_dir(struct build *b)
{
	char path[PATH_MAX * 2];
	if (make_private_dir(b, b->build, sizeof b->build, "ca-build") != 0)
		return -1;
	for (size_t i = 0; i < b->src.n; i++) {
		snprintf(path, sizeof path, "%s/%s", b->build, b->src.v[i].rel);
		if (mkdirs_for(path) != 0 || ca_file_write(path, b->src.v[i].data, b->src.v[i].len, 0644) != 0) {
			set_result(b->res, 0, CA_EXIT_SYSTEM, "cannot write %s: %s", path, strerror(errno));
			return -1;
		}
	}
	snprintf(path, sizeof path, "%s/out", b->build);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/obj", b->build);
	mkdir(path, 0755);
	return 0;
}

/* The C++ command line (b->cxx) of a unit of the cuda-agent flavour, without source and output. */
void cxx_command(struct build *b, struct argv_list *a)
{
	argv_add(a, "%s", b->cxx ? b->cxx : "g++");
	argv_add(a, "-fPIC");
	argv_append(a, &b->common);
	/*
	 * The cuda-agent flavour's g++ units are bindings, pybind11 glue
	 * around torch's headers, and most of their compile is code
	 * generation of that glue (session 22, a new relu_binding.cpp with
	 * the header made, on a 2-core CPU: 6.1-7.6 s at -O3, 4.9-5.2 s at
	 * -O1); a call through it costs the same (about 0.1 us). The header
	 * is made with the same command (build_pch.c), so it matches. clang
	 * too: at -O0 its glue costs 0.6 us a call against -O1's 0.1 (session
	 * 23, a pybind11 call with one tensor, CPU).
	 */
	if (!strcmp(b->flavour, "cuda-agent"))
		argv_add(a, "-O1");
	argv_append(a, &b->cxx_flags);
}

/*
 * ca's lighter torch/extension.h (lib/py/light, shared with the runner's
 * load_inline builds): torch/python.h for g++ units, torch/types.h for
 * CUDA ones, not torch's whole C++ frontend. The cuda-agent flavour's g++
 * units and the .cu units that name torch's headers compile with it
 * first; a build that fails with it is built again without
 * (ca_build_workspace). Not when CA_LIGHT_HEADERS=0, nor where the
 * sandbox's user could not read it.
 */
static void light_dir(struct build *b)
{
	char dir[PATH_MAX], header[PATH_MAX + 32];
	const char *off = getenv("CA_LIGHT_HEADERS");
	b->light[0] = '\0';
	if (strcmp(b->flavour, "cuda-agent") != 0 || (off && strcmp(off, "0") == 0) || b->opt->no_light)
		return;
	snprintf(dir, sizeof dir, "%s/light", ca_paths_pydir());
	snprintf(header, sizeof header, "%s/torch/extension.h", dir);
	struct stat st;
	if (access(header, R_OK) != 0 || stat(header, &st) != 0)
		return;
	if (geteuid() == 0 && !b->opt->no_sandbox && !(world_readable(dir) && (st.st_mode & S_IROTH)))
		return;
	snprintf(b->light, sizeof b->light, "%s", dir);
}

/*
 * A .cu unit that includes torch's headers compiles through ca-nvcc
 * (cudafe++ and cicc side by side, the object nvcc's: ca-nvcc(1)), told
 * which nvcc we chose, unless CA_NVCC_PARALLEL=0 or the sandbox's user
 * could not run it. Done after the unit's key is taken, so the key is the
 * same either way.
 */
static void through_ca_nvcc(struct build *b, struct step *s)
{
	char path[PATH_MAX];
	const char *parallel = getenv("CA_NVCC_PARALLEL");
	snprintf(path, sizeof path, "%s/ca-nvcc", ca_paths_bindir());
	if ((parallel && strcmp(parallel, "0") == 0) || access(path, X_OK) != 0 || strncmp(path, "/tmp/", 5) == 0)
		return;
	if (!sandbox_can_run(b, path))
		return;
	struct argv_list a = {0};
	argv_add(&a, "env");
	argv_add(&a, "CA_NVCC_REAL=%s", b->nvcc);
	argv_add(&a, "%s", path);
	for (size_t i = 1; i < s->argv.n; i++)
		argv_add(&a, "%s", s->argv.v[i]);
	argv_free(&s->argv);
	s->argv = a;
}

/* One step per unit (or one nvcc -shared for a single .cu of the ca flavour); cached units are fetched. */
static void plan_steps(struct build *b)
{
	size_t ncompile = 0, ncu = 0;
	for (size_t i = 0; i < b->src.n; i++) {
		ncompile += compiled(b->src.v[i].rel);
		ncu += has_suffix(b->src.v[i].rel, ".cu");
	}
	int ca = strcmp(b->flavour, "ca") == 0;
	b->single = ca && ncompile == 1 && ncu == 1;
	b->steps = ca_xcalloc(ncompile + 1, sizeof *b->steps);
	size_t *unit_of = ca_xcalloc(ncompile + 1, sizeof *unit_of);
	struct includes inc = {0};
	if (!b->single)
		includes_find(&b->src, &inc);
	for (size_t i = 0; i < b->src.n; i++) {
		const char *rel = b->src.v[i].rel;
		int cu = has_suffix(rel, ".cu");
		if (!compiled(rel))
			continue;
		struct step *s = &b->steps[b->nsteps];
		if (cu || ca) {
			argv_add(&s->argv, "%s", b->nvcc);
			argv_add(&s->argv, b->single ? "-shared" : "-c");
			argv_add(&s->argv, "-arch=%s", b->arch);
			argv_add(&s->argv, "-Xcompiler");
			argv_add(&s->argv, "-fPIC");
			argv_append(&s->argv, &b->common);
			if (cu)
				argv_append(&s->argv, &b->cu_flags);
		} else {
			cxx_command(b, &s->argv);
			argv_add(&s->argv, "-c");
		}
		if (b->single) {
			argv_add(&s->argv, "-o");
			argv_add(&s->argv, "out/%s", b->libname);
			argv_add(&s->argv, "%s", rel);
			argv_append(&s->argv, &b->link_flags);
			snprintf(s->log_path, sizeof s->log_path, "%s.log.%zu", b->build, b->nsteps);
			b->nsteps++;
			continue;
		}
		argv_add(&s->argv, "%s", rel);
		/*
		 * The key leaves out the object's name (a unit keeps its key when a
		 * file added before it renumbers the objects) and the precompiled
		 * header (it changes how fast, never what: what a unit compiled
		 * with clang's leaves to its archive, every link adds, pch_link_flags).
		 */
		unit_key(&b->src, &inc, i, b->tools, &s->argv, s->key);
		snprintf(s->object, sizeof s->object, "obj/%zu.o", b->nsteps);
		argv_add(&s->argv, "-o");
		argv_add(&s->argv, "%s", s->object);
		char path[PATH_MAX * 2];
		snprintf(path, sizeof path, "%s/%s", b->build, s->object);
		s->cached = unit_fetch(b->cache, s->key, path) == 0;
		b->res->units_cached += s->cached;
		if (!cu && !ca && !s->cached)
			snprintf(b->res->cxx, sizeof b->res->cxx, "%s", b->clang ? "clang++" : "g++");
		int torch_cu = cu && !s->cached && unit_includes_torch(&b->src, i);
		/* After the key, as the precompiled header: the light header changes how fast, not what (or it fails). */
		if (b->light[0] && !s->cached && (!cu || torch_cu)) {
			argv_insert_include(&s->argv, b->light);
			b->res->light = 1;
		}
		if (torch_cu)
			through_ca_nvcc(b, s);
		if (!s->cached)
			snprintf(s->log_path, sizeof s->log_path, "%s.log.%zu", b->build, b->nsteps);
		unit_of[b->nsteps++] = i;
	}
	includes_free(&inc);
	/* The g++ units to compile that begin with torch's header get it precompiled (made only when one needs it). */
	int want = -1;
	for (size_t k = 0; k < b->nsteps && !b->single; k++) {
		struct step *s = &b->steps[k];
		if (s->cached || has_suffix(b->src.v[unit_of[k]].rel, ".cu") || !unit_starts_with_torch(&b->src, unit_of[k]))
			continue;
		if (want < 0)
			want = want_pch(b);
		if (want) {
			pch_flags(b, &s->argv);
			b->res->pch = 1;
		}
	}
	free(unit_of);
}

/*
 * g++ -fuse-ld=NAME runs "ld.NAME" from its -B directories: the build's
 * ld/ names the linker found, whatever its name (ld.lld-16). 0, or -1
 * (linked with GNU ld then).
 */
static int linker_dir(struct build *b)
{
	char dir[PATH_MAX * 2], link[PATH_MAX * 2 + 16];
	snprintf(dir, sizeof dir, "%s/ld", b->build);
	snprintf(link, sizeof link, "%s/ld.%s", dir, b->linker_name);
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return -1;
	unlink(link);
	return symlink(b->linker, link);
}

/* Compile the units not cached, in parallel, then link. The exit status of the first that failed. */
static int compile_and_link(struct build *b, struct step *link)
{
	struct step *todo = ca_xcalloc(b->nsteps + 1, sizeof *todo);
	size_t n = 0;
	for (size_t i = 0; i < b->nsteps; i++)
		if (!b->steps[i].cached)
			todo[n++] = b->steps[i];  /* shares argv and paths with steps[i] */
	b->res->units_compiled = (int)n;
	int jobs = b->opt->jobs > 0 ? b->opt->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
	double deadline = b->limit_from + b->lim.time_s;
	int status = run_steps(todo, n, b->build, b->cache, b->nvcc, deadline, jobs < 1 ? 1 : jobs, b->opt->no_sandbox, &b->lim);
	free(todo);
	char path[PATH_MAX * 2];
	for (size_t i = 0; status == 0 && i < b->nsteps; i++) {
		if (b->steps[i].cached || !b->steps[i].key[0])
			continue;
		snprintf(path, sizeof path, "%s/%s", b->build, b->steps[i].object);
		unit_store(b->cache, b->steps[i].key, path);
	}
	if (status != 0 || b->single)
		return status;
	int ca = strcmp(b->flavour, "ca") == 0;
	snprintf(link->log_path, sizeof link->log_path, "%s.log.link", b->build);
	argv_add(&link->argv, "%s", ca ? b->nvcc : "g++");
	argv_add(&link->argv, "-shared");
	const char *linker = "ld";
	if (b->linker && !ca && linker_dir(b) == 0) {
		argv_add(&link->argv, "-Bld/");
		argv_add(&link->argv, "-fuse-ld=%s", b->linker_name);
		linker = b->linker_name;
	}
	snprintf(b->res->linker, sizeof b->res->linker, "%s", linker);
	if (ca)
		argv_add(&link->argv, "-arch=%s", b->arch);
	argv_add(&link->argv, "-o");
	argv_add(&link->argv, "out/%s", b->libname);
	for (size_t i = 0; i < b->nsteps; i++)
		argv_add(&link->argv, "%s", b->steps[i].object);
	pch_link_flags(b, &link->argv);
	argv_append(&link->argv, &b->link_flags);
	return run_steps(link, 1, b->build, b->cache, b->nvcc, deadline, 1, b->opt->no_sandbox, &b->lim);
}

/* Every step's output in order, the step logs removed. */
static char *gather_log(struct build *b, const struct step *link)
{
	size_t log_len = 0, log_cap = 1024;
	char *full = ca_xmalloc(log_cap);
	full[0] = '\0';
	for (size_t i = 0; i <= b->nsteps; i++) {
		const char *lp = i < b->nsteps ? b->steps[i].log_path : link->log_path;
		if (!lp[0])
			continue;
		size_t n;
		char *text = ca_file_read(lp, CA_FILE_NOFOLLOW, BUILD_MAX_LOG_BYTES, &n);
		if (text) {
			if (log_len + n < BUILD_MAX_LOG_BYTES)
				log_append(&full, &log_len, &log_cap, text, n);
			free(text);
		}
		unlink(lp);
	}
	return full;
}

/* Whether a step's status says the compiler could not be run at all (the sandbox, exec). */
static int not_run(int status)
{
	return status == CA_SANDBOX_SETUP_FAILED || status == 126 || status == 127;
}

/* The result of the compile and link: cached when it says something about the sources alone. */
static void judge(struct build *b, int status, const char *full)
{
	char prefix[PATH_MAX + 2];
	snprintf(prefix, sizeof prefix, "%s/", b->build);
	const char *cause = ca_build_failure_cause(status, full);
	if (status == 0) {
		set_result(b->res, 1, CA_EXIT_OK, NULL);
		store_cached(b->cache, b->build, b->libname, full, b->res);
	} else if (not_run(status)) {
		char *trimmed = ca_build_trim_log(full, prefix, 2000);
		set_result(b->res, 0, CA_EXIT_SYSTEM, "could not run the compiler (status %d): %s", status, trimmed);
		free(trimmed);
	} else if (cause) {
		/* Not an answer about the sources alone: nothing is cached. */
		char *trimmed = ca_build_trim_log(full, prefix, 3000);
		const char *disks[] = {b->build, b->cache, "/tmp"};
		not_compiled(b->res, cause, status, &b->lim, disks, 3, trimmed);
		free(trimmed);
	} else {
		b->res->ok = 0;
		b->res->status = CA_EXIT_NEGATIVE;
		free(b->res->log);
		b->res->log = ca_build_trim_log(full, prefix, 4000);
		store_cached(b->cache, b->build, b->libname, full, b->res);
	}
}

/* The workspace, its flavour and its sources; 0, or -1 with the result set. */
static int read_workspace(struct build *b, const char *dir)
{
	char bad_limit[512];
	if (resolve_limits(b->opt, &b->lim, bad_limit, sizeof bad_limit) != 0) {
		set_result(b->res, 0, CA_EXIT_USAGE, "%s", bad_limit);
		return -1;
	}
	if (!realpath(dir, b->wsdir)) {
		set_result(b->res, 0, CA_EXIT_DATA, "%s: %s", dir, strerror(errno));
		return -1;
	}
	const char *f = b->opt->flavour;
	b->flavour = f && strcmp(f, "auto") != 0 ? f : detect_flavour(b->wsdir);
	if (!b->flavour) {
		set_result(b->res, 0, CA_EXIT_DATA, "%s: not a workspace: no kernels/*.cu, no binding.cpp and no model_new.py", dir);
		return -1;
	}
	if (strcmp(b->flavour, "ca") != 0 && strcmp(b->flavour, "cuda-agent") != 0 && strcmp(b->flavour, "kernelbench") != 0) {
		set_result(b->res, 0, CA_EXIT_DATA, "unknown flavour '%s'", b->flavour);
		return -1;
	}
	snprintf(b->res->flavour, sizeof b->res->flavour, "%s", b->flavour);
	b->arch = b->opt->arch ? b->opt->arch : ca_build_default_arch();
	snprintf(b->res->arch, sizeof b->res->arch, "%s", b->arch);
	if (collect(&b->src, b->wsdir, b->flavour) != 0) {
		set_result(b->res, 0, CA_EXIT_DATA, "%s", b->src.why);
		return -1;
	}
	return 0;
}

/* load_inline builds at run time; the hash still names the candidate. */
static void kernelbench_result(struct build *b)
{
	struct ca_sha256 h;
	name_begin(&h, b->flavour);
	for (size_t i = 0; i < b->src.n; i++) {
		ca_sha256_string(&h, b->src.v[i].rel);
		ca_sha256_update(&h, b->src.v[i].data, b->src.v[i].len);
	}
	ca_sha256_final_hex(&h, b->res->hash);
	set_result(b->res, 1, CA_EXIT_OK, NULL);
}

/* Is there anything to compile, and may this flavour compile it? 0, or -1 with the result set. */
static int check_sources(struct build *b, const char *dir)
{
	size_t ncompile = 0;
	for (size_t i = 0; i < b->src.n; i++)
		ncompile += compiled(b->src.v[i].rel);
	if (ncompile == 0) {
		set_result(b->res, 0, CA_EXIT_DATA, "%s: no .cu or .cpp files to compile in kernels/", dir);
		return -1;
	}
	const char *torch_header = includes(&b->src, "torch/") ? includes(&b->src, "torch/") : includes(&b->src, "ATen/");
	if (strcmp(b->flavour, "ca") == 0 && torch_header) {
		set_result(b->res, 0, CA_EXIT_NEGATIVE,
			"%s includes torch headers: the ca flavour builds without torch (extern \"C\" launchers called "
			"through ca_kernels); use the cuda-agent layout for torch extensions", torch_header);
		return -1;
	}
	return 0;
}

/* Forget a planned (and run) build, to plan it again. */
static void drop_steps(struct build *b)
{
	for (size_t i = 0; i < b->nsteps; i++)
		argv_free(&b->steps[i].argv);
	free(b->steps);
	b->steps = NULL;
	b->nsteps = 0;
	free(b->pch);
	b->pch = NULL;
}

/* Plan, compile and link; *full gets every step's output. The exit status of the first that failed. */
static int build_once(struct build *b, char **full)
{
	plan_steps(b);
	struct step link = {0};
	int status = compile_and_link(b, &link);
	*full = gather_log(b, &link);
	argv_free(&link.argv);
	return status;
}

/*
 * A failure that may be clang's or the light header's alone: not a limit
 * or a crash; a compiler's own error, or clang not run at all. g++ with
 * torch's own header would answer as before either.
 */
static int may_fail_alone(const struct build *b, int status, const char *full)
{
	if (status == 0 || ca_build_failure_cause(status, full))
		return 0;
	return b->clang || (b->res->light && !not_run(status));
}

static void build_free(struct build *b)
{
	drop_steps(b);
	if (b->build[0])
		ca_file_remove_tree(b->build);
	argv_free(&b->common);
	argv_free(&b->cu_flags);
	argv_free(&b->cxx_flags);
	argv_free(&b->link_flags);
	jv_free(b->torch);
	sources_free(&b->src);
	free(b->cache);
	free(b->nvcc);
	free(b->tools);
	free(b->cxx);
	free(b->linker);
	free(b->linker_version);
	free(b->pch);
}

/* A build with nothing done yet, and its result empty. */
static void build_begin(struct build *b, const struct ca_build_options *opt, struct ca_build_result *res)
{
	static const struct ca_build_options defaults = {0};
	*b = (struct build){.opt = opt ? opt : &defaults, .res = res, .torch = jv_invalid(), .t0 = ca_proc_now()};
	b->limit_from = b->t0;
	memset(res, 0, sizeof *res);
	res->log = ca_xstrdup("");
}

int ca_build_workspace(const char *dir, const struct ca_build_options *opt, struct ca_build_result *res)
{
	struct build b;
	build_begin(&b, opt, res);
	if (read_workspace(&b, dir) != 0)
		goto done;
	if (strcmp(b.flavour, "kernelbench") == 0) {
		kernelbench_result(&b);
		goto done;
	}
	if (check_sources(&b, dir) != 0)
		goto done;
	b.cache = build_cache_root(b.opt);
	if (prepare_flags(&b) != 0)
		goto done;
	workspace_hash(&b);
	char entry[PATH_MAX];
	snprintf(entry, sizeof entry, "%s/%s", b.cache, res->hash);
	if (load_cached(entry, b.libname, res) == 0)
		goto done;
	free(res->library);
	res->library = NULL;
	if (make_build_dir(&b) != 0)
		goto done;
	light_dir(&b);
	char *full;
	int status = build_once(&b, &full);
	if (may_fail_alone(&b, status, full)) {
		/* A unit may need what the light header leaves out, or g++: built again as before, whose log is the answer. */
		free(full);
		drop_steps(&b);
		res->units_compiled = res->units_cached = res->pch = res->light = 0;
		res->cxx[0] = res->linker[0] = '\0';
		b.light[0] = '\0';
		free(b.cxx);
		b.cxx = gxx_path();
		b.clang = 0;
		free(b.linker);
		b.linker = NULL;  /* its version stays in the name: the name is the first try's */
		b.tools[b.tools_gxx] = '\0';  /* as a build without clang: the precompiled header's key */
		status = build_once(&b, &full);
	}
	judge(&b, status, full);
	free(full);
done:
	res->seconds = ca_proc_now() - b.t0;
	build_free(&b);
	return res->status;
}

int ca_build_make_pch(const char *key, const struct ca_build_options *opt, struct ca_build_result *res)
{
	struct build b;
	build_begin(&b, opt, res);
	b.flavour = "cuda-agent";
	snprintf(res->flavour, sizeof res->flavour, "%s", b.flavour);
	b.arch = b.opt->arch ? b.opt->arch : ca_build_default_arch();
	snprintf(res->arch, sizeof res->arch, "%s", b.arch);
	b.cache = build_cache_root(b.opt);
	if (prepare_flags(&b) == 0) {
		light_dir(&b);
		if (pch_make_for(&b, key) == 0)
			set_result(res, 1, CA_EXIT_OK, NULL);
		else
			set_result(res, 0, CA_EXIT_SYSTEM, "torch's precompiled header %.32s was not made (%s/pch/%.32s.failed says why, "
				"when g++ failed)", key, b.cache, key);
	}
	res->seconds = ca_proc_now() - b.t0;
	build_free(&b);
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
	j = jv_object_set(j, jv_string("units"), jv_object_set(jv_object_set(jv_object(), jv_string("compiled"),
		jv_number(res->units_compiled)), jv_string("cached"), jv_number(res->units_cached)));
	j = jv_object_set(j, jv_string("pch"), jv_bool(res->pch));
	j = jv_object_set(j, jv_string("light"), jv_bool(res->light));
	j = jv_object_set(j, jv_string("cxx"), res->cxx[0] ? jv_string(res->cxx) : jv_null());
	j = jv_object_set(j, jv_string("linker"), res->linker[0] ? jv_string(res->linker) : jv_null());
	return j;
}
