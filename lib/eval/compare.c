/* compare: see compare.h. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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

/*
 * What both loops gather beside the errors: the reference's range, and
 * whether the candidate is all zeros or one value throughout (a degenerate
 * output that a loose tolerance could otherwise pass).
 */
struct ref_range {
	double absmax, min, max;
	int cand_zero, cand_const;
};

static const struct ref_range range_empty = {0, INFINITY, -INFINITY, 1, 1};

static inline void range_add(struct ref_range *g, double rv, double cv, double cand_first)
{
	double a = fabs(rv);
	if (a > g->absmax)
		g->absmax = a;
	if (rv < g->min)
		g->min = rv;
	if (rv > g->max)
		g->max = rv;
	if (cv != 0)
		g->cand_zero = 0;
	if (cv != cand_first)
		g->cand_const = 0;
}

/*
 * float32 tensors of millions of elements (full-size tasks reach billions)
 * are compared by several threads, each over a slice, in one pass that
 * gathers what the two passes of the general loop below gather; the
 * verdict and the numbers are the same.
 */
struct f32_part {
	const float *r, *c;
	uint64_t lo, hi;
	double atol, rtol;
	float cfirst;
	int stats;                   /* 1: gather range */
	struct ref_range range;
	double max_abs, max_rel;
	uint64_t bad_c, bad_r, first_bad;  /* first non-finite candidate / reference element, first mismatch */
};

static void *f32_part_run(void *arg)
{
	struct f32_part *p = arg;
	struct ref_range range = range_empty;
	double max_abs = 0, max_rel = 0;
	uint64_t first_bad = UINT64_MAX;
	p->bad_c = p->bad_r = UINT64_MAX;
	for (uint64_t i = p->lo; i < p->hi; i++) {
		double rv = p->r[i], cv = p->c[i];
		if (!isfinite(cv) || !isfinite(rv)) {
			if (!isfinite(cv) && p->bad_c == UINT64_MAX)
				p->bad_c = i;
			if (!isfinite(rv) && p->bad_r == UINT64_MAX)
				p->bad_r = i;
			continue;
		}
		if (p->stats)
			range_add(&range, rv, cv, p->cfirst);
		double d = fabs(cv - rv);
		if (d > max_abs)
			max_abs = d;
		if (rv != 0 && d / fabs(rv) > max_rel)
			max_rel = d / fabs(rv);
		if (!(d <= p->atol + p->rtol * fabs(rv)) && first_bad == UINT64_MAX)
			first_bad = i;
	}
	p->range = range;
	p->max_abs = max_abs;
	p->max_rel = max_rel;
	p->first_bad = first_bad;
	return NULL;
}

enum { F32_PARALLEL = 1 << 22, F32_THREADS = 16 };

/* Run the parts over threads; returns how many parts there are. */
static int f32_run(struct f32_part *parts, const struct f32_part *proto, uint64_t n)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int nt = cpus > F32_THREADS ? F32_THREADS : cpus < 1 ? 1 : (int)cpus;
	pthread_t th[F32_THREADS];
	int started[F32_THREADS];
	uint64_t chunk = (n + (uint64_t)nt - 1) / (uint64_t)nt;
	for (int i = 0; i < nt; i++) {
		parts[i] = *proto;
		parts[i].lo = (uint64_t)i * chunk < n ? (uint64_t)i * chunk : n;
		parts[i].hi = parts[i].lo + chunk < n ? parts[i].lo + chunk : n;
		started[i] = nt > 1 && pthread_create(&th[i], NULL, f32_part_run, &parts[i]) == 0;
		if (!started[i])
			f32_part_run(&parts[i]);
	}
	for (int i = 0; i < nt; i++)
		if (started[i])
			pthread_join(th[i], NULL);
	return nt;
}

#define FAIL(...) do { snprintf(r->message, sizeof r->message, __VA_ARGS__); r->ok = 0; return 0; } while (0)

