/*
 * ca-stats: the paper's Table 1 from rewarded records.
 *
 * For all records, then for each group of --by values: count, pass rate,
 * the rates of correct candidates faster than eager and torch.compile,
 * geometric-mean speedups over correct candidates, and KernelBench's
 * fast_p (share of all records that are correct with speedup > p).
 * One NDJSON record per group, or an aligned table with -t.
 *
 * A record is correct when verify.ok is true and its reward.value is a
 * number above 0 (a candidate the profile caught has -1); anything else
 * (no verify, no reward, an error record or a malformed line) counts as an
 * incorrect record of its group. An evaluator fault (verify.ok or
 * profile.ok null, or reward.evaluator_fault) is no verdict on the
 * candidate: it counts in errors and evaluator_faults and in no rate.
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

static const char usage_text[] =
	"usage: ca-stats [-ht] [--by FIELD ...] [--faster-than X] [-p LIST] [file ...]\n";

struct config {
	char **by;             /* dotted paths */
	int nby;
	double faster_than;
	char **p_text;         /* the -p values as written */
	double *p;
	int np;
	int table;
};

struct group {
	jv key;                /* array of the --by values */
	long count, correct, errors, faults, faster_eager, faster_compile;
	long n_log_eager, n_log_compile;
	double log_eager, log_compile;
	long *fast_eager, *fast_compile;  /* [np] */
};

struct stats {
	struct group *groups;  /* [0] is every record */
	int ngroups, cap;
	jv index;              /* dumped key -> group number */
};

static struct group *new_group(struct stats *st, const struct config *cfg, jv key)
{
	if (st->ngroups == st->cap) {
		st->cap = st->cap ? 2 * st->cap : 16;
		st->groups = ca_xrealloc(st->groups, (size_t)st->cap * sizeof *st->groups);
	}
	struct group *g = &st->groups[st->ngroups++];
	memset(g, 0, sizeof *g);
	g->key = key;
	g->fast_eager = ca_xcalloc((size_t)cfg->np, sizeof *g->fast_eager);
	g->fast_compile = ca_xcalloc((size_t)cfg->np, sizeof *g->fast_compile);
	return g;
}

static struct group *find_group(struct stats *st, const struct config *cfg, jv key)
{
	jv text = jv_dump_string(jv_copy(key), JV_PRINT_SORTED);
	jv found = jv_object_get(jv_copy(st->index), jv_copy(text));
	if (jv_is_valid(found)) {
		int i = (int)jv_number_value(found);
		jv_free(text);
		jv_free(key);
		return &st->groups[i];
	}
	jv_free(found);
	st->index = jv_object_set(st->index, text, jv_number(st->ngroups));
	return new_group(st, cfg, key);
}

/* A speedup field of reward: the value if finite and positive, else NAN. */
static double speedup(jv reward, const char *key)
{
	double x;
	if (ca_json_number(reward, key, &x) == 1 && x > 0)
		return x;
	return NAN;
}

static void count(struct group *g, const struct config *cfg, int error, int fault, int correct, double se, double sc)
{
	g->count++;
	g->errors += error || fault;
	g->faults += fault;
	if (!correct)
		return;
	g->correct++;
	if (se > cfg->faster_than)
		g->faster_eager++;
	if (sc > cfg->faster_than)
		g->faster_compile++;
	if (se > 0) {
		g->log_eager += log(se);
		g->n_log_eager++;
	}
	if (sc > 0) {
		g->log_compile += log(sc);
		g->n_log_compile++;
	}
	for (int i = 0; i < cfg->np; i++) {
		g->fast_eager[i] += se > cfg->p[i];
		g->fast_compile[i] += sc > cfg->p[i];
	}
}

