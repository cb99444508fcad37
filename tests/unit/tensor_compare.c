/*
 * Unit tests of lib/tensor (files, hostile input), lib/compare (the rules
 * of ca-verify) and the evaluation's cache keys and kernel-name policy.
 *
 *   test-tensor_compare DIR          run the tests, scratch files in DIR
 *   test-tensor_compare dump FILE    print a tensor file's entries (for shell tests)
 *   test-tensor_compare compare REF CAND [ATOL RTOL]   print the verdict; exit 0 equal, 1 not
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "err.h"
#include "evaluate.h"
#include "tensor.h"

static int failures;

#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

static struct ca_tensor f32(const char *name, int ndim, const int64_t *dims, const float *v)
{
	struct ca_tensor t;
	memset(&t, 0, sizeof t);
	t.name = ca_xstrdup(name);
	t.dtype = CA_DT_F32;
	t.ndim = ndim;
	t.numel = 1;
	for (int i = 0; i < ndim; i++) {
		t.dims[i] = dims[i];
		t.numel *= (uint64_t)dims[i];
	}
	t.nbytes = t.numel * 4;
	t.data = ca_xmalloc(t.nbytes ? t.nbytes : 1);
	memcpy(t.data, v, t.nbytes);
	return t;
}

static struct ca_tensor_file one(struct ca_tensor t)
{
	struct ca_tensor_file f = {1, ca_xmalloc(sizeof t)};
	f.entries[0] = t;
	return f;
}

static int verdict(const float *r, const float *c, int n, char *msg)
{
	int64_t dims[1] = {n};
	struct ca_tensor_file rf = one(f32("", 1, dims, r)), cf = one(f32("", 1, dims, c));
	struct ca_compare_options o;
	struct ca_compare_result res;
	ca_compare_defaults(&o);
	int ok = ca_compare_tensors(&rf, &cf, &o, &res);
	if (msg)
		strcpy(msg, res.message);
	ca_tensor_free(&rf);
	ca_tensor_free(&cf);
	return ok;
}

static void test_rules(void)
{
	char msg[600];
	float r[4] = {1, 2, 3, 4}, c[4] = {1.001f, 2, 3, 4};
	CHECK(verdict(r, c, 4, msg) == 1);
	c[3] = 4.2f;
	CHECK(verdict(r, c, 4, msg) == 0 && strstr(msg, "element 3"));
	c[3] = NAN;
	CHECK(verdict(r, c, 4, msg) == 0 && strstr(msg, "NaN"));
	c[3] = INFINITY;
	CHECK(verdict(r, c, 4, msg) == 0 && strstr(msg, "Inf"));
	/* Tiny outputs: zeros would pass atol 1e-2, but must fail. */
	float tr[4] = {1e-4f, 2e-4f, 0, 3e-4f}, zero[4] = {0, 0, 0, 0}, half[4] = {0.5e-4f, 1e-4f, 0, 1.5e-4f};
	CHECK(verdict(tr, zero, 4, msg) == 0 && strstr(msg, "all zeros"));
	CHECK(verdict(tr, half, 4, msg) == 0);
	CHECK(verdict(tr, tr, 4, msg) == 1);
	/* A constant answer where the reference varies. */
	float cr[4] = {0.40f, 0.41f, 0.39f, 0.40f}, cc[4] = {0.4f, 0.4f, 0.4f, 0.4f};
	CHECK(verdict(cr, cc, 4, msg) == 0 && strstr(msg, "every element"));
	/* But a constant reference may be matched by a constant answer. */
	CHECK(verdict(cc, cc, 4, msg) == 1);
	CHECK(verdict(zero, zero, 4, msg) == 1);
}

