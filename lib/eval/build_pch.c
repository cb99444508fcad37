/*
 * build_pch: torch's headers precompiled for the cuda-agent flavour's C++
 * units, once per compiler, flags and torch, kept in CACHE/pch/KEY/
 * (torch.h and g++'s torch.h.gch, or clang's torch.h.pch). g++ writes it
 * before it instantiates the templates the headers' inline functions use,
 * so every unit does that again (about 4 s); clang keeps them in it
 * (-fpch-instantiate-templates), and compiles what they instantiate once,
 * into CACHE/pch/KEY/torch-pch.a (-fpch-codegen: the units then leave it
 * out and the library links it, pch_link_flags), not again in every
 * unit. The compiler takes longer to make it
 * (g++ about 30 s on the H200) than to compile the units without it, so
 * the first build that wants it starts its making in the background
 * (ca-build --make-pch, a process of its own that outlives the build)
 * and compiles without; later builds use it. CA_BUILD_PCH=wait makes it
 * first, in the build.
 * CACHE/pch/KEY.lock is held while it is made, so it is made once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_impl.h"
#include "err.h"
#include "file.h"
#include "paths.h"
#include "proc.h"

static const char header[] = "#include <torch/extension.h>\n";

/* Trusted input (torch's headers alone), a large output: limits of its own, its time not the candidate's. */
static const struct limits pch_limits = {300, 600, 8192, 2048};

/* The header's file name: g++ finds its own beside torch.h; clang is told it (pch_flags). */
static const char *pch_name(const struct build *b)
{
	return b->clang ? "torch.h.pch" : "torch.h.gch";
}

void pch_flags(const struct build *b, struct argv_list *a)
{
	if (!b->clang) {
		argv_add(a, "-include");
		argv_add(a, "ca-pch/torch.h");
		return;
	}
	/*
	 * Made from its standard input, so it names no file that must stay
	 * where it was made. Not validated against the headers' times: its key
	 * has the compilers' versions, the flags and torch's install stamp.
	 */
	argv_add(a, "-include-pch");
	argv_add(a, "ca-pch/torch.h.pch");
	argv_add(a, "-Xclang");
	argv_add(a, "-fno-validate-pch");
}

static const char archive[] = "torch-pch.a";

/*
 * Whether clang's header compiles what it instantiates into the archive:
 * where lld or gold links the library (choose_linker). GNU ld took 0.65 s longer to
 * link with the archive (2-core CPU), the binding's compile 0.8 s less;
 * a candidate whose kernel alone changed would pay the link and gain
 * nothing. Part of the header's key.
 */
static int codegen(const struct build *b)
{
	return b->clang && b->linker;
}

/* The command the header is made with (the units' own) and its key. */
static void pch_command(struct build *b, struct argv_list *a, char key[65])
{
	struct ca_sha256 h;
	cxx_command(b, a);
	if (b->light[0])
		argv_insert_include(a, b->light);
	ca_sha256_init(&h);
	ca_sha256_string(&h, codegen(b) ? "ca-build pch 2" : "ca-build pch 1");  /* 2: -fpch-codegen, its archive */
	ca_sha256_string(&h, b->tools);
	argv_hash(&h, a);
	if (b->light[0]) {
		/* Its text, not only its directory: a header kept from an older ca's light one would be stale. */
		char path[PATH_MAX + 32];
		snprintf(path, sizeof path, "%s/torch/extension.h", b->light);
		char *text = ca_file_read(path, 0, 1 << 20, NULL);
		ca_sha256_string(&h, text ? text : "");
		free(text);
	}
	jv t = jv_dump_string(jv_copy(b->torch), 0);
	ca_sha256_string(&h, jv_string_value(t));
	jv_free(t);
	ca_sha256_final_hex(&h, key);
}

static void pch_entry(const char *cache, const char *key, char *entry, size_t size)
{
	snprintf(entry, size, "%s/pch/%.32s", cache, key);
}

/* Lock CACHE/pch/KEY.lock: a descriptor holding it, or -1 (busy unless wait, or no lock file). */
static int pch_lock(const char *cache, const char *key, int wait)
{
	char path[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/pch", cache);
	ca_paths_mkdirs(path, 0755);
	pch_entry(cache, key, path, PATH_MAX);
	strcat(path, ".lock");
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -1;
	while (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) != 0) {
		if (errno != EINTR) {
			close(fd);
			return -1;
		}
	}
	return fd;
}

