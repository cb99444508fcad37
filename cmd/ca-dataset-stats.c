/*
 * ca-dataset-stats: what a synthesized dataset is made of.
 *
 * Reads ca-filter's output and prints the paper's Table 3 (share of tasks
 * by number of operators), the rejection reasons, the eager-time
 * distribution and the similarity histogram (the paper's Figure 7), as text
 * or one JSON object; --plot draws the two histograms with gnuplot.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "proc.h"

static const char usage_text[] = "usage: ca-dataset-stats [-h] [--json] [--plot FILE] [file ...]\n";

#define NSIM 10
static const double time_edges[] = {0.1, 0.3, 1, 3, 10, 30, 100};
#define NTIME (sizeof time_edges / sizeof time_edges[0] + 1)

struct count {
	char *key;
	long n;
};

struct counts {
	struct count *v;
	size_t n;
};

static void bump(struct counts *c, const char *key, size_t keylen)
{
	for (size_t i = 0; i < c->n; i++)
		if (strlen(c->v[i].key) == keylen && !strncmp(c->v[i].key, key, keylen)) {
			c->v[i].n++;
			return;
		}
	c->v = ca_xrealloc(c->v, (c->n + 1) * sizeof *c->v);
	c->v[c->n].key = ca_xmalloc(keylen + 1);
	memcpy(c->v[c->n].key, key, keylen);
	c->v[c->n].key[keylen] = '\0';
	c->v[c->n++].n = 1;
}

static int by_key(const void *a, const void *b)
{
	return strcmp(((const struct count *)a)->key, ((const struct count *)b)->key);
}

static int by_count(const void *a, const void *b)
{
	long d = ((const struct count *)b)->n - ((const struct count *)a)->n;
	return d ? (d > 0 ? 1 : -1) : by_key(a, b);
}

static int by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double quantile(const double *v, size_t n, double q)
{
	if (n == 0)
		return NAN;
	double pos = q * (double)(n - 1);
	size_t i = (size_t)pos;
	return i + 1 < n ? v[i] + (pos - (double)i) * (v[i + 1] - v[i]) : v[i];
}

static jv counts_json(struct counts *c)
{
	jv o = jv_object();
	for (size_t i = 0; i < c->n; i++)
		o = jv_object_set(o, jv_string(c->v[i].key), jv_number((double)c->v[i].n));
	return o;
}

static int plot(const char *file, const long *sim, const long *times)
{
	char script[4096];
	size_t used = (size_t)snprintf(script, sizeof script,
		"set terminal pngcairo size 1000,400\nset output '%s'\nset multiplot layout 1,2\nset style fill solid 0.6\n"
		"set boxwidth 0.8\nset title 'similarity to KernelBench (max over problems)'\nset xlabel 'similarity'\n"
		"set ylabel 'tasks'\nplot '-' using 1:2:xtic(3) with boxes notitle\n", file);
	for (int i = 0; i < NSIM; i++)
		used += (size_t)snprintf(script + used, sizeof script - used, "%d %ld %.1f\n", i, sim[i], i / 10.0);
	used += (size_t)snprintf(script + used, sizeof script - used,
		"e\nset title 'eager time on the GPU'\nset xlabel 'ms'\nplot '-' using 1:2:xtic(3) with boxes notitle\n");
	for (size_t i = 0; i < NTIME; i++)
		used += (size_t)snprintf(script + used, sizeof script - used, "%zu %ld %s%g\n", i, times[i],
		                         i < NTIME - 1 ? "<" : ">=", time_edges[i < NTIME - 1 ? i : NTIME - 2]);
	snprintf(script + used, sizeof script - used, "e\nunset multiplot\n");
	const char *argv[] = {"gnuplot", NULL};
	struct ca_proc p;
	ca_proc_init(&p, argv);
	p.timeout_s = 60;
	struct ca_buf err = {0};
	int status = ca_proc_capture(&p, script, strlen(script), NULL, &err, 65536);
	if (status != 0)
		ca_err_warn("--plot: gnuplot %s%s%s", status < 0 ? "is not installed" : "failed",
		            err.data && *err.data ? ": " : "", err.data ? err.data : "");
	ca_buf_free(&err);
	return status == 0 ? 0 : -1;
}

struct stats {
	struct counts sources, reasons, nearest;
	long total, accepted, rejected, unfiltered, errors;
	long sim[NSIM], times[NTIME];
	double *eager;            /* eager times of accepted tasks, ms */
	size_t neager;
};

