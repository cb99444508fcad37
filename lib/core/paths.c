/* paths: see paths.h. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "paths.h"

static char bindir[PATH_MAX], share[PATH_MAX], pydir[PATH_MAX], python[PATH_MAX], cache[PATH_MAX];

const char *ca_paths_bindir(void)
{
	if (!bindir[0]) {
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
	return bindir;
}

static int is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *ca_paths_share(void)
{
	if (share[0])
		return share;
	const char *env = getenv("CA_SHARE");
	char probe[PATH_MAX + 32];
	if (env && *env) {
		snprintf(share, sizeof share, "%s", env);
		return share;
	}
	/* Build tree: bin/ (or bin-asan/) beside lib/py. */
	snprintf(probe, sizeof probe, "%s/../lib/py", ca_paths_bindir());
	if (is_dir(probe)) {
		snprintf(probe, sizeof probe, "%s/..", ca_paths_bindir());
		if (!realpath(probe, share))
			snprintf(share, sizeof share, "%s", probe);
		return share;
	}
	snprintf(probe, sizeof probe, "%s/../share/ca", ca_paths_bindir());
	if (!realpath(probe, share))
		snprintf(share, sizeof share, "%s", probe);
	return share;
}

const char *ca_paths_pydir(void)
{
	if (!pydir[0]) {
		char probe[PATH_MAX + 16];
		snprintf(probe, sizeof probe, "%s/lib/py", ca_paths_share());
		if (is_dir(probe))
			snprintf(pydir, sizeof pydir, "%s", probe);
		else
			snprintf(pydir, sizeof pydir, "%s/py", ca_paths_share());
	}
	return pydir;
}

const char *ca_paths_python(void)
{
	if (python[0])
		return python;
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
		return python;
	}
	snprintf(probe, sizeof probe, "%s/.venv/bin/python3", ca_paths_share());
	if (access(probe, X_OK) == 0)
		snprintf(python, sizeof python, "%s", probe);
	else
		snprintf(python, sizeof python, "python3");
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

const char *ca_paths_cache(void)
{
	if (cache[0])
		return cache;
	const char *env = getenv("CA_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	if (env && *env)
		snprintf(cache, sizeof cache, "%s", env);
	else if (xdg && *xdg)
		snprintf(cache, sizeof cache, "%s/ca", xdg);
	else
		snprintf(cache, sizeof cache, "%s/.cache/ca", home && *home ? home : "/tmp");
	if (ca_paths_mkdirs(cache, 0755) != 0)
		ca_err_warn_sys("cannot create cache directory %s", cache);
	return cache;
}
