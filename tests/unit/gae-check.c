/*
 * gae-check: an independent double-precision reference for ca-gae, used
 * by tests/t0020-ca-gae.sh (not a unit test on its own).
 *
 *   test-gae-check GAMMA LAMBDA WHITEN INPUT OUTPUT
 *
 * For each record of INPUT it removes the masked tokens, runs textbook
 * GAE over what is left, scatters the results back (0 at masked tokens)
 * and compares with the matching record of OUTPUT (ca-gae's): advantages,
 * returns and, when WHITEN is 1, advantages_whitened over the whole batch
 * (verl's masked_whiten: mean over count + 1e-8, unbiased variance from
 * the masked mean of the squares, divided by sqrt(var + 1e-8)).
 * Prints the largest relative error; exits 1 above 1e-12.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jv.h>

struct record {
	size_t n;
	double *adv, *ret, *got_adv, *got_ret, *got_white;
	int *mask;
};

static double *numbers(jv obj, const char *key, size_t *n)
{
	jv a = jv_object_get(jv_copy(obj), jv_string(key));
	if (jv_get_kind(a) != JV_KIND_ARRAY) {
		jv_free(a);
		return NULL;
	}
	*n = (size_t)jv_array_length(jv_copy(a));
	double *x = malloc((*n + 1) * sizeof *x);
	for (size_t i = 0; i < *n; i++) {
		jv e = jv_array_get(jv_copy(a), (int)i);
		x[i] = jv_get_kind(e) == JV_KIND_TRUE ? 1 : jv_get_kind(e) == JV_KIND_FALSE ? 0 : jv_number_value(e);
		jv_free(e);
	}
	jv_free(a);
	return x;
}

static double max_rel;
static long compared;

static void compare(double want, double got, const char *what, long line, size_t i)
{
	double err = want == got ? 0 : fabs(want - got) / fabs(want);
	if (!(err <= max_rel))  /* NaN-safe */
		max_rel = isnan(err) ? INFINITY : err;
	if (!(err <= 1e-12))
		fprintf(stderr, "line %ld: %s[%zu]: want %.17g, got %.17g\n", line, what, i, want, got);
	compared++;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: test-gae-check GAMMA LAMBDA WHITEN INPUT OUTPUT\n");
		return 2;
	}
	double gamma = strtod(argv[1], NULL), lambda = strtod(argv[2], NULL);
	int whiten = atoi(argv[3]);
	FILE *in = fopen(argv[4], "r"), *out = fopen(argv[5], "r");
	if (!in || !out) {
		perror("test-gae-check");
		return 2;
	}
	char *a = NULL, *b = NULL;
	size_t acap = 0, bcap = 0;
	ssize_t alen, blen;
	struct record *recs = NULL;
	size_t nrecs = 0;
	long line = 0;
	while ((alen = getline(&a, &acap, in)) > 0) {
		line++;
		if ((blen = getline(&b, &bcap, out)) <= 0) {
			fprintf(stderr, "output ends at line %ld\n", line);
			return 1;
		}
		jv x = jv_parse_sized(a, (int)alen), y = jv_parse_sized(b, (int)blen);
		size_t n = 0, m = 0, k;
		double *values = numbers(x, "values", &n), *maskx = numbers(x, "mask", &m);
		double *rewards = numbers(x, "rewards", &k);
		struct record r = {.n = n};
		r.mask = malloc((n + 1) * sizeof *r.mask);
		for (size_t i = 0; i < n; i++)
			r.mask[i] = maskx ? maskx[i] != 0 : 1;
		/* Compact: keep the policy tokens only. */
		size_t *index = malloc((n + 1) * sizeof *index), c = 0;
		for (size_t i = 0; i < n; i++)
			if (r.mask[i])
				index[c++] = i;
		double *cv = malloc((c + 1) * sizeof *cv), *cr = calloc(c + 1, sizeof *cr);
		for (size_t j = 0; j < c; j++) {
			cv[j] = values[index[j]];
			if (rewards)
				cr[j] = rewards[index[j]];
		}
		if (!rewards && c > 0) {
			jv rw = jv_object_get(jv_copy(x), jv_string("reward"));
			cr[c - 1] = jv_number_value(rw);
			jv_free(rw);
		}
		/* Textbook GAE over the compacted sequence. */
		double *ca = malloc((c + 1) * sizeof *ca);
		double last = 0;
		for (size_t j = c; j-- > 0;) {
			double next_value = j + 1 < c ? cv[j + 1] : 0;
			double delta = cr[j] + gamma * next_value - cv[j];
			last = delta + gamma * lambda * last;
			ca[j] = last;
		}
		r.adv = calloc(n + 1, sizeof *r.adv);
		r.ret = calloc(n + 1, sizeof *r.ret);
		for (size_t j = 0; j < c; j++) {
			r.adv[index[j]] = ca[j];
			r.ret[index[j]] = ca[j] + cv[j];
		}
		size_t gn = 0;
		r.got_adv = numbers(y, "advantages", &gn);
		if (!r.got_adv || gn != n) {
			fprintf(stderr, "line %ld: output has no advantages of length %zu\n", line, n);
			return 1;
		}
		r.got_ret = numbers(y, "returns", &gn);
		if (whiten)
			r.got_white = numbers(y, "advantages_whitened", &gn);
		if (!r.got_ret || (whiten && !r.got_white)) {
			fprintf(stderr, "line %ld: output fields missing\n", line);
			return 1;
		}
		for (size_t i = 0; i < n; i++) {
			compare(r.adv[i], r.got_adv[i], "advantages", line, i);
			compare(r.ret[i], r.got_ret[i], "returns", line, i);
		}
		recs = realloc(recs, (nrecs + 1) * sizeof *recs);
		recs[nrecs++] = r;
		free(values); free(maskx); free(rewards); free(index); free(cv); free(cr); free(ca);
		jv_free(x);
		jv_free(y);
	}
	if (whiten) {
		double sum = 0, sq = 0;
		long count = 0;
		for (size_t k = 0; k < nrecs; k++)
			for (size_t i = 0; i < recs[k].n; i++)
				if (recs[k].mask[i])
					sum += recs[k].adv[i], count++;
		/* verl's masked_mean and masked_var(unbiased=True), epsilons included. */
		double mean = sum / (count + 1e-8);
		for (size_t k = 0; k < nrecs; k++)
			for (size_t i = 0; i < recs[k].n; i++)
				if (recs[k].mask[i])
					sq += (recs[k].adv[i] - mean) * (recs[k].adv[i] - mean);
		double var = sq / (count + 1e-8) * count / (count - 1.0);
		for (size_t k = 0; k < nrecs; k++)
			for (size_t i = 0; i < recs[k].n; i++)
				compare(recs[k].mask[i] ? (recs[k].adv[i] - mean) / sqrt(var + 1e-8) : 0,
					recs[k].got_white[i], "advantages_whitened", (long)k + 1, i);
	}
	for (size_t k = 0; k < nrecs; k++) {
		free(recs[k].adv); free(recs[k].ret); free(recs[k].mask);
		free(recs[k].got_adv); free(recs[k].got_ret); free(recs[k].got_white);
	}
	free(recs);
	free(a);
	free(b);
	fclose(in);
	fclose(out);
	printf("gae-check: %ld values compared, max relative error %.3g\n", compared, max_rel);
	return max_rel <= 1e-12 ? 0 : 1;
}
