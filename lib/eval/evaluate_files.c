/*
 * evaluate_files: files in a candidate's directory and in ours: the
 * candidate's files written, its tree opened to its uid, a file revealed
 * to it (a hard link, else a copy), whose fault a file that cannot be
 * placed is; whole-file reads and writes that follow links as the
 * evaluation always has (lib/file's refuse them).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "err.h"
#include "file.h"
#include "evaluate_impl.h"

int eval_write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	if (ca_file_write_fd(fd, data, len) != 0) {
		close(fd);
		return -1;
	}
	return close(fd);
}

char *eval_read_file(const char *path, size_t cap, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	char *buf = ca_xmalloc(cap + 1);
	size_t n = fread(buf, 1, cap, fp);
	fclose(fp);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

/* The last lines of a log file, at most max bytes, or "" (malloc'd). */
char *log_tail(const char *path, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ca_xstrdup("");
	off_t end = lseek(fd, 0, SEEK_END);
	off_t start = end > (off_t)max ? end - (off_t)max : 0;
	char *buf = ca_xmalloc(max + 1);
	ssize_t n = pread(fd, buf, max, start);
	close(fd);
	if (n < 0)
		n = 0;
	buf[n] = '\0';
	char *p = buf;
	if (start > 0 && (p = strchr(buf, '\n')))
		p++;
	else
		p = buf;
	/* Keep it printable. */
	for (char *q = p; *q; q++)
		if ((unsigned char)*q < 32 && *q != '\n' && *q != '\t')
			*q = '?';
	size_t l = strlen(p);
	while (l && (p[l - 1] == '\n' || p[l - 1] == ' '))
		p[--l] = '\0';
	char *out = ca_xstrdup(p);
	free(buf);
	return out;
}

int mkdir_mode(const char *path, mode_t mode)
{
	if (mkdir(path, mode) != 0 && errno != EEXIST)
		return -1;
	return chmod(path, mode);
}

/* A relative path that stays inside its directory. */
static int safe_relative(const char *name)
{
	if (!*name || name[0] == '/' || strlen(name) > 512)
		return 0;
	const char *p = name;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		if (*p == '/')
			p++;
	}
	return 1;
}

/* Write candidate.files (consumed) into dir; NULL, or why in why. */
const char *write_files(const char *dir, jv files, char *why, size_t why_len)
{
	const char *failed = NULL;
	jv_object_foreach(files, key, value) {
		const char *name = jv_string_value(key);
		char path[PATHLEN];
		if (!failed && (jv_get_kind(value) != JV_KIND_STRING || !safe_relative(name))) {
			snprintf(why, why_len, "candidate.files: bad entry %s", name);
			failed = why;
		}
		if (!failed) {
			snprintf(path, sizeof path, "%s/%s", dir, name);
			for (char *sl = path + strlen(dir) + 1; (sl = strchr(sl, '/')); sl++) {
				*sl = '\0';
				mkdir_mode(path, 0777);
				*sl = '/';
			}
			if (eval_write_file(path, jv_string_value(value), (size_t)jv_string_length_bytes(jv_copy(value))) != 0) {
				snprintf(why, why_len, "cannot write %s: %s", path, strerror(errno));
				failed = why;
			}
		}
		jv_free(key);
		jv_free(value);
	}
	jv_free(files);
	return failed;
}

static int chmod_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D)
		chmod(path, 0777);
	else if (flag == FTW_F)
		chmod(path, (st->st_mode & 0111) ? 0755 : 0644);
	return 0;
}

/* Open a tree to the candidate's uid: directories 0777, files 0755 or 0644 (links not followed). */
void chmod_tree(const char *dir)
{
	nftw(dir, chmod_entry, 16, FTW_PHYS);
}