/* 0 with the message set when the candidate (n elements, the first cand_first) is degenerate where the reference is not. */
static int range_check(const struct ref_range *g, uint64_t n, double cand_first, const char *name,
		struct ca_compare_result *r)
{
	if (n >= 2 && g->cand_zero && g->absmax > 0)
		FAIL("%s: all zeros where the reference's output is not", name);
	if (n >= 2 && g->cand_const && g->max - g->min > 1e-6 * g->absmax)
		FAIL("%s: every element is %g where the reference's output varies", name, cand_first);
	return 1;
}

static int compare_f32_parallel(const struct ca_tensor *rt, const struct ca_tensor *ct,
		const struct ca_compare_options *o, struct ca_compare_result *r)
{
	const char *name = label(rt->name);
	uint64_t n = rt->numel;
	struct f32_part parts[F32_THREADS], proto;
	memset(&proto, 0, sizeof proto);
	proto.r = rt->data;
	proto.c = ct->data;
	proto.atol = o->atol;
	proto.rtol = o->rtol;
	proto.cfirst = proto.c[0];
	proto.stats = 1;
	int np = f32_run(parts, &proto, n);
	uint64_t bad_c = UINT64_MAX, bad_r = UINT64_MAX, first_bad = UINT64_MAX;
	struct ref_range range = range_empty;
	double max_abs = 0, max_rel = 0;
	for (int i = 0; i < np; i++) {
		struct f32_part *p = &parts[i];
		if (p->bad_c < bad_c)
			bad_c = p->bad_c;
		if (p->bad_r < bad_r)
			bad_r = p->bad_r;
		if (p->first_bad < first_bad)
			first_bad = p->first_bad;
		range.absmax = p->range.absmax > range.absmax ? p->range.absmax : range.absmax;
		range.min = p->range.min < range.min ? p->range.min : range.min;
		range.max = p->range.max > range.max ? p->range.max : range.max;
		range.cand_zero &= p->range.cand_zero;
		range.cand_const &= p->range.cand_const;
		max_abs = p->max_abs > max_abs ? p->max_abs : max_abs;
		max_rel = p->max_rel > max_rel ? p->max_rel : max_rel;
	}
	/* As the general loop: the first non-finite element decides, the candidate's first at a tie. */
	if (bad_c != UINT64_MAX && bad_c <= bad_r) {
		double cv = proto.c[bad_c];
		FAIL("%s: %s at element %llu", name, isnan(cv) ? "NaN" : "Inf", (unsigned long long)bad_c);
	}
	if (bad_r != UINT64_MAX) {
		snprintf(r->message, sizeof r->message,
			"%s: the reference's output has NaN/Inf at element %llu; the task cannot be checked",
			name, (unsigned long long)bad_r);
		r->ok = 0;
		return 0;
	}
	double atol = o->atol;
	if (range.absmax < o->atol) {
		/* A tensor entirely below atol: atol scaled to it, the mismatch search again. */
		atol = o->atol * range.absmax;
		proto.atol = atol;
		proto.stats = 0;
		np = f32_run(parts, &proto, n);
		first_bad = UINT64_MAX;
		for (int i = 0; i < np; i++)
			if (parts[i].first_bad < first_bad)
				first_bad = parts[i].first_bad;
	}
	if (max_abs > r->max_abs_err)
		r->max_abs_err = max_abs;
	if (max_rel > r->max_rel_err)
		r->max_rel_err = max_rel;
	r->elements += n;
	if (!range_check(&range, n, proto.cfirst, name, r))
		return 0;
	if (first_bad != UINT64_MAX)
		FAIL("%s: element %llu is %g, expected %g (atol %g, rtol %g)", name,
			(unsigned long long)first_bad, (double)proto.c[first_bad], (double)proto.r[first_bad], atol, o->rtol);
	return 1;
}

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
	if (n >= F32_PARALLEL && rt->dtype == CA_DT_F32 && ct->dtype == CA_DT_F32 && !scalars)
		return compare_f32_parallel(rt, ct, o, r);
	struct ref_range range = range_empty;
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
		range_add(&range, rv, cv, cand_first);
	}
	/* A tensor entirely below atol would accept any small output: scale atol to it. */
	double atol = o->atol;
	if (range.absmax < o->atol && !scalars)
		atol = o->atol * range.absmax;
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
	if (!range_check(&range, n, cand_first, name, r))
		return 0;
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
