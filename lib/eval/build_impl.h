/*
 * build_impl: what build.c and build_units.c share (private to lib/eval/build*).
 *
 * A build is a list of steps (compiler command lines run in the build
 * directory under the sandbox). Each compile step is a unit: one source
 * file to one object. Units are cached by content (build_units.c): the
 * key covers the compiler, the command line, the source and every
 * workspace file it can include, so a unit that is the same in two
 * candidates (CUDA-Agent's binding.cpp) is compiled once. Units of the
 * cuda-agent flavour that begin with torch/extension.h are compiled with
 * torch's headers precompiled once per compiler, flags and torch.
 */
#ifndef CA_BUILD_IMPL_H
#define CA_BUILD_IMPL_H

#include <limits.h>
#include <stddef.h>

#include <jv.h>

#include "build.h"
#include "hash.h"

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

struct argv_list {
	char **v;
	size_t n, cap;
};

/* A suffix for a temporary file's name, unique to this process and call (threads may store one entry at once). */
void temp_suffix(char out[32]);

void argv_add(struct argv_list *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void argv_append(struct argv_list *a, const struct argv_list *b);
void argv_free(struct argv_list *a);
void argv_hash(struct ca_sha256 *h, const struct argv_list *a);
/* -IDIR as a's second word, right after the compiler. */
void argv_insert_include(struct argv_list *a, const char *dir);

/* ---- limits and logs (build_limits.c) ---- */

struct limits {
	double time_s;       /* the whole build, wall clock */
	long long cpu_s;     /* CPU seconds of each compiler process */
	long long mem_mb;    /* address space of each compiler process */
	long long fsize_mb;  /* each file written, and the private /tmp */
};

/* Each limit from opt, else its CA_BUILD_* variable, else the default; 0, or -1 with why. */
int resolve_limits(const struct ca_build_options *opt, struct limits *lim, char *why, size_t why_len);

/* Append n bytes of s to the growing string *out (length *len, capacity *cap). */
void log_append(char **out, size_t *len, size_t *cap, const char *s, size_t n);

/* ---- units (build_units.c) ---- */

/*
 * Which workspace files each source names in an #include, found once per
 * build in one pass over each source: names[i * n + j] is 1 when source i
 * names source j (resolved as the compiler's -I. -Ikernels would,
 * conditions ignored so that more counts, never less); unknown[i] is 1
 * when source i has an include that cannot be followed (a computed
 * #include, __has_include, .incbin), or the workspace more include
 * directives than are followed. names NULL: every file counts. A unit's
 * key hashes each file's digest, so its cost does not grow with the size
 * of the files every unit reaches.
 */
struct includes {
	size_t n;
	unsigned char *names;
	unsigned char *unknown;
	unsigned char (*digest)[32];  /* each source's SHA-256, for the unit keys */
};

void includes_find(const struct sources *src, struct includes *inc);
void includes_free(struct includes *inc);

/*
 * The cache key of compiling source number unit with argv (paths relative
 * to the build directory) by tools (the compilers' version texts). Every
 * workspace file the unit reaches through includes (inc, from
 * includes_find; NULL: found for this call) is part of it; a file that
 * cannot be followed makes every workspace file part of it.
 */
void unit_key(const struct sources *src, const struct includes *inc, size_t unit, const char *tools,
	const struct argv_list *argv, char hex[65]);

/* Copy the cached object of key to path: 0, else -1 (not cached). */
int unit_fetch(const char *cache, const char *key, const char *path);

/* Keep the object at path as key's (written aside, renamed into place). */
void unit_store(const char *cache, const char *key, const char *path);

/*
 * May source number unit be compiled with torch's precompiled header in
 * front? Only when nothing but comments, blank lines, #pragma once and an
 * include guard come before its first #include, and that include is
 * torch/extension.h or a workspace header that begins so: then putting the
 * header first changes nothing.
 */
int unit_starts_with_torch(const struct sources *src, size_t unit);

/*
 * Does source number unit name torch's headers (torch/, ATen/ or c10/
 * anywhere in its text; included headers not followed)? Such a .cu is
 * slow enough to nvcc for ca-nvcc to pay.
 */
int unit_includes_torch(const struct sources *src, size_t unit);

/*
 * Does a workspace file stand where the compiler would find one of the
 * headers behind torch/extension.h (a path that exists below one of dirs,
 * taken from the workspace root or from kernels/), or lack an extension
 * (a name like <vector>)? Then the precompiled header, made without the
 * workspace, would not be what the unit sees: not used.
 */
int sources_shadow_headers(const struct sources *src, const char *const *dirs, size_t ndirs);

/* ---- the build (build.c) ---- */

/* The most of a compiler's log read back. */
#define BUILD_MAX_LOG_BYTES ((size_t)4 << 20)

struct step {
	struct argv_list argv;
	char log_path[PATH_MAX];
	char key[65];      /* the unit's cache key; "" for the link and single-step builds */
	char object[64];   /* obj/N.o */
	int cached;        /* the object came from the unit cache: nothing to run */
	const char *input; /* a file that is the compiler's standard input, or NULL (/dev/null) */
};

/* Everything one build works with. */
struct build {
	const struct ca_build_options *opt;
	struct ca_build_result *res;
	const char *flavour, *arch, *libname;
	char wsdir[PATH_MAX], dir[PATH_MAX], cuda_home[PATH_MAX];
	char build[PATH_MAX];   /* the private build directory; "" until made */
	struct sources src;
	struct argv_list common, cu_flags, cxx_flags, link_flags;
	char *cache, *nvcc, *tools;  /* tools: the compilers' version texts */
	char *cxx;              /* the C++ units' compiler (a path, or "g++"): choose_cxx() */
	size_t tools_gxx;       /* the length of tools before clang's version was added */
	int clang;              /* 1: cxx is clang++ */
	char *linker;            /* with clang, a linker faster than GNU ld (lld, gold) for the link, else NULL: choose_cxx() */
	const char *linker_name; /* its -fuse-ld= name ("lld", "gold") */
	char *linker_version;    /* its --version */
	jv torch;
	struct limits lim;
	struct step *steps;
	size_t nsteps;
	int single;             /* one nvcc -shared for one .cu of the ca flavour */
	char *pch;              /* the precompiled torch header's directory in the cache, or NULL */
	char light[PATH_MAX];   /* ca's lighter torch/extension.h's directory (-I), or "": light_dir() */
	double t0;
	double limit_from;      /* when the build's wall-clock limit started: t0, less the precompiled header's making */
};

/* The cache's root directory (made): opt->cache, else ca_paths_cache()/build. */
char *build_cache_root(const struct ca_build_options *opt);
int build_exists(const char *path);
int build_copy_file(const char *from, const char *to, int mode);
/* Is every directory on the way to path searchable, and path readable, by others? */
int world_readable(const char *path);

/*
 * Run the steps, at most jobs at a time, each inside ca-sandbox unless
 * no_sandbox; output to each step's log file. 0 when all succeeded, else
 * the first failing status (124 timeout, 125 sandbox failure, 126/127
 * could not run, other: compile error).
 */
int run_steps(struct step *steps, size_t n, const char *build, const char *cache, const char *compiler,
	double deadline, int jobs, int no_sandbox, const struct limits *lim);

/* A private directory below TMPDIR (prefix.XXXXXX); the Python headers copied in when the flags ask for them. */
int make_private_dir(struct build *b, char *dir, size_t size, const char *prefix);

/* The C++ command line (b->cxx) of a unit of the cuda-agent flavour, without source and output. */
void cxx_command(struct build *b, struct argv_list *a);

/* ---- torch's precompiled header (build_pch.c) ---- */

/*
 * Whether the cuda-agent C++ units may use torch's precompiled header, in
 * b->build/ca-pch/ then. The first time it is wanted it is made in the
 * background (ca-build --make-pch) and the units compile without it, or
 * made here first with CA_BUILD_PCH=wait.
 */
int want_pch(struct build *b);

/* The flags that put the made header in front of a unit (b->build/ca-pch/: want_pch). */
void pch_flags(const struct build *b, struct argv_list *a);

/*
 * clang's header compiled what torch's headers instantiate into an
 * archive, which units compiled with it need: the link's flags for it
 * added to a (the header made; b->build/ca-pch/ placed now when no unit
 * of this build wanted it). 1 when added, 0 when there is none.
 */
int pch_link_flags(struct build *b, struct argv_list *a);

/* Make the header of key with b's flags, its lock held (ca_build_make_pch). 0 when made, or there already. */
int pch_make_for(struct build *b, const char *key);

#endif