/* Whether the evaluator itself failed on a record (borrowed): a verdict of null. */
static int evaluator_fault(jv record)
{
	static const char *const judged_by[] = {"verify", "profile"};
	int fault = 0;
	for (size_t i = 0; i < sizeof judged_by / sizeof judged_by[0]; i++) {
		jv parent = ca_json_get(record, judged_by[i]);
		jv ok = ca_json_get(parent, "ok");
		fault |= jv_get_kind(parent) == JV_KIND_OBJECT && jv_get_kind(ok) == JV_KIND_NULL;
		jv_free(parent);
		jv_free(ok);
	}
	jv flag = ca_json_path(record, "reward.evaluator_fault");
	fault |= jv_get_kind(flag) == JV_KIND_TRUE;
	jv_free(flag);
	return fault;
}

/* Account one record (borrowed; jv_null() for a malformed line). */
static void add(struct stats *st, const struct config *cfg, jv record)
{
	int error = jv_get_kind(record) != JV_KIND_OBJECT;
	int correct = 0, fault = 0;
	double se = NAN, sc = NAN;
	if (!error) {
		jv e = ca_json_get(record, "error");
		error = jv_is_valid(e) && jv_get_kind(e) != JV_KIND_NULL;
		jv_free(e);
	}
	if (!error) {
		fault = evaluator_fault(record);
		jv ok = ca_json_path(record, "verify.ok");
		jv reward = ca_json_get(record, "reward");
		jv value = ca_json_get(reward, "value");
		correct = !fault && jv_get_kind(ok) == JV_KIND_TRUE && jv_get_kind(value) == JV_KIND_NUMBER &&
			jv_number_value(value) > 0;
		if (correct) {
			se = speedup(reward, "speedup_eager");
			sc = speedup(reward, "speedup_compile");
		}
		jv_free(ok);
		jv_free(reward);
		jv_free(value);
	}
	count(&st->groups[0], cfg, error, fault, correct, se, sc);
	if (cfg->nby == 0)
		return;
	jv key = jv_array();
	for (int i = 0; i < cfg->nby; i++)
		key = jv_array_append(key, error && jv_get_kind(record) != JV_KIND_OBJECT ? jv_null() : ca_json_path(record, cfg->by[i]));
	count(find_group(st, cfg, key), cfg, error, fault, correct, se, sc);
}

static jv rate(long n, long total)
{
	return total ? jv_number((double)n / (double)total) : jv_null();
}

static jv geomean(double sum, long n)
{
	return n ? jv_number(exp(sum / (double)n)) : jv_null();
}

static jv group_record(const struct group *g, const struct config *cfg, int all)
{
	jv group = jv_object();
	for (int i = 0; !all && i < cfg->nby; i++)
		group = jv_object_set(group, jv_string(cfg->by[i]), jv_array_get(jv_copy(g->key), i));
	long judged = g->count - g->faults;  /* records the evaluator gave a verdict on */
	jv r = jv_object();
	r = jv_object_set(r, jv_string("group"), group);
	r = jv_object_set(r, jv_string("count"), jv_number((double)g->count));
	r = jv_object_set(r, jv_string("errors"), jv_number((double)g->errors));
	r = jv_object_set(r, jv_string("evaluator_faults"), jv_number((double)g->faults));
	r = jv_object_set(r, jv_string("pass_rate"), rate(g->correct, judged));
	r = jv_object_set(r, jv_string("faster_eager_rate"), rate(g->faster_eager, judged));
	r = jv_object_set(r, jv_string("faster_compile_rate"), rate(g->faster_compile, judged));
	r = jv_object_set(r, jv_string("geomean_speedup_eager"), geomean(g->log_eager, g->n_log_eager));
	r = jv_object_set(r, jv_string("geomean_speedup_compile"), geomean(g->log_compile, g->n_log_compile));
	jv fe = jv_object(), fc = jv_object();
	for (int i = 0; i < cfg->np; i++) {
		fe = jv_object_set(fe, jv_string(cfg->p_text[i]), rate(g->fast_eager[i], judged));
		fc = jv_object_set(fc, jv_string(cfg->p_text[i]), rate(g->fast_compile[i], judged));
	}
	r = jv_object_set(r, jv_string("fast_p"), fe);
	return jv_object_set(r, jv_string("fast_p_compile"), fc);
}

static int compare_groups(const void *a, const void *b)
{
	const struct group *x = a, *y = b;
	return jv_cmp(jv_copy(x->key), jv_copy(y->key));
}

