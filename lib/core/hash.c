/* hash: see hash.h. SHA-256 as specified in FIPS 180-4. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "hash.h"

static const uint32_t round_constants[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t state[8], const unsigned char block[64])
{
	uint32_t w[64];
	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 |
			(uint32_t)block[4 * i + 2] << 8 | (uint32_t)block[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
		uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
	uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
	for (int i = 0; i < 64; i++) {
		uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
			round_constants[i] + w[i];
		uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
		h = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	state[0] += a;
	state[1] += b;
	state[2] += c;
	state[3] += d;
	state[4] += e;
	state[5] += f;
	state[6] += g;
	state[7] += h;
}

void ca_sha256_init(struct ca_sha256 *s)
{
	static const uint32_t initial[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};
	memcpy(s->state, initial, sizeof initial);
	s->bytes = 0;
	s->fill = 0;
}

void ca_sha256_update(struct ca_sha256 *s, const void *data, size_t n)
{
	const unsigned char *p = data;
	s->bytes += n;
	if (s->fill) {
		size_t take = 64 - s->fill < n ? 64 - s->fill : n;
		memcpy(s->block + s->fill, p, take);
		s->fill += take;
		p += take;
		n -= take;
		if (s->fill < 64)
			return;
		compress(s->state, s->block);
		s->fill = 0;
	}
	for (; n >= 64; p += 64, n -= 64)
		compress(s->state, p);
	memcpy(s->block, p, n);
	s->fill = n;
}

void ca_sha256_string(struct ca_sha256 *s, const char *text)
{
	ca_sha256_update(s, text, strlen(text) + 1);
}

void ca_sha256_final(struct ca_sha256 *s, unsigned char digest[32])
{
	uint64_t bits = s->bytes * 8;
	unsigned char pad[72] = {0x80};
	size_t padlen = s->fill < 56 ? 56 - s->fill : 120 - s->fill;
	for (int i = 0; i < 8; i++)
		pad[padlen + i] = (unsigned char)(bits >> (56 - 8 * i));
	ca_sha256_update(s, pad, padlen + 8);
	for (int i = 0; i < 8; i++) {
		digest[4 * i] = (unsigned char)(s->state[i] >> 24);
		digest[4 * i + 1] = (unsigned char)(s->state[i] >> 16);
		digest[4 * i + 2] = (unsigned char)(s->state[i] >> 8);
		digest[4 * i + 3] = (unsigned char)s->state[i];
	}
}

void ca_sha256_final_hex(struct ca_sha256 *s, char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char d[32];
	ca_sha256_final(s, d);
	for (int i = 0; i < 32; i++) {
		hex[2 * i] = digits[d[i] >> 4];
		hex[2 * i + 1] = digits[d[i] & 15];
	}
	hex[64] = '\0';
}

void ca_sha256_hex(const void *data, size_t n, char hex[65])
{
	struct ca_sha256 s;
	ca_sha256_init(&s);
	ca_sha256_update(&s, data, n);
	ca_sha256_final_hex(&s, hex);
}

static int hash_fd(struct ca_sha256 *s, int fd)
{
	char buf[65536];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return 0;
		ca_sha256_update(s, buf, (size_t)n);
	}
}

int ca_hash_file(struct ca_sha256 *s, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int r = hash_fd(s, fd);
	int saved = errno;
	close(fd);
	errno = saved;
	return r;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int hash_dir(struct ca_sha256 *s, const char *root, const char *rel, ca_hash_keep_fn keep, void *ctx)
{
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof dir, "%s%s%s", root, *rel ? "/" : "", rel) >= (int)sizeof dir) {
		errno = ENAMETOOLONG;
		return -1;
	}
	struct dirent **names;
	int n = scandir(dir, &names, NULL, by_name);
	if (n < 0)
		return -1;
	int status = 0;
	for (int i = 0; i < n; i++) {
		const char *name = names[i]->d_name;
		char relpath[PATH_MAX], full[PATH_MAX];
		struct stat st;
		if (status != 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		if (snprintf(relpath, sizeof relpath, "%s%s%s", rel, *rel ? "/" : "", name) >= (int)sizeof relpath ||
				snprintf(full, sizeof full, "%s/%s", dir, name) >= (int)sizeof full) {
			errno = ENAMETOOLONG;
			status = -1;
			continue;
		}
		if (lstat(full, &st) != 0) {
			status = -1;
			continue;
		}
		int is_dir = S_ISDIR(st.st_mode);
		if (keep && !keep(relpath, is_dir, ctx))
			continue;
		if (is_dir) {
			ca_sha256_update(s, "d", 1);
			ca_sha256_string(s, relpath);
			status = hash_dir(s, root, relpath, keep, ctx);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t len = readlink(full, target, sizeof target - 1);
			if (len < 0) {
				status = -1;
				continue;
			}
			target[len] = '\0';
			ca_sha256_update(s, "l", 1);
			ca_sha256_string(s, relpath);
			ca_sha256_string(s, target);
		} else if (S_ISREG(st.st_mode)) {
			unsigned char size[8];
			for (int b = 0; b < 8; b++)
				size[b] = (unsigned char)((uint64_t)st.st_size >> (8 * b));
			ca_sha256_update(s, "f", 1);
			ca_sha256_string(s, relpath);
			ca_sha256_update(s, size, sizeof size);
			/* The size is fed first, so the content cannot run into the next entry. */
			if (ca_hash_file(s, full) != 0)
				status = -1;
		}
	}
	int saved = errno;
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	errno = saved;
	return status;
}

int ca_hash_tree(struct ca_sha256 *s, const char *dir, ca_hash_keep_fn keep, void *ctx)
{
	return hash_dir(s, dir, "", keep, ctx);
}
