/* file: whole-file reads and writes, whole trees removed and copied; see file.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "file.h"
#include "paths.h"
#include "proc.h"

char *ca_file_read(const char *path, int flags, size_t max, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | (flags & CA_FILE_NOFOLLOW ? O_NOFOLLOW : 0) |
		(flags & CA_FILE_REGULAR ? O_NONBLOCK : 0));
	if (fd < 0)
		return NULL;
	struct stat st;
	if (flags & CA_FILE_REGULAR) {
		int e = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? EINVAL :
			max && (unsigned long long)st.st_size > max ? EFBIG : 0;
		if (e) {
			close(fd);
			errno = e;
			return NULL;
		}
	}
	size_t cap = 4096, n = 0;
	char *buf = ca_xmalloc(cap + 1);
	for (;;) {
		if (n == cap)
			buf = ca_xrealloc(buf, (cap *= 2) + 1);
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			close(fd);
			free(buf);
			errno = e;
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (max && n > max) {
			close(fd);
			free(buf);
			errno = EFBIG;
			return NULL;
		}
	}
	close(fd);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

int ca_file_write_fd(int fd, const void *data, size_t len)
{
	const char *p = data;
	size_t done = 0;
	while (done < len) {
		ssize_t w = write(fd, p + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return -1;
		}
		done += (size_t)w;
	}
	return 0;
}

int ca_file_write(const char *path, const void *data, size_t len, int mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -1;
	if (ca_file_write_fd(fd, data, len) != 0 || fchmod(fd, (mode_t)mode) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return close(fd);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st; (void)flag; (void)ftw;
	remove(path);
	return 0;
}

void ca_file_remove_tree(const char *path)
{
	nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* CA_FILE_SKIP_LINKS: the tree's directories and regular files, nothing else. */
static int copy_regular_tree(const char *src, const char *dst)
{
	DIR *d = opendir(src);
	if (!d)
		return -1;
	if (ca_paths_mkdirs(dst, 0755) != 0) {
		closedir(d);
		return -1;
	}
	struct dirent *e;
	int rc = 0;
	while (rc == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char from[PATH_MAX], to[PATH_MAX];
		snprintf(from, sizeof from, "%s/%s", src, e->d_name);
		snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
		struct stat st;
		if (lstat(from, &st) != 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			rc = copy_regular_tree(from, to);
		} else if (S_ISREG(st.st_mode)) {
			size_t len;
			char *data = ca_file_read(from, CA_FILE_NOFOLLOW, 0, &len);
			rc = data ? ca_file_write(to, data, len, (st.st_mode & 0111) ? 0755 : 0644) : -1;
			free(data);
		}
	}
	closedir(d);
	return rc;
}

int ca_file_copy_tree(const char *src, const char *dst, int flags)
{
	if (flags & CA_FILE_SKIP_LINKS)
		return copy_regular_tree(src, dst);
	char from[PATH_MAX + 64];
	snprintf(from, sizeof from, "%s/.", src);
	const char *argv[7] = {"cp", "-R", "-P"};
	int n = 3;
	if (flags & CA_FILE_KEEP_TIMES)
		argv[n++] = "--preserve=timestamps";
	argv[n++] = from;
	argv[n++] = dst;
	argv[n] = NULL;
	struct ca_proc p;
	ca_proc_init(&p, argv);
	p.in_mode = CA_PROC_NULL;
	p.timeout_s = 120;
	return ca_proc_run(&p) == 0 ? 0 : -1;
}
