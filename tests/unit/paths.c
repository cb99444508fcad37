/* Unit tests of lib/paths: environment overrides and mkdirs. Usage: test-paths DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "paths.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test-paths DIR\n");
		return 2;
	}
	char dir[4096], cache[4096];
	snprintf(dir, sizeof dir, "%s/a/b/c", argv[1]);
	snprintf(cache, sizeof cache, "%s/cache", argv[1]);
	struct stat st;
	CHECK(ca_paths_mkdirs(dir, 0755) == 0 && stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
	CHECK(ca_paths_mkdirs(dir, 0755) == 0);  /* exists already: fine */
	setenv("CA_PYTHON", "/opt/py/bin/python3", 1);
	CHECK(strcmp(ca_paths_python(), "/opt/py/bin/python3") == 0);
	setenv("CA_SHARE", argv[1], 1);
	CHECK(strcmp(ca_paths_share(), argv[1]) == 0);
	CHECK(strncmp(ca_paths_pydir(), argv[1], strlen(argv[1])) == 0 && strstr(ca_paths_pydir(), "py"));
	setenv("CA_CACHE", cache, 1);
	CHECK(strcmp(ca_paths_cache(), cache) == 0);
	CHECK(ca_paths_bindir()[0] == '/');
	if (failures)
		fprintf(stderr, "test-paths: %d failures\n", failures);
	return failures != 0;
}