/* Each rejection reason of filter object f (borrowed), counted by its part before the colon. */
static void count_reasons(struct stats *st, jv f)
{
	jv list = ca_json_get(f, "reasons");
	if (jv_get_kind(list) == JV_KIND_ARRAY) {
		jv_array_foreach(list, i, reason)
		{
			if (jv_get_kind(reason) == JV_KIND_STRING) {
				const char *s = jv_string_value(reason);
				const char *colon = strchr(s, ':');
				bump(&st->reasons, s, colon ? (size_t)(colon - s) : strlen(s));
			}
			jv_free(reason);
		}
	}
	jv_free(list);
}

/* A record (borrowed) with its filter object f (borrowed): accepted or rejected, similarity, eager time. */
static void count_filtered(struct stats *st, jv rec, jv f)
{
	int ok = ca_json_bool(f, "ok") == 1;
	if (ok) {
		st->accepted++;
		char *source = ca_json_strdup(rec, "source");
		bump(&st->sources, source ? source : "(none)", strlen(source ? source : "(none)"));
		free(source);
	} else {
		st->rejected++;
		count_reasons(st, f);
	}
	double x;
	if (ca_json_number(f, "max_sim", &x) == 1) {
		int b = (int)floor(x * NSIM);
		st->sim[b < 0 ? 0 : b >= NSIM ? NSIM - 1 : b]++;
		if (x > 0.9) {
			char *near = ca_json_strdup(f, "nearest");
			if (near)
				bump(&st->nearest, near, strlen(near));
			free(near);
		}
	}
	if (ok && ca_json_number(f, "eager_ms", &x) == 1) {
		st->eager = ca_xrealloc(st->eager, (st->neager + 1) * sizeof *st->eager);
		st->eager[st->neager++] = x;
		size_t b = 0;
		while (b < NTIME - 1 && x >= time_edges[b])
			b++;
		st->times[b]++;
	}
}

/* Count every record of the inputs; the status reading left. */
static int read_records(int argc, char **argv, struct stats *st)
{
	int status = CA_EXIT_OK;
	struct ca_ndjson_reader *r = ca_ndjson_open(argc, argv);
	jv rec;
	while (ca_ndjson_next_valid(r, &rec, &status) != CA_NDJSON_EOF) {
		st->total++;
		jv err = ca_json_get(rec, "error");
		int is_error = jv_is_valid(err);
		jv_free(err);
		jv f = ca_json_get(rec, "filter");
		if (is_error)
			st->errors++;
		else if (jv_get_kind(f) != JV_KIND_OBJECT)
			st->unfiltered++;
		else
			count_filtered(st, rec, f);
		jv_free(f);
		jv_free(rec);
	}
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	return status;
}

static void sort_stats(struct stats *st)
{
	/* qsort's array must not be NULL, even when empty (UBSan). */
	if (st->sources.n)
		qsort(st->sources.v, st->sources.n, sizeof *st->sources.v, by_key);
	if (st->reasons.n)
		qsort(st->reasons.v, st->reasons.n, sizeof *st->reasons.v, by_count);
	if (st->nearest.n)
		qsort(st->nearest.v, st->nearest.n, sizeof *st->nearest.v, by_count);
	if (st->eager)
		qsort(st->eager, st->neager, sizeof *st->eager, by_double);
}

static jv eager_json(const struct stats *st)
{
	static const double q[5] = {0, 0.1, 0.5, 0.9, 1};
	static const char *const qn[5] = {"min", "p10", "p50", "p90", "max"};
	jv e = jv_object();
	e = jv_object_set(e, jv_string("count"), jv_number((double)st->neager));
	for (int i = 0; i < 5; i++)
		e = jv_object_set(e, jv_string(qn[i]), ca_json_num_or_null(quantile(st->eager, st->neager, q[i])));
	jv h = jv_array();
	for (size_t i = 0; i < NTIME; i++)
		h = jv_array_append(h, jv_number((double)st->times[i]));
	e = jv_object_set(e, jv_string("histogram"), h);
	jv edges = jv_array();
	for (size_t i = 0; i < NTIME - 1; i++)
		edges = jv_array_append(edges, jv_number(time_edges[i]));
	return jv_object_set(e, jv_string("edges"), edges);
}

