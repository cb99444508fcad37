/*
 * hash: SHA-256 and content hashes of files and directory trees (owner: B1).
 *
 * The build cache and the baseline caches are keyed by content: a hash over
 * the bytes that decide the result, never over timestamps. Directory trees
 * are walked in byte order of names, so the hash does not depend on the
 * filesystem's listing order; each entry contributes its kind, its path
 * relative to the root and its content (or link target), so renaming a file
 * changes the hash.
 */
#ifndef CA_HASH_H
#define CA_HASH_H

#include <stddef.h>
#include <stdint.h>

struct ca_sha256 {
	uint32_t state[8];
	uint64_t bytes;
	unsigned char block[64];
	size_t fill;
};

void ca_sha256_init(struct ca_sha256 *s);
void ca_sha256_update(struct ca_sha256 *s, const void *data, size_t n);
/* Feed a NUL-terminated string including its NUL (a separator no text can fake). */
void ca_sha256_string(struct ca_sha256 *s, const char *text);
void ca_sha256_final(struct ca_sha256 *s, unsigned char digest[32]);
/* Finish and write 64 lowercase hex digits plus NUL into hex. */
void ca_sha256_final_hex(struct ca_sha256 *s, char hex[65]);
/* One-shot hash of a buffer as hex. */
void ca_sha256_hex(const void *data, size_t n, char hex[65]);

/* Feed the content of a file. 0, or -1 with errno. */
int ca_hash_file(struct ca_sha256 *s, const char *path);

/*
 * Feed a directory tree: every entry below dir, in sorted order, for which
 * keep(relative path, is_dir, ctx) returns nonzero (keep NULL: all). A
 * directory that is not kept is not descended into. Symbolic links are
 * hashed by their target, never followed. 0, or -1 with errno.
 */
typedef int (*ca_hash_keep_fn)(const char *relpath, int is_dir, void *ctx);
int ca_hash_tree(struct ca_sha256 *s, const char *dir, ca_hash_keep_fn keep, void *ctx);

#endif