/* ---- -t: an aligned table ---- */

struct table {
	char ***cells;   /* [row][col] */
	int rows, cols;
};

static char *cell_number(jv x, const char *format)
{
	char buf[64];
	if (jv_get_kind(x) == JV_KIND_NUMBER)
		snprintf(buf, sizeof buf, format, jv_number_value(x));
	else
		snprintf(buf, sizeof buf, "-");
	jv_free(x);
	return ca_xstrdup(buf);
}

static char *cell_value(jv x)
{
	char *s;
	if (jv_get_kind(x) == JV_KIND_STRING) {
		s = ca_xstrdup(jv_string_value(x));
		jv_free(x);
	} else {
		jv text = jv_dump_string(x, 0);
		s = ca_xstrdup(jv_string_value(text));
		jv_free(text);
	}
	return s;
}

static int print_table(jv *records, int n, const struct config *cfg)
{
	int keycols = cfg->nby ? cfg->nby : 1;
	int cols = keycols + 7 + 2 * cfg->np;
	char ***cells = ca_xcalloc((size_t)n + 1, sizeof *cells);
	for (int r = 0; r <= n; r++)
		cells[r] = ca_xcalloc((size_t)cols, sizeof **cells);
	/* Header. */
	for (int i = 0; i < keycols; i++)
		cells[0][i] = ca_xstrdup(cfg->nby ? cfg->by[i] : "group");
	static const char *names[] = {"count", "errors", "pass", "faster_eager", "faster_compile", "geomean_eager",
		"geomean_compile"};
	for (int i = 0; i < 7; i++)
		cells[0][keycols + i] = ca_xstrdup(names[i]);
	for (int i = 0; i < cfg->np; i++) {
		char buf[64];
		snprintf(buf, sizeof buf, "fast_%s", cfg->p_text[i]);
		cells[0][keycols + 7 + i] = ca_xstrdup(buf);
		snprintf(buf, sizeof buf, "fastc_%s", cfg->p_text[i]);
		cells[0][keycols + 7 + cfg->np + i] = ca_xstrdup(buf);
	}
	for (int r = 0; r < n; r++) {
		jv rec = records[r];
		char **row = cells[r + 1];
		jv group = jv_object_get(jv_copy(rec), jv_string("group"));
		for (int i = 0; i < keycols; i++) {
			if (r == 0)
				row[i] = ca_xstrdup(i == 0 ? "all" : "");
			else
				row[i] = cell_value(jv_object_get(jv_copy(group), jv_string(cfg->by[i])));
		}
		jv_free(group);
		static const char *fields[] = {"count", "errors", "pass_rate", "faster_eager_rate", "faster_compile_rate",
			"geomean_speedup_eager", "geomean_speedup_compile"};
		for (int i = 0; i < 7; i++)
			row[keycols + i] = cell_number(jv_object_get(jv_copy(rec), jv_string(fields[i])),
				i < 2 ? "%.0f" : "%.3f");
		jv fe = jv_object_get(jv_copy(rec), jv_string("fast_p"));
		jv fc = jv_object_get(jv_copy(rec), jv_string("fast_p_compile"));
		for (int i = 0; i < cfg->np; i++) {
			row[keycols + 7 + i] = cell_number(jv_object_get(jv_copy(fe), jv_string(cfg->p_text[i])), "%.3f");
			row[keycols + 7 + cfg->np + i] = cell_number(jv_object_get(jv_copy(fc), jv_string(cfg->p_text[i])), "%.3f");
		}
		jv_free(fe);
		jv_free(fc);
	}
	size_t *width = ca_xcalloc((size_t)cols, sizeof *width);
	for (int r = 0; r <= n; r++)
		for (int c = 0; c < cols; c++)
			if (strlen(cells[r][c]) > width[c])
				width[c] = strlen(cells[r][c]);
	for (int r = 0; r <= n; r++) {
		for (int c = 0; c < cols; c++) {
			int w = (int)width[c];
			const char *sep = c + 1 < cols ? "  " : "\n";
			if (c < keycols)  /* group columns left-aligned, numbers right-aligned */
				printf("%-*s%s", c + 1 < cols ? w : 0, cells[r][c], sep);
			else
				printf("%*s%s", w, cells[r][c], sep);
			free(cells[r][c]);
		}
		free(cells[r]);
	}
	free(cells);
	free(width);
	return 0;
}

