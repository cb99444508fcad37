/* compare: see compare.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"

void ca_compare_defaults(struct ca_compare_options *o)
{
	o->atol = 1e-2;
	o->rtol = 1e-2;
}

/* Names equal when tuples and lists are taken as the same kind. */
static int same_path(const char *a, const char *b)
{
	for (;; a++, b++) {
		char x = *a == '(' ? '[' : *a == ')' ? ']' : *a;
		char y = *b == '(' ? '[' : *b == ')' ? ']' : *b;
		if (x != y)
			return 0;
		if (!x)
			return 1;
	}
}

/* Element i as a double; float32 (the common case) without the general switch. */
static inline double value_at(const struct ca_tensor *t, uint64_t i)
{
	if (t->dtype == CA_DT_F32)
		return ((const float *)t->data)[i];
	return ca_tensor_value(t, i);
}

static const char *label(const char *name)
{
	return *name ? name : "output";
}

#define FAIL(...) do { snprintf(r->message, sizeof r->message, __VA_ARGS__); r->ok = 0; return 0; } while (0)

static int compare_one(const struct ca_tensor *rt, const struct ca_tensor *ct,
		const struct ca_compare_options *o, struct ca_compare_result *r)
{
	char rs[128], cs[128];
	const char *name = label(rt->name);
	int scalars = (rt->flags & CA_TENSOR_SCALAR) && (ct->flags & CA_TENSOR_SCALAR);
	if ((rt->dtype == CA_DT_NONE) != (ct->dtype == CA_DT_NONE))
		FAIL("%s: %s where the reference has %s", name, ca_tensor_dtype_name(ct->dtype),
			ca_tensor_dtype_name(rt->dtype));
	if (rt->dtype == CA_DT_NONE)
		return 1;
	if ((rt->flags & CA_TENSOR_SCALAR) != (ct->flags & CA_TENSOR_SCALAR))
		FAIL("%s: a %s where the reference has a %s", name,
			ct->flags & CA_TENSOR_SCALAR ? "Python number" : "tensor",
			rt->flags & CA_TENSOR_SCALAR ? "Python number" : "tensor");
	if (!scalars && rt->dtype != ct->dtype)
		FAIL("%s: dtype %s, expected %s", name, ca_tensor_dtype_name(ct->dtype),
			ca_tensor_dtype_name(rt->dtype));
	ca_tensor_shape_string(rt, rs, sizeof rs);
	ca_tensor_shape_string(ct, cs, sizeof cs);
	if (rt->ndim != ct->ndim || memcmp(rt->dims, ct->dims, sizeof rt->dims[0] * (size_t)rt->ndim) != 0)
		FAIL("%s: shape %s, expected %s", name, cs, rs);

	uint64_t n = rt->numel;
	double ref_absmax = 0, ref_min = INFINITY, ref_max = -INFINITY;
	int cand_zero = 1, cand_const = 1;
	double cand_first = n ? value_at(ct, 0) : 0;
	for (uint64_t i = 0; i < n; i++) {
		double rv = value_at(rt, i), cv = value_at(ct, i);
		if (!isfinite(cv))
			FAIL("%s: %s at element %llu", name, isnan(cv) ? "NaN" : "Inf", (unsigned long long)i);
		if (!isfinite(rv)) {
			snprintf(r->message, sizeof r->message,
				"%s: the reference's output has NaN/Inf at element %llu; the task cannot be checked",
				name, (unsigned long long)i);
			r->ok = 0;
			return 0;
		}
		if (fabs(rv) > ref_absmax)
			ref_absmax = fabs(rv);
		if (rv < ref_min)
			ref_min = rv;
		if (rv > ref_max)
			ref_max = rv;
		if (cv != 0)
			cand_zero = 0;
		if (cv != cand_first)
			cand_const = 0;
	}
	/* A tensor entirely below atol would accept any small output: scale atol to it. */
	double atol = o->atol;
	if (ref_absmax < o->atol && !scalars)
		atol = o->atol * ref_absmax;
	uint64_t first_bad = UINT64_MAX;
	double bad_r = 0, bad_c = 0;
	for (uint64_t i = 0; i < n; i++) {
		double rv = value_at(rt, i), cv = value_at(ct, i);
		double d = fabs(cv - rv);
		if (d > r->max_abs_err)
			r->max_abs_err = d;
		if (rv != 0 && d / fabs(rv) > r->max_rel_err)
			r->max_rel_err = d / fabs(rv);
		if (!(d <= atol + o->rtol * fabs(rv)) && first_bad == UINT64_MAX) {
			first_bad = i;
			bad_r = rv;
			bad_c = cv;
		}
	}
	r->elements += n;
	if (n >= 2 && cand_zero && ref_absmax > 0)
		FAIL("%s: all zeros where the reference's output is not", name);
	if (n >= 2 && cand_const && ref_max - ref_min > 1e-6 * ref_absmax)
		FAIL("%s: every element is %g where the reference's output varies", name, cand_first);
	if (first_bad != UINT64_MAX)
		FAIL("%s: element %llu is %g, expected %g (atol %g, rtol %g)", name,
			(unsigned long long)first_bad, bad_c, bad_r, atol, o->rtol);
	return 1;
}

int ca_compare_tensors(const struct ca_tensor_file *ref, const struct ca_tensor_file *cand,
		const struct ca_compare_options *o, struct ca_compare_result *r)
{
	memset(r, 0, sizeof *r);
	r->ok = 1;
	if (ref->count != cand->count) {
		snprintf(r->message, sizeof r->message, "%d output value%s where the reference returns %d",
			cand->count, cand->count == 1 ? "" : "s", ref->count);
		r->ok = 0;
		return 0;
	}
	for (int i = 0; i < ref->count; i++) {
		if (!same_path(ref->entries[i].name, cand->entries[i].name)) {
			snprintf(r->message, sizeof r->message, "output structure differs: %s where the reference has %s",
				label(cand->entries[i].name), label(ref->entries[i].name));
			r->ok = 0;
			return 0;
		}
		if (!compare_one(&ref->entries[i], &cand->entries[i], o, r))
			return 0;
	}
	return 1;
}

int ca_compare_files(const char *ref_path, const char *cand_path,
		const struct ca_compare_options *o, struct ca_compare_result *r)
{
	struct ca_tensor_file ref, cand;
	char why[512];
	memset(r, 0, sizeof *r);
	if (ca_tensor_read(ref_path, 0, &ref, why, sizeof why) < 0) {
		snprintf(r->message, sizeof r->message, "reference output: %s", why);
		return -1;
	}
	uint64_t ref_bytes = 0;
	for (int i = 0; i < ref.count; i++)
		ref_bytes += ref.entries[i].nbytes;
	/* Room for a wrong (wider) dtype, so that error is reported as such. */
	if (ca_tensor_read(cand_path, 2 * ref_bytes + (1 << 20), &cand, why, sizeof why) < 0) {
		snprintf(r->message, sizeof r->message, "candidate output: %s", why);
		ca_tensor_free(&ref);
		return 0;
	}
	int ok = ca_compare_tensors(&ref, &cand, o, r);
	ca_tensor_free(&ref);
	ca_tensor_free(&cand);
	return ok;
}