static void write_json(struct stats *st)
{
	jv o = jv_object();
	o = jv_object_set(o, jv_string("records"), jv_number((double)st->total));
	o = jv_object_set(o, jv_string("accepted"), jv_number((double)st->accepted));
	o = jv_object_set(o, jv_string("rejected"), jv_number((double)st->rejected));
	o = jv_object_set(o, jv_string("unfiltered"), jv_number((double)st->unfiltered));
	o = jv_object_set(o, jv_string("errors"), jv_number((double)st->errors));
	o = jv_object_set(o, jv_string("by_source"), counts_json(&st->sources));
	o = jv_object_set(o, jv_string("reasons"), counts_json(&st->reasons));
	o = jv_object_set(o, jv_string("eager_ms"), eager_json(st));
	jv s = jv_array();
	for (int i = 0; i < NSIM; i++)
		s = jv_array_append(s, jv_number((double)st->sim[i]));
	o = jv_object_set(o, jv_string("similarity_histogram"), s);
	o = jv_object_set(o, jv_string("contaminated_by"), counts_json(&st->nearest));
	ca_ndjson_write(o);
}

static void write_eager_text(const struct stats *st)
{
	const double *eager = st->eager;
	size_t neager = st->neager;
	printf("\neager time of accepted tasks, ms: n %zu", neager);
	if (neager)
		printf(", min %.3g, p10 %.3g, median %.3g, p90 %.3g, max %.3g", quantile(eager, neager, 0),
		       quantile(eager, neager, 0.1), quantile(eager, neager, 0.5), quantile(eager, neager, 0.9),
		       quantile(eager, neager, 1));
	printf("\n");
	for (size_t i = 0; i < NTIME; i++) {
		if (i < NTIME - 1)
			printf("  < %-8g %6ld\n", time_edges[i], st->times[i]);
		else
			printf("  >= %-7g %6ld\n", time_edges[NTIME - 2], st->times[i]);
	}
}

static void write_text(const struct stats *st)
{
	printf("records %ld: accepted %ld, rejected %ld, unfiltered %ld, malformed %ld\n\n", st->total, st->accepted,
	       st->rejected, st->unfiltered, st->errors);
	printf("accepted tasks by source (Table 3)\n");
	for (size_t i = 0; i < st->sources.n; i++)
		printf("  %-18s %6ld  %6.2f%%\n", st->sources.v[i].key, st->sources.v[i].n,
		       100.0 * (double)st->sources.v[i].n / (double)(st->accepted ? st->accepted : 1));
	printf("\nrejection reasons (a task may have several)\n");
	for (size_t i = 0; i < st->reasons.n; i++)
		printf("  %-18s %6ld\n", st->reasons.v[i].key, st->reasons.v[i].n);
	write_eager_text(st);
	printf("\nsimilarity to the nearest reference problem (Figure 7)\n");
	for (int i = 0; i < NSIM; i++)
		printf("  [%.1f, %.1f%c %6ld\n", i / 10.0, (i + 1) / 10.0, i == NSIM - 1 ? ']' : ')', st->sim[i]);
	if (st->nearest.n) {
		printf("\nmost frequent nearest problems above 0.9\n");
		for (size_t i = 0; i < st->nearest.n && i < 10; i++)
			printf("  %6ld  %s\n", st->nearest.v[i].n, st->nearest.v[i].key);
	}
}

static void free_counts(struct counts *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->v[i].key);
	free(c->v);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"json", no_argument, NULL, 'j'},
		{"plot", required_argument, NULL, 'p'},
		{NULL, 0, NULL, 0},
	};
	int as_json = 0, c;
	const char *plot_file = NULL;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': as_json = 1; break;
		case 'p': plot_file = optarg; break;
		default: ca_opt_common(c, usage_text);
		}
	}
	struct stats st = {0};
	int status = read_records(argc - optind, argv + optind, &st);
	sort_stats(&st);
	if (as_json)
		write_json(&st);
	else
		write_text(&st);
	if (plot_file && plot(plot_file, st.sim, st.times) < 0)
		status = ca_err_worst(status, CA_EXIT_SYSTEM);
	free_counts(&st.sources);
	free_counts(&st.reasons);
	free_counts(&st.nearest);
	free(st.eager);
	return ca_err_finish(status);
}
