/* Unit tests of lib/paths: environment overrides, mkdirs, PATH lists. Usage: test-paths DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

	/* A PATH-style list: the first directory with a runnable regular file; a directory or a plain file is passed over. */
	char bin1[4096], bin2[4096], prog[4096], list[16384], *found;
	snprintf(bin1, sizeof bin1, "%s/bin1", argv[1]);
	snprintf(bin2, sizeof bin2, "%s/bin2", argv[1]);
	CHECK(ca_paths_mkdirs(bin1, 0755) == 0 && ca_paths_mkdirs(bin2, 0755) == 0);
	snprintf(prog, sizeof prog, "%s/tool", bin1);
	FILE *f = fopen(prog, "w");
	CHECK(f && fclose(f) == 0);  /* not executable */
	snprintf(prog, sizeof prog, "%s/tool", bin2);
	f = fopen(prog, "w");
	CHECK(f && fclose(f) == 0 && chmod(prog, 0755) == 0);
	snprintf(list, sizeof list, "::%s/missing:%s:%s", argv[1], bin1, bin2);
	found = ca_paths_find_program("tool", list);
	CHECK(found && strcmp(found, prog) == 0);
	free(found);
	CHECK(ca_paths_find_program("bin1", argv[1]) == NULL);  /* a directory */
	CHECK(ca_paths_find_program("no-such-tool", list) == NULL);
	found = ca_paths_find_program("/x/y", NULL);
	CHECK(found && strcmp(found, "/x/y") == 0);
	free(found);
	if (failures)
		fprintf(stderr, "test-paths: %d failures\n", failures);
	return failures != 0;
}