static void parse_p_list(struct config *cfg, const char *text)
{
	char *copy = ca_xstrdup(text), *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		cfg->p = ca_xrealloc(cfg->p, (size_t)(cfg->np + 1) * sizeof *cfg->p);
		cfg->p_text = ca_xrealloc(cfg->p_text, (size_t)(cfg->np + 1) * sizeof *cfg->p_text);
		cfg->p[cfg->np] = ca_opt_double("-p", tok, 0, 1e12);
		cfg->p_text[cfg->np] = ca_xstrdup(tok);
		for (int i = 0; i < cfg->np; i++)
			if (strcmp(cfg->p_text[i], tok) == 0)
				ca_err_die(CA_EXIT_USAGE, "-p: '%s' given twice", tok);
		cfg->np++;
	}
	free(copy);
	if (cfg->np == 0)
		ca_err_die(CA_EXIT_USAGE, "-p: empty list");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"by", required_argument, NULL, 'b'},
		{"faster-than", required_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{"table", no_argument, NULL, 't'},
		{NULL, 0, NULL, 0},
	};
	struct config cfg = {.faster_than = 1};
	const char *p_list = "0,0.5,0.8,1,1.5,2";
	int c;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hp:t", longopts, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (!*optarg || optarg[0] == '.' || optarg[strlen(optarg) - 1] == '.' || strstr(optarg, ".."))
				ca_err_die(CA_EXIT_USAGE, "--by: '%s': not a field name or dotted path", optarg);
			cfg.by = ca_xrealloc(cfg.by, (size_t)(cfg.nby + 1) * sizeof *cfg.by);
			cfg.by[cfg.nby++] = optarg;
			break;
		case 'f': cfg.faster_than = ca_opt_double("--faster-than", optarg, 0, 1e12); break;
		case 'p': p_list = optarg; break;
		case 't': cfg.table = 1; break;
		default: ca_opt_common(c, usage_text);
		}
	}
	parse_p_list(&cfg, p_list);

	struct stats st = {.index = jv_object()};
	new_group(&st, &cfg, jv_array());
	struct ca_ndjson_reader *r = ca_ndjson_open(argc - optind, argv + optind);
	int status = CA_EXIT_OK;
	jv v;
	int kind;
	while ((kind = ca_ndjson_next(r, &v)) != CA_NDJSON_EOF) {
		if (kind == CA_NDJSON_BAD) {
			ca_ndjson_warn(r, "%s", jv_string_value(v));
			jv_free(v);
			status = CA_EXIT_DATA;
			add(&st, &cfg, jv_null());
			continue;
		}
		add(&st, &cfg, v);
		jv_free(v);
	}
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);

	qsort(st.groups + 1, (size_t)st.ngroups - 1, sizeof *st.groups, compare_groups);
	jv *records = ca_xmalloc((size_t)st.ngroups * sizeof *records);
	for (int i = 0; i < st.ngroups; i++)
		records[i] = group_record(&st.groups[i], &cfg, i == 0);
	if (cfg.table) {
		print_table(records, st.ngroups, &cfg);
	} else {
		for (int i = 0; i < st.ngroups; i++)
			if (ca_ndjson_write(jv_copy(records[i])) != 0)
				break;
	}
	for (int i = 0; i < st.ngroups; i++) {
		jv_free(records[i]);
		jv_free(st.groups[i].key);
		free(st.groups[i].fast_eager);
		free(st.groups[i].fast_compile);
	}
	free(records);
	free(st.groups);
	jv_free(st.index);
	ca_free_strings(cfg.p_text, (size_t)cfg.np);
	free(cfg.p);
	free(cfg.by);
	return ca_err_finish(status);
}
