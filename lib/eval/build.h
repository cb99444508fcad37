/*
 * build: content-addressed builds of a workspace's kernels (owner: B1).
 *
 * Three workspace flavours:
 *   "ca"          kernels/NAME.cu (+ optional NAME.cpp) with extern "C" launchers
 *                 and no torch headers: nvcc -shared into libkernels.so;
 *   "cuda-agent"  CUDA-Agent's layout: kernels/NAME.cu, kernels/NAME_binding.cpp
 *                 and binding.cpp / binding_registry.h, built as the torch
 *                 extension cuda_extension.so with nvcc and g++ directly
 *                 (torch's include and library paths asked once of the
 *                 Python interpreter and cached);
 *   "kernelbench" model_new.py builds its own CUDA with load_inline at run
 *                 time: nothing to prebuild.
 * The cache key is SHA-256 over the flavour, the GPU architecture, the
 * nvcc version, the flags and the sorted sources; the result lives in
 * CACHE/<hash>/ (library, build.log, result.json), so an unchanged
 * candidate is never rebuilt. Sources are copied into a private build
 * directory and compiled there by ca-sandbox (no network, writes only
 * into that directory), several files in parallel, under limits: wall
 * clock for the whole build, and CPU time, address space and file size for
 * each compiler process. A compile that a limit or a signal stopped is not
 * an answer about its sources: it is not cached.
 */
#ifndef CA_BUILD_H
#define CA_BUILD_H

#include <jv.h>

struct ca_build_options {
	const char *arch;      /* "sm_90"; NULL: from nvidia-smi, else sm_90 */
	const char *cache;     /* NULL: ca_paths_cache()/build */
	const char *flavour;   /* NULL or "auto", "ca", "cuda-agent", "kernelbench" */
	/* Limits; 0: the CA_BUILD_* variable of the same name, else the default in ca-build(1). */
	double time_s;         /* wall clock for the whole build (CA_BUILD_TIME_S) */
	long long cpu_s;       /* CPU seconds of each compiler process, RLIMIT_CPU (CA_BUILD_CPU_S) */
	long long mem_mb;      /* address space of each compiler process, RLIMIT_AS (CA_BUILD_MEM_MB) */
	long long fsize_mb;    /* each file written, RLIMIT_FSIZE, and the private /tmp (CA_BUILD_FSIZE_MB) */
	int jobs;              /* parallel compiler processes; 0: number of CPUs */
	int no_sandbox;        /* 1: compile without ca-sandbox (trusted sources only; no limit but time_s) */
	const char *cxx;       /* the cuda-agent flavour's C++ compiler: "clang++", "g++" or a path; NULL: CA_CXX, else clang++ where found, else g++ */
	int no_light;          /* 1: without ca's light torch/extension.h (as CA_LIGHT_HEADERS=0) */
};

struct ca_build_result {
	int ok;
	int status;            /* CA_EXIT_OK, _NEGATIVE (did not compile), _USAGE (bad CA_BUILD_*), _DATA (not a workspace), _SYSTEM */
	char flavour[16];
	char arch[16];
	char hash[65];         /* "" when the workspace could not be read */
	int cached;
	double seconds;
	char *library;         /* absolute path of the built library, or NULL */
	char *log;             /* trimmed compiler errors or why it failed; "" when ok */
	int transient;         /* 1: not an answer about the sources (a limit, a crash, our failure); not cached */
	char limit[8];         /* the limit a transient failure ran into: "time", "cpu", "memory", "fsize"; "" none */
	int units_compiled;    /* compile units this call ran the compiler on */
	int units_cached;      /* compile units whose object came from the unit cache */
	int pch;               /* 1: some unit was compiled with torch's precompiled header */
	int light;             /* 1: built with ca's lighter torch/extension.h in front (cuda-agent; see ca-build(1)) */
	char cxx[16];          /* the compiler of the C++ units: "clang++" or "g++" (cuda-agent; "" when none ran) */
	char linker[8];        /* the linker of this call's link: "lld", "gold" or "ld" (GNU's); "" when none ran */
};

/* Build (or find in the cache) the kernels of the workspace in dir. Returns res->status. */
int ca_build_workspace(const char *dir, const struct ca_build_options *opt, struct ca_build_result *res);

/*
 * Make torch's precompiled header of the cuda-agent flavour whose key is
 * key (CACHE/pch/KEY: see ca-build(1)) with the flags opt gives here,
 * the caller holding its lock (ca_build_pch_lock). A build that wants it
 * and finds it missing starts ca-build --make-pch KEY for this. Returns
 * res->status.
 */
int ca_build_make_pch(const char *key, const struct ca_build_options *opt, struct ca_build_result *res);

/* Lock CACHE/pch/KEY.lock (CACHE: opt's): a descriptor holding it, or -1 (busy unless wait, or no lock file). */
int ca_build_pch_lock(const struct ca_build_options *opt, const char *key, int wait);
void ca_build_result_free(struct ca_build_result *res);

/* {"ok","flavour","hash","cached","seconds","library","log","arch","transient","limit","units","pch","light","cxx"}. Borrows res. */
jv ca_build_result_json(const struct ca_build_result *res);

/* The architecture builds use when none is given ("sm_90"); cached per boot. */
const char *ca_build_default_arch(void);

/*
 * Why a compile that exited with status (the compiler's, 124 for our
 * timeout, 128+n for signal n) and printed log failed, when it is not an
 * ordinary compile error: "time", "cpu", "memory" or "fsize" (the limit
 * it ran into, told by the status or by the tools' own messages), or
 * "signal" (killed by another signal), "no space" (a disk or the private
 * /tmp is full). NULL: a compile error, or success.
 */
const char *ca_build_failure_cause(int status, const char *log);

/*
 * Trim compiler output to what an agent needs: error lines with a little
 * context, paths below strip_prefix made relative, at most max_bytes.
 * Returns a malloc'd string.
 */
char *ca_build_trim_log(const char *log, const char *strip_prefix, size_t max_bytes);

#endif
