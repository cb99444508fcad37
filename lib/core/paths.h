/*
 * paths: where ca finds its own files at run time.
 *
 * Commands run from the build tree (bin/ca-foo next to lib/py, skills/)
 * and from an installation (PREFIX/bin/ca-foo with PREFIX/share/ca/...).
 * Environment variables override both: CA_PYTHON (the interpreter for the
 * torch side), CA_SHARE (the directory holding py/ and skills/),
 * CA_CACHE (build and baseline caches; default $XDG_CACHE_HOME/ca or
 * ~/.cache/ca).
 * Every function returns a string the caller must not free.
 */
#ifndef CA_PATHS_H
#define CA_PATHS_H

/* Directory of the running executable. */
const char *ca_paths_bindir(void);
/* The directory holding py/ (the Python runner) and skills/. */
const char *ca_paths_share(void);
/* ca_paths_share()/py */
const char *ca_paths_pydir(void);
/* The Python interpreter for the torch side. */
const char *ca_paths_python(void);
/* Cache root (created on first use). */
const char *ca_paths_cache(void);
/* Make a directory and its parents; 0 or -1 with errno. */
int ca_paths_mkdirs(const char *path, int mode);

#include <stddef.h>

/*
 * The directories of a PATH-style list, one a call: the next into buf (at
 * most size bytes) and *list moved past it; 0 once none is left (list
 * NULL or empty). An empty entry comes as "", for the caller to skip.
 */
int ca_paths_next_dir(const char **list, char *buf, size_t size);

/*
 * Where a PATH-style list finds program name: the first DIR/name that is
 * a regular file we may run, an empty entry meaning the current
 * directory; name itself when it holds a '/'. malloc'd, or NULL with
 * errno ENOENT.
 */
char *ca_paths_find_program(const char *name, const char *list);

#endif