int ca_build_pch_lock(const struct ca_build_options *opt, const char *key, int wait)
{
	char *cache = build_cache_root(opt);
	int fd = pch_lock(cache, key, wait);
	free(cache);
	return fd;
}

/*
 * clang's header made (in dir), what it instantiates compiled once: an
 * object with a section per function, so that a library keeps only what
 * its units call (pch_link_flags), in an archive, so that the library
 * does not export it. run_steps' status.
 */
static int make_archive(struct build *b, const char *dir, double deadline)
{
	struct step s[2];
	memset(s, 0, sizeof s);
	cxx_command(b, &s[0].argv);
	argv_add(&s[0].argv, "-Wno-unused-command-line-argument");
	argv_add(&s[0].argv, "-ffunction-sections");
	argv_add(&s[0].argv, "-fdata-sections");
	argv_add(&s[0].argv, "-c");
	argv_add(&s[0].argv, "%s", pch_name(b));
	argv_add(&s[0].argv, "-o");
	argv_add(&s[0].argv, "torch-pch.o");
	argv_add(&s[1].argv, "ar");
	argv_add(&s[1].argv, "rcs");
	argv_add(&s[1].argv, "%s", archive);
	argv_add(&s[1].argv, "torch-pch.o");
	int status = 0;
	for (int k = 0; k < 2 && status == 0; k++) {
		snprintf(s[k].log_path, sizeof s[k].log_path, "%s.log.%d", dir, k);
		status = run_steps(&s[k], 1, dir, b->cache, b->nvcc, deadline, 1, b->opt->no_sandbox, &pch_limits);
	}
	for (int k = 0; k < 2; k++) {
		unlink(s[k].log_path);
		argv_free(&s[k].argv);
	}
	char obj[PATH_MAX + 16];
	snprintf(obj, sizeof obj, "%s/torch-pch.o", dir);
	unlink(obj);
	return status;
}

/*
 * Make the header of command a into entry, the lock held: by the compiler
 * under the sandbox in a private directory like a build's, then renamed
 * into place. A failure of the compiler's own (not a limit, not a signal)
 * would come again: it is remembered (entry.failed, its log). 0, or -1.
 */
static int make_pch(struct build *b, const struct argv_list *a, const char *entry)
{
	char dir[PATH_MAX] = "", path[PATH_MAX * 2], failed[PATH_MAX + 16];
	struct step s = {0};
	int made = -1;
	snprintf(failed, sizeof failed, "%s.failed", entry);
	if (make_private_dir(b, dir, sizeof dir, "ca-pch") != 0)
		goto out;
	snprintf(path, sizeof path, "%s/torch.h", dir);
	if (ca_file_write(path, header, sizeof header - 1, 0644) != 0)
		goto out;
	snprintf(s.log_path, sizeof s.log_path, "%s.log", dir);
	argv_append(&s.argv, a);
	if (b->clang) {
		/* The sources in it, as a build's sandbox may not see them where they were (its pyinclude copy). */
		argv_add(&s.argv, "-fpch-instantiate-templates");
		if (codegen(b))
			argv_add(&s.argv, "-fpch-codegen");
		argv_add(&s.argv, "-Xclang");
		argv_add(&s.argv, "-fmodules-embed-all-files");
	}
	argv_add(&s.argv, "-x");
	argv_add(&s.argv, "c++-header");
	argv_add(&s.argv, "-o");
	argv_add(&s.argv, "%s", pch_name(b));
	argv_add(&s.argv, b->clang ? "-" : "torch.h");
	s.input = b->clang ? path : NULL;
	double started = ca_proc_now();
	int status = run_steps(&s, 1, dir, b->cache, b->nvcc, started + pch_limits.time_s, 1, b->opt->no_sandbox, &pch_limits);
	if (status == 0 && codegen(b))
		status = make_archive(b, dir, started + pch_limits.time_s);
	b->limit_from += ca_proc_now() - started;
	if (status != 0) {
		size_t n;
		char *log = ca_file_read(s.log_path, CA_FILE_NOFOLLOW, BUILD_MAX_LOG_BYTES, &n);
		if (!ca_build_failure_cause(status, log))
			ca_file_write(failed, log ? log : "", log ? n : 0, 0644);
		free(log);
		goto out;
	}
	/* Into place: renamed where the cache shares the filesystem, else copied aside and renamed. */
	char tmp[PATH_MAX + 32], from[PATH_MAX * 2], unique[32];
	temp_suffix(unique);
	snprintf(tmp, sizeof tmp, "%s.tmp-%s", entry, unique);
	ca_file_remove_tree(tmp);
	if (rename(dir, tmp) != 0) {
		mkdir(tmp, 0755);
		snprintf(from, sizeof from, "%s/%s", dir, pch_name(b));
		snprintf(path, sizeof path, "%s/%s", tmp, pch_name(b));
		if (build_copy_file(from, path, 0644) != 0)
			goto out;
		snprintf(path, sizeof path, "%s/torch.h", tmp);
		ca_file_write(path, header, sizeof header - 1, 0644);
		snprintf(from, sizeof from, "%s/%s", dir, archive);
		snprintf(path, sizeof path, "%s/%s", tmp, archive);
		if (codegen(b) && build_copy_file(from, path, 0644) != 0)
			goto out;
	} else {
		dir[0] = '\0';
	}
	snprintf(path, sizeof path, "%s/pyinclude", tmp);
	ca_file_remove_tree(path);
	/* Made by the sandbox's uid: ours again, so no sandboxed process can write it. */
	const char *names[] = {"", "torch.h", pch_name(b), archive};
	for (int k = 0; k < (codegen(b) ? 4 : 3); k++) {
		snprintf(path, sizeof path, "%s%s%s", tmp, k ? "/" : "", names[k]);
		if (lchown(path, geteuid(), getegid()) != 0 && errno != EPERM)
			break;
		chmod(path, k ? 0644 : 0755);
	}
	if (rename(tmp, entry) != 0)
		ca_file_remove_tree(tmp);  /* another build made it first */
	snprintf(path, sizeof path, "%s/%s", entry, pch_name(b));
	made = build_exists(path) ? 0 : -1;
out:
	if (s.log_path[0])
		unlink(s.log_path);
	argv_free(&s.argv);
	if (dir[0])
		ca_file_remove_tree(dir);
	return made;
}