static void test_structure(void)
{
	struct ca_compare_options o;
	struct ca_compare_result res;
	ca_compare_defaults(&o);
	int64_t d2[2] = {2, 2}, d4[1] = {4};
	float v[4] = {1, 2, 3, 4};
	struct ca_tensor_file a = one(f32("", 2, d2, v)), b = one(f32("", 1, d4, v));
	CHECK(ca_compare_tensors(&a, &b, &o, &res) == 0 && strstr(res.message, "shape [4], expected [2, 2]"));
	b.entries[0].dtype = CA_DT_I32;
	b.entries[0].ndim = 2;
	b.entries[0].dims[0] = b.entries[0].dims[1] = 2;
	CHECK(ca_compare_tensors(&a, &b, &o, &res) == 0 && strstr(res.message, "dtype int32, expected float32"));
	ca_tensor_free(&a);
	ca_tensor_free(&b);
	/* Tuples and lists match each other; names must otherwise agree. */
	struct ca_tensor_file t = {2, ca_xmalloc(2 * sizeof(struct ca_tensor))};
	struct ca_tensor_file l = {2, ca_xmalloc(2 * sizeof(struct ca_tensor))};
	t.entries[0] = f32("(0)", 1, d4, v);
	t.entries[1] = f32("(1){mean}", 1, d4, v);
	l.entries[0] = f32("[0]", 1, d4, v);
	l.entries[1] = f32("[1]{mean}", 1, d4, v);
	CHECK(ca_compare_tensors(&t, &l, &o, &res) == 1);
	free(l.entries[1].name);
	l.entries[1].name = ca_xstrdup("[1]{std}");
	CHECK(ca_compare_tensors(&t, &l, &o, &res) == 0 && strstr(res.message, "structure"));
	l.count = 1;
	CHECK(ca_compare_tensors(&t, &l, &o, &res) == 0 && strstr(res.message, "1 output value where the reference returns 2"));
	l.count = 2;
	ca_tensor_free(&t);
	ca_tensor_free(&l);
}

static void write_bytes(const char *path, const void *data, size_t n)
{
	FILE *fp = fopen(path, "wb");
	fwrite(data, 1, n, fp);
	fclose(fp);
}

static void test_files(const char *dir)
{
	char path[4096], bad[4096], why[512];
	snprintf(path, sizeof path, "%s/a.ten", dir);
	snprintf(bad, sizeof bad, "%s/bad.ten", dir);
	int64_t dims[2] = {2, 3};
	float v[6] = {1, -2, 3, -4, 5, -6};
	struct ca_tensor_file f = one(f32("(0)", 2, dims, v)), g;
	CHECK(ca_tensor_write(path, &f) == 0);
	CHECK(ca_tensor_read(path, 0, &g, why, sizeof why) == 0);
	CHECK(g.count == 1 && !strcmp(g.entries[0].name, "(0)") && g.entries[0].numel == 6 &&
		g.entries[0].dims[1] == 3 && ca_tensor_value(&g.entries[0], 3) == -4);
	ca_tensor_free(&g);
	/* The cap on data bytes. */
	CHECK(ca_tensor_read(path, 8, &g, why, sizeof why) == -1 && strstr(why, "more than 8 bytes"));
	/* Hostile files. */
	write_bytes(bad, "NOTATENSORFILE!!", 16);
	CHECK(ca_tensor_read(bad, 0, &g, why, sizeof why) == -1 && strstr(why, "bad magic"));
	FILE *fp = fopen(path, "rb");
	unsigned char buf[256];
	size_t n = fread(buf, 1, sizeof buf, fp);
	fclose(fp);
	write_bytes(bad, buf, n - 3);
	CHECK(ca_tensor_read(bad, 0, &g, why, sizeof why) == -1 && strstr(why, "truncated"));
	unsigned char big[256];
	memcpy(big, buf, n);
	big[n] = 0;
	write_bytes(bad, big, n + 1);
	CHECK(ca_tensor_read(bad, 0, &g, why, sizeof why) == -1 && strstr(why, "trailing"));
	/* A shape that claims far more data than the file holds. */
	memcpy(big, buf, n);
	size_t dim_at = 16 + 4 + 3 + 4;  /* header, name length, "(0)", dtype/flags/ndim */
	big[dim_at + 5] = 0x7f;
	write_bytes(bad, big, n);
	CHECK(ca_tensor_read(bad, 0, &g, why, sizeof why) == -1);
	/* Half and bfloat16 widen exactly. */
	struct ca_tensor h;
	memset(&h, 0, sizeof h);
	uint16_t hv[3] = {0x3c00, 0xc000, 0x3f80};
	h.dtype = CA_DT_F16;
	h.data = hv;
	CHECK(ca_tensor_value(&h, 0) == 1.0 && ca_tensor_value(&h, 1) == -2.0);
	h.dtype = CA_DT_BF16;
	CHECK(ca_tensor_value(&h, 2) == 1.0);
	ca_tensor_free(&f);
}

