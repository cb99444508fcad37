/*
 * file: a whole file read or written in one call, for the loaders
 * (config.json, tokenizer.json, the safetensors index), the build (a
 * candidate's sources, its cache) and ca-agent (workspaces, skill files).
 */
#ifndef CA_FILE_H
#define CA_FILE_H

#include <stddef.h>

/* For files a candidate controls: a symbolic link as the last component is refused (ELOOP). */
#define CA_FILE_NOFOLLOW 1

/*
 * The contents of path, malloc'd, with a NUL after them that *len does not
 * count (len may be NULL). NULL with errno set when the file cannot be
 * opened or read, or with EFBIG when it holds more than max bytes (0: no
 * limit). flags: 0 or CA_FILE_NOFOLLOW.
 */
char *ca_file_read(const char *path, int flags, size_t max, size_t *len);
/*
 * Write data[0..len) to path, created or truncated, never through a
 * symbolic link; the file gets mode exactly (the umask does not apply).
 * 0, or -1 with errno set.
 */
int ca_file_write(const char *path, const void *data, size_t len, int mode);

#endif