/* Is it there (1; clang's with its archive), known not to be makeable (-1), or neither (0)? */
static int pch_state(const struct build *b, const char *entry)
{
	char path[PATH_MAX + 16], lib[PATH_MAX + 16];
	snprintf(path, sizeof path, "%s/%s", entry, pch_name(b));
	snprintf(lib, sizeof lib, "%s/%s", entry, archive);
	if (build_exists(path) && (!codegen(b) || build_exists(lib)))
		return 1;
	snprintf(path, sizeof path, "%s.failed", entry);
	return build_exists(path) ? -1 : 0;
}

/* The header there (1), or made now, the lock held (1), or not to be had (-1). */
static int have_or_make(struct build *b, const struct argv_list *a, const char *entry)
{
	int state = pch_state(b, entry);
	if (state == 0)
		state = make_pch(b, a, entry) == 0 ? 1 : -1;
	return state;
}

int pch_make_for(struct build *b, const char *key)
{
	struct argv_list a = {0};
	char mine[65], entry[PATH_MAX];
	pch_command(b, &a, mine);
	pch_entry(b->cache, key, entry, sizeof entry);
	int rc = -1;
	if (strcmp(mine, key) != 0) {
		/* The maker's flags are not the build's (another environment): say so once, not made again. */
		char failed[PATH_MAX + 16], why[256];
		snprintf(failed, sizeof failed, "%s.failed", entry);
		int n = snprintf(why, sizeof why, "ca-build --make-pch: these flags give key %.32s, not %.32s\n", mine, key);
		ca_file_write(failed, why, (size_t)n, 0644);
	} else {
		rc = have_or_make(b, &a, entry) == 1 ? 0 : -1;
	}
	argv_free(&a);
	return rc;
}

/*
 * Start ca-build --make-pch KEY in the background, unless it is being
 * made: it takes the lock, leaves a process of its own to make the
 * header, and returns. Not when ca-build is not beside us.
 */
static void start_maker(struct build *b, const char *key)
{
	int fd = pch_lock(b->cache, key, 0);
	if (fd < 0)
		return;
	close(fd);
	char exe[PATH_MAX];
	snprintf(exe, sizeof exe, "%s/ca-build", ca_paths_bindir());
	if (access(exe, X_OK) != 0)
		return;
	/* Told the build's compiler and light header, so that its flags give the key (a build again with g++, without). */
	const char *argv[14] = {exe, "--make-pch", key, "--cache", b->cache, "--arch", b->arch, "--cxx", b->cxx};
	int n = 9;
	if (!b->light[0])
		argv[n++] = "--no-light";
	if (b->opt->no_sandbox)
		argv[n++] = "--no-sandbox";
	struct ca_proc p;
	ca_proc_init(&p, argv);
	p.in_mode = p.out_mode = p.err_mode = CA_PROC_NULL;
	p.timeout_s = 30;
	if (ca_proc_start(&p) == 0 && ca_proc_finish(&p) != 0)
		ca_err_warn("ca-build --make-pch %.12s: exit %d", key, p.status);
}