static void test_keys_and_policy(void)
{
	char a[65], b[65];
	ca_eval_baseline_key("t", "NVIDIA H200", "2.11.0", "eager:default:cuda", 5, 30, 3, a);
	ca_eval_baseline_key("t", "NVIDIA H200", "2.11.0", "eager:default:cuda", 5, 30, 3, b);
	CHECK(!strcmp(a, b) && strlen(a) == 64);
	const char *variants[][4] = {
		{"u", "NVIDIA H200", "2.11.0", "eager:default:cuda"},
		{"t", "NVIDIA H100", "2.11.0", "eager:default:cuda"},
		{"t", "NVIDIA H200", "2.12.0", "eager:default:cuda"},
		{"t", "NVIDIA H200", "2.11.0", "compile:default:cuda"},
	};
	for (int i = 0; i < 4; i++) {
		ca_eval_baseline_key(variants[i][0], variants[i][1], variants[i][2], variants[i][3], 5, 30, 3, b);
		CHECK(strcmp(a, b) != 0);
	}
	ca_eval_baseline_key("t", "NVIDIA H200", "2.11.0", "eager:default:cuda", 5, 31, 3, b);
	CHECK(strcmp(a, b) != 0);
	CHECK(ca_eval_kernel_forbidden("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>"));
	CHECK(ca_eval_kernel_forbidden("triton_poi_fused_relu_0"));
	CHECK(ca_eval_kernel_forbidden("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>"));
	CHECK(ca_eval_kernel_forbidden("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_"));
	CHECK(!ca_eval_kernel_forbidden("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"));
	CHECK(!ca_eval_kernel_forbidden("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_cublas"));
	CHECK(!ca_eval_kernel_forbidden("relu_vec4(float4 const*, float4*, long long)"));
}

static int dump(const char *path)
{
	struct ca_tensor_file f;
	char why[512], shape[128];
	if (ca_tensor_read(path, 0, &f, why, sizeof why) < 0) {
		fprintf(stderr, "%s\n", why);
		return 1;
	}
	for (int i = 0; i < f.count; i++) {
		struct ca_tensor *t = &f.entries[i];
		ca_tensor_shape_string(t, shape, sizeof shape);
		printf("%s %s%s %s", *t->name ? t->name : "-", ca_tensor_dtype_name(t->dtype),
			t->flags & CA_TENSOR_SCALAR ? "(scalar)" : "", shape);
		for (uint64_t k = 0; k < t->numel && k < 4; k++)
			printf(" %g", ca_tensor_value(t, k));
		printf("\n");
	}
	ca_tensor_free(&f);
	return 0;
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc == 3 && !strcmp(argv[1], "dump"))
		return dump(argv[2]);
	if ((argc == 4 || argc == 6) && !strcmp(argv[1], "compare")) {
		struct ca_compare_options o;
		struct ca_compare_result r;
		ca_compare_defaults(&o);
		if (argc == 6) {
			o.atol = atof(argv[4]);
			o.rtol = atof(argv[5]);
		}
		int ok = ca_compare_files(argv[2], argv[3], &o, &r);
		printf("%s max_abs_err=%g max_rel_err=%g %s\n", ok == 1 ? "equal" : "different", r.max_abs_err, r.max_rel_err, r.message);
		return ok == 1 ? 0 : 1;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: test-tensor_compare DIR | dump FILE | compare REF CAND [ATOL RTOL]\n");
		return 2;
	}
	test_rules();
	test_structure();
	test_files(argv[1]);
	test_keys_and_policy();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
