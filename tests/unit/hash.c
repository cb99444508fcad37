/* Unit tests for lib/hash: SHA-256 test vectors (FIPS 180-4 examples) and tree hashes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "test-hash: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

static int hex_is(const char *data, size_t n, const char *want)
{
	char hex[65];
	ca_sha256_hex(data, n, hex);
	if (strcmp(hex, want) != 0) {
		fprintf(stderr, "test-hash: got %s want %s\n", hex, want);
		return 0;
	}
	return 1;
}

static void write_file(const char *path, const char *text)
{
	FILE *fp = fopen(path, "w");
	if (!fp || fputs(text, fp) < 0 || fclose(fp) != 0) {
		perror(path);
		exit(1);
	}
}

static void tree_hex(const char *dir, char hex[65], ca_hash_keep_fn keep)
{
	struct ca_sha256 s;
	ca_sha256_init(&s);
	CHECK(ca_hash_tree(&s, dir, keep, NULL) == 0);
	ca_sha256_final_hex(&s, hex);
}

static int skip_o(const char *rel, int is_dir, void *ctx)
{
	size_t n = strlen(rel);
	return is_dir || !(n > 2 && strcmp(rel + n - 2, ".o") == 0);
}

int main(void)
{
	CHECK(hex_is("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
	CHECK(hex_is("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	CHECK(hex_is(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
	const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
	CHECK(hex_is(four, strlen(four), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));

	/* One million 'a', fed in uneven pieces. */
	char *a = malloc(1000000);
	memset(a, 'a', 1000000);
	CHECK(hex_is(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
	struct ca_sha256 s;
	char hex[65];
	ca_sha256_init(&s);
	for (size_t off = 0, step = 1; off < 1000000; off += step, step = step * 3 % 1000 + 1)
		ca_sha256_update(&s, a + off, off + step > 1000000 ? 1000000 - off : step);
	ca_sha256_final_hex(&s, hex);
	CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
	free(a);

	/* Padding edge lengths 55, 56, 63, 64 agree between one-shot and split feeding. */
	for (size_t n = 54; n <= 65; n++) {
		char buf[65], h1[65], h2[65];
		memset(buf, 'x', n);
		ca_sha256_hex(buf, n, h1);
		ca_sha256_init(&s);
		for (size_t i = 0; i < n; i++)
			ca_sha256_update(&s, buf + i, 1);
		ca_sha256_final_hex(&s, h2);
		CHECK(strcmp(h1, h2) == 0);
	}

	/* Trees: same content, same hash; any change of content, name or set changes it. */
	char dir[] = "/tmp/ca-test-hash.XXXXXX", path[256];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof path, "%s/kernels", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof path, "%s/kernels/b.cu", dir);
	write_file(path, "kernel b\n");
	snprintf(path, sizeof path, "%s/kernels/a.cu", dir);
	write_file(path, "kernel a\n");
	snprintf(path, sizeof path, "%s/model_new.py", dir);
	write_file(path, "import torch\n");
	char h1[65], h2[65], h3[65];
	tree_hex(dir, h1, NULL);
	tree_hex(dir, h2, NULL);
	CHECK(strcmp(h1, h2) == 0);
	snprintf(path, sizeof path, "%s/kernels/a.cu", dir);
	write_file(path, "kernel A\n");
	tree_hex(dir, h2, NULL);
	CHECK(strcmp(h1, h2) != 0);
	write_file(path, "kernel a\n");
	tree_hex(dir, h2, NULL);
	CHECK(strcmp(h1, h2) == 0);
	/* Ignored files do not count. */
	snprintf(path, sizeof path, "%s/kernels/a.o", dir);
	write_file(path, "object\n");
	tree_hex(dir, h3, skip_o);
	CHECK(strcmp(h1, h3) == 0);
	tree_hex(dir, h3, NULL);
	CHECK(strcmp(h1, h3) != 0);
	unlink(path);
	/* A rename changes the hash. */
	char from[256];
	snprintf(from, sizeof from, "%s/kernels/b.cu", dir);
	snprintf(path, sizeof path, "%s/kernels/c.cu", dir);
	CHECK(rename(from, path) == 0);
	tree_hex(dir, h3, NULL);
	CHECK(strcmp(h1, h3) != 0);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);

	if (failures) {
		fprintf(stderr, "test-hash: %d checks failed\n", failures);
		return 1;
	}
	puts("test-hash: all checks passed");
	return 0;
}
