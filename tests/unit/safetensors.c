/*
 * Unit tests of lib/safetensors: fp32/bf16/fp16 conversions, writing and
 * reading back one file and a sharded directory, and rejection of broken
 * headers. Run in a scratch directory given as argv[1].
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "safetensors.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

static void write_bytes(const char *path, const void *p, size_t n)
{
	FILE *fp = fopen(path, "wb");
	if (!fp || fwrite(p, 1, n, fp) != n || fclose(fp) != 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", path);
}

static void test_conversions(void)
{
	CHECK(ca_st_bf16_to_f32(ca_st_f32_to_bf16(1.0f)) == 1.0f);
	CHECK(ca_st_bf16_to_f32(ca_st_f32_to_bf16(-3.5f)) == -3.5f);
	/* 1 + 2^-8 lies halfway between bf16 1 and 1 + 2^-7: ties to even gives 1. */
	CHECK(ca_st_bf16_to_f32(ca_st_f32_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
	CHECK(ca_st_bf16_to_f32(ca_st_f32_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
	CHECK(isnan(ca_st_bf16_to_f32(ca_st_f32_to_bf16(NAN))));
	CHECK(isinf(ca_st_bf16_to_f32(ca_st_f32_to_bf16(INFINITY))));
	/* Every finite fp16 value survives fp16 -> fp32 -> fp16. */
	for (unsigned h = 0; h < 0x10000; h++) {
		if ((h & 0x7c00) == 0x7c00)
			continue;
		float f = ca_st_f16_to_f32((uint16_t)h);
		if (ca_st_f32_to_f16(f) != h && !(f == 0 && (h & 0x7fff) == 0)) {
			fprintf(stderr, "fp16 %04x -> %g -> %04x\n", h, f, ca_st_f32_to_f16(f));
			failures++;
			break;
		}
	}
	CHECK(ca_st_f16_to_f32(0x3c00) == 1.0f);
	CHECK(ca_st_f16_to_f32(0x0001) == ldexpf(1, -24));
	CHECK(ca_st_f32_to_f16(65520.0f) == 0x7c00);  /* rounds up to infinity */
	CHECK(ca_st_f32_to_f16(1e-9f) == 0);
}

static void test_round_trip(const char *dir)
{
	float a[6] = {1, -2, 0.5f, 3.25f, -0.125f, 100};
	float b[3] = {0.1f, 0.2f, 0.3f};
	struct ca_st_out out[2] = {
		{.name = "a.weight", .ndim = 2, .shape = {2, 3}, .data = a},
		{.name = "b.bias", .ndim = 1, .shape = {3}, .data = b},
	};
	char why[CA_ST_WHY];
	enum ca_st_dtype types[3] = {CA_ST_F32, CA_ST_BF16, CA_ST_F16};
	for (int k = 0; k < 3; k++) {
		char sub[512];
		snprintf(sub, sizeof sub, "%s/one-%d", dir, k);
		char cmd[600];
		snprintf(cmd, sizeof cmd, "mkdir -p %s", sub);
		CHECK(system(cmd) == 0);
		/* A shard limit of 10 bytes forces one tensor per shard. */
		CHECK(ca_st_write_dir(sub, 2, out, types[k], k == 1 ? 10 : 0, why) == 0);
		struct ca_st_dir *d = ca_st_dir_open(sub, why);
		CHECK(d != NULL);
		if (!d) {
			fprintf(stderr, "%s\n", why);
			continue;
		}
		CHECK(d->nfiles == (k == 1 ? 2 : 1));
		CHECK(ca_st_dir_dtype(d) == types[k]);
		const struct ca_st_tensor *ta = ca_st_dir_find(d, "a.weight"), *tb = ca_st_dir_find(d, "b.bias");
		CHECK(ta && tb && ta->ndim == 2 && ta->shape[0] == 2 && ta->shape[1] == 3 && tb->numel == 3);
		float ra[6], rb[3];
		if (ta && tb) {
			CHECK(ca_st_to_f32(ta, ra) == 0 && ca_st_to_f32(tb, rb) == 0);
			for (int i = 0; i < 6; i++)
				CHECK(ra[i] == a[i]);  /* all exactly representable in bf16 and fp16 */
			for (int i = 0; i < 3; i++)
				CHECK(fabsf(rb[i] - b[i]) <= (k == 0 ? 0 : 2e-3f));
		}
		CHECK(ca_st_dir_find(d, "missing") == NULL);
		ca_st_dir_close(d);
	}
}

static void test_bad_files(const char *dir)
{
	char path[512], why[CA_ST_WHY];
	struct { const char *header; const char *expect; } cases[] = {
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", "outside"},
		{"{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", "bytes"},
		{"{\"x\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", "unknown dtype"},
		{"[1,2]", "not a JSON object"},
		{"{\"x\":", "bad header"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		unsigned char buf[256] = {0};
		size_t hl = strlen(cases[i].header);
		buf[0] = (unsigned char)hl;
		memcpy(buf + 8, cases[i].header, hl);
		snprintf(path, sizeof path, "%s/bad%zu.safetensors", dir, i);
		write_bytes(path, buf, 8 + hl + 8);
		struct ca_st_file *f = ca_st_open(path, why);
		CHECK(f == NULL);
		if (f)
			ca_st_close(f);
		else if (!strstr(why, cases[i].expect)) {
			fprintf(stderr, "case %zu: reason '%s' lacks '%s'\n", i, why, cases[i].expect);
			failures++;
		}
	}
	unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
	snprintf(path, sizeof path, "%s/huge.safetensors", dir);
	write_bytes(path, huge, sizeof huge);
	CHECK(ca_st_open(path, why) == NULL && strstr(why, "exceeds"));
	snprintf(path, sizeof path, "%s/none.safetensors", dir);
	CHECK(ca_st_open(path, why) == NULL && strstr(why, "No such file"));
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	const char *dir = argc > 1 ? argv[1] : ".";
	test_conversions();
	test_round_trip(dir);
	test_bad_files(dir);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