/* Whether dir/kernels holds sources ca-build must compile. */
int has_kernel_sources(const char *dir)
{
	char path[PATHLEN];
	snprintf(path, sizeof path, "%s/kernels", dir);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	struct dirent *e;
	int found = 0;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if ((n > 3 && !strcmp(e->d_name + n - 3, ".cu")) || (n > 4 && !strcmp(e->d_name + n - 4, ".cpp")))
			found = 1;
	}
	closedir(d);
	return found;
}

/*
 * Put the file from at to (replacing what is there): a hard link, which
 * costs microseconds whatever the size, else a copy. 0, or -1.
 */
int reveal_file(const char *from, const char *to)
{
	unlink(to);
	if (link(from, to) == 0)
		return 0;
	return reveal_copy(from, to);
}

/* Put a copy of the file from at to (which must not exist): nothing written there reaches from. 0, or -1. */
int reveal_copy(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
	if (in >= 0)
		out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out >= 0) {
		char buf[1 << 16];
		ssize_t n;
		rc = 0;
		while ((n = read(in, buf, sizeof buf)) != 0) {
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 || write(out, buf, (size_t)n) != n) {
				rc = -1;
				break;
			}
		}
		if (close(out) != 0)
			rc = -1;
	}
	int saved = errno;
	if (in >= 0)
		close(in);
	if (rc != 0)
		unlink(to);
	errno = saved;
	return rc;
}

/*
 * The bytes of the files below the directory fd (consumed) that are the
 * candidate's: not ours by owner where we run as root (the sandbox's user
 * wrote them), every file otherwise. Links are not followed.
 */
static double candidate_bytes(int fd, int depth)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	uid_t ours = geteuid();
	double sum = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth < 32) {
			int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0)
				sum += candidate_bytes(sub, depth + 1);
		} else if (S_ISREG(st.st_mode) && (ours != 0 || st.st_uid != ours)) {
			sum += (double)st.st_blocks * 512;
		}
	}
	closedir(d);
	return sum;
}

/*
 * Whether the disk that ran out of space (errno err) was filled by the
 * candidate: its files in its directory dir take half of that
 * filesystem or more (a candidate that writes until the disk is full
 * holds nearly all of it; an honest one's outputs are a task's, which
 * leave room for its inputs). 1 with why set, naming how much.
 */
int candidate_filled_disk(const char *dir, int err, char *why, size_t size)
{
	struct statvfs vfs;
	if ((err != ENOSPC && err != EDQUOT) || statvfs(dir, &vfs) != 0)
		return 0;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	double bytes = fd >= 0 ? candidate_bytes(fd, 0) : 0, disk = (double)vfs.f_blocks * (double)vfs.f_frsize;
	if (disk <= 0 || bytes < disk / 2)
		return 0;
	snprintf(why, size, "%s: the candidate's files in its directory take %.1f GiB of the filesystem's %.1f GiB "
		"(it filled the disk)", strerror(err), bytes / (1 << 30), disk / (1 << 30));
	return 1;
}

/*
 * Whose fault it is that a file could not be put in the candidate's
 * directory dir once its code ran (errno err): a full disk or an I/O
 * error is the evaluator's ("system"), unless the candidate's own files
 * filled the disk (candidate_filled_disk); anything else -- the
 * directory made unwritable, removed, or a file put where ours goes --
 * is the candidate's doing ("run"), so it cannot turn its -1 into an
 * evaluator fault. why gets the message.
 */
const char *placing_failed(const char *dir, int err, const char *what, char *why, size_t size)
{
	char filled[256];
	if (candidate_filled_disk(dir, err, filled, sizeof filled)) {
		snprintf(why, size, "cannot put %s in the candidate's directory: %s", what, filled);
		return "run";
	}
	int ours = err == ENOSPC || err == EDQUOT || err == EIO || err == ENOMEM || err == EMFILE || err == ENFILE;
	snprintf(why, size, "cannot put %s in the candidate's directory: %s%s", what, strerror(err),
		ours ? "" : " (the candidate changed its directory)");
	return ours ? "system" : "run";
}
