/* paths: see paths.h. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "paths.h"

/*
 * Each found once per process, under pthread_once: threads (ca-verify's
 * slots, its in-process builds) may ask first at the same time, and one
 * must not read a string another is still writing.
 */
static char bindir[PATH_MAX], share[PATH_MAX], pydir[PATH_MAX], python[PATH_MAX], cache[PATH_MAX];
static pthread_once_t bindir_once = PTHREAD_ONCE_INIT, share_once = PTHREAD_ONCE_INIT,
	pydir_once = PTHREAD_ONCE_INIT, python_once = PTHREAD_ONCE_INIT, cache_once = PTHREAD_ONCE_INIT;

static void find_bindir(void)
{
	ssize_t n = readlink("/proc/self/exe", bindir, sizeof bindir - 1);
	if (n <= 0) {
		strcpy(bindir, ".");
	} else {
		bindir[n] = '\0';
		char *slash = strrchr(bindir, '/');
		if (slash)
			*slash = '\0';
	}
}

const char *ca_paths_bindir(void)
{
	pthread_once(&bindir_once, find_bindir);
	return bindir;
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void find_share(void)
{
	const char *env = getenv("CA_SHARE");
	char probe[PATH_MAX + 32];
	if (env && *env) {
		snprintf(share, sizeof share, "%s", env);
		return;
	}
	/* Build tree: bin/ (or bin-asan/) beside lib/py. */
	snprintf(probe, sizeof probe, "%s/../lib/py", ca_paths_bindir());
	if (is_dir(probe)) {
		snprintf(probe, sizeof probe, "%s/..", ca_paths_bindir());
		if (!realpath(probe, share))
			snprintf(share, sizeof share, "%s", probe);
		return;
	}
	snprintf(probe, sizeof probe, "%s/../share/ca", ca_paths_bindir());
	if (!realpath(probe, share))
		snprintf(share, sizeof share, "%s", probe);
}

const char *ca_paths_share(void)
{
	pthread_once(&share_once, find_share);
	return share;
}

static void find_pydir(void)
{
	char probe[PATH_MAX + 16];
	snprintf(probe, sizeof probe, "%s/lib/py", ca_paths_share());
	if (is_dir(probe))
		snprintf(pydir, sizeof pydir, "%s", probe);
	else
		snprintf(pydir, sizeof pydir, "%s/py", ca_paths_share());
}

const char *ca_paths_pydir(void)
{
	pthread_once(&pydir_once, find_pydir);
	return pydir;
}

static void find_python(void)
{
	const char *env = getenv("CA_PYTHON");
	char probe[PATH_MAX + 32];
	if (env && *env) {
		/*
		 * A relative path (CA_PYTHON=.venv/bin/python3) names a file from
		 * here, but workers start in directories of their own: made
		 * absolute now. Not resolved through links: a virtual
		 * environment's python3 is a link that must keep its name.
		 */
		char cwd[PATH_MAX];
		if (env[0] != '/' && strchr(env, '/') && getcwd(cwd, sizeof cwd))
			snprintf(python, sizeof python, "%s/%s", cwd, env);
		else
			snprintf(python, sizeof python, "%s", env);
		return;
	}
	snprintf(probe, sizeof probe, "%s/.venv/bin/python3", ca_paths_share());
	if (access(probe, X_OK) == 0)
		snprintf(python, sizeof python, "%s", probe);
	else
		snprintf(python, sizeof python, "python3");
}

const char *ca_paths_python(void)
{
	pthread_once(&python_once, find_python);
	return python;
}

int ca_paths_mkdirs(const char *path, int mode)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, (mode_t)mode) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

static void find_cache(void)
{
	const char *env = getenv("CA_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	if (env && *env)
		snprintf(cache, sizeof cache, "%s", env);
	else if (xdg && *xdg)
		snprintf(cache, sizeof cache, "%s/ca", xdg);
	else
		snprintf(cache, sizeof cache, "%s/.cache/ca", home && *home ? home : "/tmp");
	if (ca_paths_mkdirs(cache, 0755) != 0)
		ca_err_warn_sys("cannot create cache directory %s", cache);
}

const char *ca_paths_cache(void)
{
	pthread_once(&cache_once, find_cache);
	return cache;
}

int ca_paths_next_dir(const char **list, char *buf, size_t size)
{
	const char *dir = *list;
	if (!dir || !*dir)
		return 0;
	size_t len = strcspn(dir, ":");
	snprintf(buf, size, "%.*s", (int)len, dir);
	*list = dir + len + (dir[len] == ':');
	return 1;
}

char *ca_paths_find_program(const char *name, const char *list)
{
	struct stat st;
	if (strchr(name, '/'))
		return ca_xstrdup(name);
	char dir[PATH_MAX], buf[PATH_MAX * 2];
	while (ca_paths_next_dir(&list, dir, sizeof dir)) {
		snprintf(buf, sizeof buf, "%s/%s", *dir ? dir : ".", name);
		if (stat(buf, &st) == 0 && S_ISREG(st.st_mode) && access(buf, X_OK) == 0)
			return ca_xstrdup(buf);
	}
	errno = ENOENT;
	return NULL;
}