/*
 * Where the units find it: b->build/ca-pch/torch.h and the header, a hard
 * link to the made one, else a copy (another compiler's, from a build
 * before, removed). 0, or -1.
 */
static int place_pch(struct build *b)
{
	char from[PATH_MAX * 2], to[PATH_MAX * 2];
	snprintf(to, sizeof to, "%s/ca-pch", b->build);
	ca_file_remove_tree(to);
	if (mkdir(to, 0755) != 0)
		return -1;
	snprintf(to, sizeof to, "%s/ca-pch/torch.h", b->build);
	if (ca_file_write(to, header, sizeof header - 1, 0644) != 0)
		return -1;
	const char *names[] = {pch_name(b), archive};
	for (int k = 0; k < (codegen(b) ? 2 : 1); k++) {
		snprintf(from, sizeof from, "%s/%s", b->pch, names[k]);
		snprintf(to, sizeof to, "%s/ca-pch/%s", b->build, names[k]);
		if (link(from, to) != 0 && build_copy_file(from, to, 0644) != 0)
			return -1;
	}
	return 0;
}

/* CACHE/pch/KEY for the build's flags when it is made (now, with CA_BUILD_PCH=wait), else NULL. */
static char *torch_pch(struct build *b)
{
	struct argv_list a = {0};
	char key[65], entry[PATH_MAX];
	pch_command(b, &a, key);
	pch_entry(b->cache, key, entry, sizeof entry);
	int state = pch_state(b, entry);
	if (state == 0) {
		const char *how = getenv("CA_BUILD_PCH");
		if (!how || strcmp(how, "wait") != 0) {
			start_maker(b, key);
		} else {
			int fd = pch_lock(b->cache, key, 1);
			state = have_or_make(b, &a, entry);
			if (fd >= 0)
				close(fd);
		}
	}
	argv_free(&a);
	return state == 1 ? ca_xstrdup(entry) : NULL;
}

int want_pch(struct build *b)
{
	if (strcmp(b->flavour, "cuda-agent") != 0 || getenv("CA_BUILD_NO_PCH"))
		return 0;
	/* Where the compiler would look for torch's own headers: a workspace file there would be seen instead. */
	const char *dirs[8];
	size_t n = 0;
	jv inc = jv_object_get(jv_copy(b->torch), jv_string("include"));
	jv pyinc = jv_object_get(jv_copy(b->torch), jv_string("pyinclude"));
	char cuda_inc[PATH_MAX + 16];
	snprintf(cuda_inc, sizeof cuda_inc, "%s/include", b->cuda_home);
	if (jv_get_kind(inc) == JV_KIND_ARRAY)
		jv_array_foreach(inc, k, d) {
			if (jv_get_kind(d) == JV_KIND_STRING && n < 4)
				dirs[n++] = jv_string_value(d);  /* inc holds the string */
			jv_free(d);
		}
	if (jv_get_kind(pyinc) == JV_KIND_STRING)
		dirs[n++] = jv_string_value(pyinc);
	dirs[n++] = cuda_inc;
	dirs[n++] = "/usr/include";
	dirs[n++] = "/usr/local/include";
	int shadow = sources_shadow_headers(&b->src, dirs, n);
	jv_free(inc);
	jv_free(pyinc);
	if (shadow)
		return 0;
	b->pch = torch_pch(b);
	return b->pch && place_pch(b) == 0;
}

int pch_link_flags(struct build *b, struct argv_list *a)
{
	if (!codegen(b) || strcmp(b->flavour, "cuda-agent") != 0)
		return 0;
	if (!b->pch) {
		/* Every unit cached: those compiled with the header need its archive all the same. */
		struct argv_list c = {0};
		char key[65], entry[PATH_MAX];
		pch_command(b, &c, key);
		argv_free(&c);
		pch_entry(b->cache, key, entry, sizeof entry);
		if (pch_state(b, entry) != 1)
			return 0;
		b->pch = ca_xstrdup(entry);
		if (place_pch(b) != 0)
			return 0;
	}
	argv_add(a, "ca-pch/%s", archive);
	argv_add(a, "-Wl,--exclude-libs,ALL");
	argv_add(a, "-Wl,--gc-sections");
	return 1;
}
