/* Unit tests of lib/file: the trees ca_file_copy_tree and ca_file_remove_tree walk. Usage: test-file DIR */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "paths.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

static char *at(char *buf, size_t size, const char *dir, const char *name)
{
	snprintf(buf, size, "%s/%s", dir, name);
	return buf;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test-file DIR\n");
		return 2;
	}
	char src[4096], dst[4096], p[8192];
	struct stat st;
	snprintf(src, sizeof src, "%s/template", argv[1]);
	snprintf(dst, sizeof dst, "%s/workspace/ws", argv[1]);
	CHECK(ca_paths_mkdirs(at(p, sizeof p, src, "sub/deeper"), 0755) == 0);
	CHECK(ca_file_write(at(p, sizeof p, src, "notes.md"), "notes\n", 6, 0600) == 0);
	CHECK(ca_file_write(at(p, sizeof p, src, "sub/run.sh"), "#!/bin/sh\n", 10, 0700) == 0);
	CHECK(symlink("/etc/passwd", at(p, sizeof p, src, "leak")) == 0);
	CHECK(symlink("/etc", at(p, sizeof p, src, "sub/etc")) == 0);

	/* A template: directories and regular files, links left behind, modes 0644 or 0755. */
	CHECK(ca_file_copy_tree(src, dst, CA_FILE_SKIP_LINKS) == 0);
	CHECK(stat(at(p, sizeof p, dst, "sub/deeper"), &st) == 0 && S_ISDIR(st.st_mode));
	CHECK(lstat(at(p, sizeof p, dst, "notes.md"), &st) == 0 && (st.st_mode & 07777) == 0644);
	CHECK(lstat(at(p, sizeof p, dst, "sub/run.sh"), &st) == 0 && (st.st_mode & 07777) == 0755);
	CHECK(lstat(at(p, sizeof p, dst, "leak"), &st) != 0 && errno == ENOENT);
	CHECK(lstat(at(p, sizeof p, dst, "sub/etc"), &st) != 0 && errno == ENOENT);
	CHECK(ca_file_copy_tree(at(p, sizeof p, argv[1], "absent"), dst, CA_FILE_SKIP_LINKS) != 0 && errno == ENOENT);

	/* cp -R -P: links come along as links. */
	snprintf(dst, sizeof dst, "%s/copy", argv[1]);
	CHECK(ca_file_copy_tree(src, dst, 0) == 0);
	CHECK(lstat(at(p, sizeof p, dst, "leak"), &st) == 0 && S_ISLNK(st.st_mode));

	/* Removed depth first; a link is removed, not what it names. */
	ca_file_remove_tree(dst);
	CHECK(lstat(dst, &st) != 0 && errno == ENOENT);
	CHECK(stat("/etc/passwd", &st) == 0);
	ca_file_remove_tree(src);
	CHECK(lstat(src, &st) != 0 && errno == ENOENT);
	if (failures)
		fprintf(stderr, "test-file: %d failures\n", failures);
	return failures != 0;
}
