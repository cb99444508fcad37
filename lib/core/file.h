/*
 * file: a whole file read or written in one call, for the loaders
 * (config.json, tokenizer.json, the safetensors index), the build (a
 * candidate's sources, its cache) and ca-agent (workspaces, skill files);
 * a whole tree removed or copied, for the evaluation's workspaces.
 */
#ifndef CA_FILE_H
#define CA_FILE_H

#include <stddef.h>

/* For files a candidate controls: a symbolic link as the last component is refused (ELOOP). */
#define CA_FILE_NOFOLLOW 1
/*
 * Only a regular file: opened without waiting (a FIFO put in its place
 * cannot block us), anything else refused with EINVAL, and one larger
 * than max refused with EFBIG before a byte is read.
 */
#define CA_FILE_REGULAR 2

/*
 * The contents of path, malloc'd, with a NUL after them that *len does not
 * count (len may be NULL). NULL with errno set when the file cannot be
 * opened or read, or with EFBIG when it holds more than max bytes (0: no
 * limit). flags: 0, or CA_FILE_NOFOLLOW and CA_FILE_REGULAR or'ed.
 */
char *ca_file_read(const char *path, int flags, size_t max, size_t *len);
/*
 * Write data[0..len) to path, created or truncated, never through a
 * symbolic link; the file gets mode exactly (the umask does not apply).
 * 0, or -1 with errno set.
 */
int ca_file_write(const char *path, const void *data, size_t len, int mode);
/*
 * All of data[0..len) to the open descriptor fd, again after a signal or a
 * short write. 0, or -1 with errno set (EIO for a write that wrote nothing).
 */
int ca_file_write_fd(int fd, const void *data, size_t len);

/*
 * Remove path and everything below it, depth first, never following a
 * symbolic link (a link is removed, not what it names); what cannot be
 * removed is left without a word.
 */
void ca_file_remove_tree(const char *path);

/* ca_file_copy_tree: timestamps kept (build trees whose tools decide what to rebuild by them). */
#define CA_FILE_KEEP_TIMES 1
/*
 * ca_file_copy_tree: directories and regular files only (a template tree
 * such as the skill's workdir/, or the Python headers a build copies in:
 * what a link names must not come along).
 */
#define CA_FILE_SKIP_LINKS 2

/*
 * Copy what is below the directory src into the directory dst, with
 * cp -R -P: a symbolic link is copied as a link, never followed; modes
 * as cp gives them. flags: 0 or CA_FILE_KEEP_TIMES. 0, or -1 when cp
 * failed or ran past 120 s.
 *
 * With CA_FILE_SKIP_LINKS (alone) the copy is made here instead: dst and
 * the directories below it are made as needed, a regular file is copied
 * with mode 0755 when it had an execute bit and 0644 otherwise, and
 * symbolic links and special files are left out. 0, or -1 with errno set
 * (ENOENT when src does not exist).
 */
int ca_file_copy_tree(const char *src, const char *dst, int flags);

#endif
