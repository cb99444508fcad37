/* train: see train.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "paths.h"
#include "ppo.h"
#include "safetensors.h"
#include "train.h"

/*
 * Reading. A record's arrays are first gathered as doubles (null as NaN,
 * booleans as 0/1), from the raw text when lib/json's scanner vouches for
 * the line (large batches are mostly number arrays, and building jv values
 * for them costs more than anything else here), else through libjq, which
 * also decides what a malformed line is. One validation serves both.
 */
enum { K_TOKENS, K_MASK, K_REWARD, K_FIELD0 };
#define NKEYS (K_FIELD0 + CA_TRAIN_NFIELDS)

struct raw {
	double *a[NKEYS];
	long n[NKEYS];        /* -1: absent; -2: present but not an array of numbers */
	size_t cap[NKEYS];
	double reward;
	int has_reward;
};

static void raw_reserve(struct raw *r, int k, size_t n)
{
	if (r->cap[k] < n) {
		r->cap[k] = n * 2;
		r->a[k] = ca_xrealloc(r->a[k], sizeof(double) * r->cap[k]);
	}
}

static const char *skip_space(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* An array of numbers, nulls and booleans from validated JSON text; -1 otherwise. */
static long text_array(struct raw *r, int k, struct ca_json_span sp)
{
	const char *p = sp.start, *end = sp.start + sp.len;
	p = skip_space(p, end);
	if (p == end || *p != '[')
		return -1;
	p = skip_space(p + 1, end);
	long n = 0;
	if (p < end && *p == ']')
		return 0;
	for (;;) {
		raw_reserve(r, k, (size_t)n + 1);
		double x;
		if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
			x = NAN;
			p += 4;
		} else if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
			x = 1;
			p += 4;
		} else if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
			x = 0;
			p += 5;
		} else if (*p == '-' || (*p >= '0' && *p <= '9')) {
			char *stop;
			x = ca_json_strtod(p, &stop);
			if (stop == p)
				return -1;
			p = stop;
		} else {
			return -1;
		}
		r->a[k][n++] = x;
		p = skip_space(p, end);
		if (p < end && *p == ',') {
			p = skip_space(p + 1, end);
			continue;
		}
		return p < end && *p == ']' ? n : -1;
	}
}

static long jv_numbers(struct raw *r, int k, jv record, const char *key)
{
	jv a = ca_json_get(record, key);
	long n;
	if (jv_get_kind(a) == JV_KIND_INVALID || jv_get_kind(a) == JV_KIND_NULL) {
		n = -1;
	} else if (jv_get_kind(a) != JV_KIND_ARRAY) {
		n = -2;
	} else {
		n = jv_array_length(jv_copy(a));
		raw_reserve(r, k, (size_t)n + 1);
		for (long i = 0; i < n && n >= 0; i++) {
			jv e = jv_array_get(jv_copy(a), (int)i);
			switch (jv_get_kind(e)) {
			case JV_KIND_NUMBER: r->a[k][i] = jv_number_value(e); break;
			case JV_KIND_NULL: r->a[k][i] = NAN; break;
			case JV_KIND_TRUE: r->a[k][i] = 1; break;
			case JV_KIND_FALSE: r->a[k][i] = 0; break;
			default: n = -2; break;
			}
			jv_free(e);
		}
	}
	jv_free(a);
	return n;
}

static void seq_free(struct ca_train_seq *s)
{
	free(s->tokens);
	free(s->mask);
	for (int k = 0; k < CA_TRAIN_NFIELDS; k++)
		free(s->field[k]);
}

/* Check the gathered arrays and build the sequence; NULL or why not. */
static const char *validate(const struct raw *r, const char *const names[CA_TRAIN_NFIELDS],
	const struct ca_model_config *cfg, struct ca_train_seq *s)
{
	static char why[200];
	memset(s, 0, sizeof *s);
	long n = r->n[K_TOKENS];
	if (n < 0)
		return n == -1 ? "record has no tokens array" : "tokens is not an array of numbers";
	if (n < 2)
		return "a record needs at least two tokens (the first is never trained on)";
	if (n > cfg->max_positions) {
		snprintf(why, sizeof why, "%ld tokens exceed the model's max_position_embeddings %d", n,
			cfg->max_positions);
		return why;
	}
	for (long i = 0; i < n; i++) {
		double x = r->a[K_TOKENS][i];
		if (!(x >= 0 && x < cfg->vocab_size) || x != floor(x)) {
			snprintf(why, sizeof why, "tokens[%ld] is not a token id of the model (vocabulary %d)", i,
				cfg->vocab_size);
			return why;
		}
	}
	if (r->n[K_MASK] == -2)
		return "mask is not an array";
	if (r->n[K_MASK] >= 0 && r->n[K_MASK] != n)
		return "mask has a different length than tokens";
	for (long i = 0; r->n[K_MASK] >= 0 && i < n; i++) {
		double x = r->a[K_MASK][i];
		if (x != 0 && x != 1) {
			snprintf(why, sizeof why, "mask[%ld] is not 0 or 1", i);
			return why;
		}
	}
	for (int k = 0; k < CA_TRAIN_NFIELDS; k++) {
		if (!names[k])
			continue;
		long m = r->n[K_FIELD0 + k];
		if (m < 0) {
			snprintf(why, sizeof why, m == -1 ? "record has no %s array" : "%s is not an array of numbers",
				names[k]);
			return why;
		}
		if (m != n) {
			snprintf(why, sizeof why, "%s has a different length than tokens", names[k]);
			return why;
		}
		for (long i = 1; i < n; i++) {
			int on = r->n[K_MASK] < 0 || r->a[K_MASK][i] == 1;
			if (on && !isfinite(r->a[K_FIELD0 + k][i])) {
				snprintf(why, sizeof why, "%s[%ld] is not a finite number", names[k], i);
				return why;
			}
		}
	}
	s->n = (int)n;
	s->tokens = ca_xmalloc(sizeof(int) * (size_t)n);
	s->mask = ca_xmalloc((size_t)n);
	for (long i = 0; i < n; i++) {
		s->tokens[i] = (int)r->a[K_TOKENS][i];
		s->mask[i] = i > 0 && (r->n[K_MASK] < 0 || r->a[K_MASK][i] == 1);
	}
	for (int k = 0; k < CA_TRAIN_NFIELDS; k++) {
		if (!names[k])
			continue;
		s->field[k] = ca_xmalloc(sizeof(double) * (size_t)n);
		for (long i = 0; i < n; i++) {
			double x = r->a[K_FIELD0 + k][i];
			s->field[k][i] = s->mask[i] ? x : isfinite(x) ? x : 0;
		}
	}
	return NULL;
}

/* The fast path: 1 with r filled, 0 when libjq must decide. */
static int gather_text(struct raw *r, const char *text, size_t len, const char *const keys[NKEYS])
{
	const char *want[NKEYS];
	int map[NKEYS], nwant = 0;
	for (int k = 0; k < NKEYS; k++) {
		r->n[k] = -1;
		if (keys[k]) {
			map[nwant] = k;
			want[nwant++] = keys[k];
		}
	}
	struct ca_json_span spans[NKEYS];
	size_t close;
	if (ca_json_scan_object(text, len, want, (size_t)nwant, spans, &close) < 0)
		return 0;
	r->has_reward = 0;
	for (int j = 0; j < nwant; j++) {
		int k = map[j];
		if (!spans[j].start)
			continue;
		if (k == K_REWARD) {
			const char *p = spans[j].start;
			if (*p == '-' || (*p >= '0' && *p <= '9')) {
				char *stop;
				r->reward = ca_json_strtod(p, &stop);
				r->has_reward = isfinite(r->reward);
			}
			continue;
		}
		if (spans[j].len == 4 && memcmp(spans[j].start, "null", 4) == 0)
			continue;
		if ((r->n[k] = text_array(r, k, spans[j])) < 0)
			return 0;
	}
	return 1;
}

static void gather_jv(struct raw *r, jv record, const char *const keys[NKEYS])
{
	for (int k = 0; k < NKEYS; k++)
		r->n[k] = k == K_REWARD || !keys[k] ? -1 : jv_numbers(r, k, record, keys[k]);
	r->has_reward = ca_json_number(record, "reward", &r->reward) == 1;
}

void ca_train_read(int nfiles, char **files, const char *const names[CA_TRAIN_NFIELDS],
	const struct ca_model_config *cfg, struct ca_train_data *d)
{
	memset(d, 0, sizeof *d);
	const char *keys[NKEYS] = {[K_TOKENS] = "tokens", [K_MASK] = "mask", [K_REWARD] = "reward"};
	for (int k = 0; k < CA_TRAIN_NFIELDS; k++)
		keys[K_FIELD0 + k] = names[k];
	struct raw r;
	memset(&r, 0, sizeof r);
	struct ca_ndjson_reader *rd = ca_ndjson_open(nfiles, files);
	int cap = 0;
	const char *text;
	size_t len;
	int kind;
	while ((kind = ca_ndjson_next_text(rd, &text, &len)) != CA_NDJSON_EOF) {
		d->records++;
		if (kind == CA_NDJSON_BAD) {  /* a line too long to keep: skipped like a malformed one */
			ca_ndjson_warn(rd, "%s", text);
			d->skipped++;
			d->status = ca_err_worst(d->status, CA_EXIT_DATA);
			continue;
		}
		if (!gather_text(&r, text, len, keys)) {
			jv v;
			if (ca_ndjson_parse(text, len, &v) != CA_NDJSON_RECORD) {
				ca_ndjson_warn(rd, "%s", jv_string_value(v));
				jv_free(v);
				d->skipped++;
				d->status = ca_err_worst(d->status, CA_EXIT_DATA);
				continue;
			}
			gather_jv(&r, v, keys);
			jv_free(v);
		}
		if (d->nseq == cap)
			d->seq = ca_xrealloc(d->seq, sizeof *d->seq * (size_t)(cap = cap ? 2 * cap : 64));
		struct ca_train_seq *s = &d->seq[d->nseq];
		const char *bad = validate(&r, names, cfg, s);
		if (bad) {
			ca_ndjson_warn(rd, "%s", bad);
			seq_free(s);
			d->skipped++;
			d->status = ca_err_worst(d->status, CA_EXIT_DATA);
			continue;
		}
		if (r.has_reward) {
			d->reward_sum += r.reward;
			d->rewarded++;
			d->reward_3 += r.reward == 3;
		}
		d->nseq++;
		d->tokens += s->n;
		for (int i = 0; i < s->n; i++)
			d->agent_tokens += s->mask[i];
	}
	for (int k = 0; k < NKEYS; k++)
		free(r.a[k]);
	d->status = ca_err_worst(d->status, ca_ndjson_status(rd));
	ca_ndjson_close(rd);
}

void ca_train_data_free(struct ca_train_data *d)
{
	for (int i = 0; i < d->nseq; i++)
		seq_free(&d->seq[i]);
	free(d->seq);
	memset(d, 0, sizeof *d);
}

void ca_train_pack(struct ca_train_pack *p, const struct ca_train_data *d, int first, int nseq)
{
	memset(p, 0, sizeof *p);
	p->nseq = nseq;
	int T = 0;
	for (int s = first; s < first + nseq; s++)
		T += d->seq[s].n;
	p->T = T;
	size_t t = (size_t)(T ? T : 1);
	p->tokens = ca_xmalloc(sizeof(int) * t);
	p->targets = ca_xmalloc(sizeof(int) * t);
	p->seq_len = ca_xmalloc(sizeof(int) * (size_t)(nseq ? nseq : 1));
	p->start = ca_xmalloc(sizeof(size_t) * (size_t)(nseq + 1));
	p->mask = ca_xmalloc(t);
	for (int k = 0; k < CA_TRAIN_NFIELDS; k++)
		if (nseq > 0 && d->seq[first].field[k])
			p->field[k] = ca_xmalloc(sizeof(double) * t);
	for (int j = 0; j < 3; j++) {
		p->engine[j] = ca_xcalloc(t, sizeof(float));
		p->record[j] = ca_xcalloc(t, sizeof(double));
	}
	p->weights = ca_xcalloc(t, sizeof(double));
	p->grad = ca_xcalloc(t, sizeof(double));
	size_t o = 0;
	for (int s = 0; s < nseq; s++) {
		const struct ca_train_seq *q = &d->seq[first + s];
		p->start[s] = o;
		p->seq_len[s] = q->n;
		for (int i = 0; i < q->n; i++) {
			p->tokens[o + i] = q->tokens[i];
			p->targets[o + i] = i + 1 < q->n ? q->tokens[i + 1] : -1;
			p->mask[o + i] = q->mask[i];
			for (int k = 0; k < CA_TRAIN_NFIELDS; k++)
				if (p->field[k])
					p->field[k][o + i] = q->field[k][i];
		}
		o += (size_t)q->n;
	}
	p->start[nseq] = o;
	p->batch = (struct ca_batch){.T = T, .tokens = p->tokens, .nseq = nseq, .seq_len = p->seq_len};
	size_t nonempty, longest;
	p->all_tokens = (double)ca_ppo_agg_counts((size_t)nseq, p->start, p->mask, &nonempty, &longest);
	p->all_nonempty = (double)nonempty;
	p->all_horizon = longest > 1 ? (double)(longest - 1) : 1;
}

void ca_train_weights(struct ca_train_pack *p, int agg)
{
	ca_ppo_agg_weights_of(agg, (size_t)p->nseq, p->start, p->mask, p->all_tokens, p->all_nonempty, p->all_horizon,
		p->weights);
}

void ca_train_pack_free(struct ca_train_pack *p)
{
	free(p->tokens);
	free(p->targets);
	free(p->seq_len);
	free(p->start);
	free(p->mask);
	for (int k = 0; k < CA_TRAIN_NFIELDS; k++)
		free(p->field[k]);
	for (int j = 0; j < 3; j++) {
		free(p->engine[j]);
		free(p->record[j]);
	}
	free(p->weights);
	free(p->grad);
	memset(p, 0, sizeof *p);
}

void ca_train_to_record(const struct ca_train_pack *p, const float *engine, double *record)
{
	for (int s = 0; s < p->nseq; s++) {
		size_t a = p->start[s], b = p->start[s + 1];
		record[a] = 0;
		for (size_t i = a + 1; i < b; i++)
			record[i] = engine[i - 1];
	}
}

void ca_train_to_engine(const struct ca_train_pack *p, const double *record, float *engine)
{
	for (int s = 0; s < p->nseq; s++) {
		size_t a = p->start[s], b = p->start[s + 1];
		for (size_t i = a + 1; i < b; i++)
			engine[i - 1] = (float)record[i];
		engine[b - 1] = 0;
	}
}

void ca_train_split(int nseq, int n, int k, int *first, int *count)
{
	/* The first nseq % n mini-batches take one sequence more. */
	int base = nseq / n, extra = nseq % n;
	*first = k * base + (k < extra ? k : extra);
	*count = base + (k < extra);
}

struct ca_model *ca_train_load(const char *dir, int critic)
{
	char why[CA_MODEL_WHY];
	struct stat st;
	if (stat(dir, &st) < 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "%s", dir);
	struct ca_model *m = ca_model_open(dir);
	/* Freed before dying: a server (ca_train_serve) catches the die and goes on. */
	const char *kind = critic && !m->cfg.critic ? "not a critic checkpoint (no value head score.weight)" :
		!critic && m->cfg.critic ? "a critic checkpoint, wanted a policy (language-model head)" : NULL;
	if (kind) {
		ca_model_free(m);
		ca_err_die(CA_EXIT_DATA, "%s: %s", dir, kind);
	}
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
	if (access(path, F_OK) == 0 && ca_model_load_optimizer(m, dir, why) < 0) {
		ca_model_free(m);
		ca_err_die(CA_EXIT_DATA, "%s", why);
	}
	return m;
}

/*
 * Empty and remove a checkpoint directory we replaced or failed to write.
 * Files the new checkpoint lacks (a user's notes, logs) are moved into
 * keep first, when given; subdirectories are left, and so is the directory.
 */
static void remove_checkpoint_dir(const char *dir, const char *keep)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return;
	struct dirent *e;
	while ((e = readdir(dp)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char from[PATH_MAX], to[PATH_MAX];
		struct stat st;
		snprintf(from, sizeof from, "%s/%s", dir, e->d_name);
		if (lstat(from, &st) < 0 || S_ISDIR(st.st_mode))
			continue;
		/* Weights of the old checkpoint never mix with the new one's. */
		int weights = strncmp(e->d_name, "model", 5) == 0 && strstr(e->d_name, ".safetensors");
		if (keep && !weights) {
			snprintf(to, sizeof to, "%s/%s", keep, e->d_name);
			if (lstat(to, &st) < 0 && errno == ENOENT && rename(from, to) == 0)
				continue;
		}
		unlink(from);
	}
	closedir(dp);
	rmdir(dir);
}

void ca_train_save(struct ca_model *m, const char *dir)
{
	char tmp[PATH_MAX], old[PATH_MAX], why[CA_MODEL_WHY];
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	snprintf(tmp, sizeof tmp, "%.*s.tmp.%ld", (int)len, dir, (long)getpid());
	snprintf(old, sizeof old, "%.*s.old.%ld", (int)len, dir, (long)getpid());
	if (ca_model_save(m, tmp, -1, 0, why) < 0 || (m->adam_m && ca_model_save_optimizer(m, tmp, why) < 0)) {
		remove_checkpoint_dir(tmp, NULL);
		ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	}
	/* Swap the directories in one step where the kernel can (Linux 3.15). */
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
		remove_checkpoint_dir(tmp, dir);
		return;
	}
	struct stat st;
	int had = stat(dir, &st) == 0;
	if (had && rename(dir, old) < 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "rename %s", dir);
	if (rename(tmp, dir) < 0) {
		int e = errno;
		if (had)
			rename(old, dir);
		errno = e;
		ca_err_die_sys(CA_EXIT_SYSTEM, "rename %s to %s", tmp, dir);
	}
	if (had)
		remove_checkpoint_dir(old, dir);
}

void ca_train_opts_default(struct ca_train_opts *o, double lr)
{
	/* verl's actor and critic optimizer defaults; lr is the paper's per stage. */
	*o = (struct ca_train_opts){
		.adamw = {.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
			.max_grad_norm = 1.0},
		.mini_batches = 1, .epochs = 1, .agg = CA_PPO_TOKEN_MEAN, .device = CA_DEVICE_CPU,
	};
}

/* Take one of the shared options (ids from CA_TRAIN_OPT_*, 'm', 'o') into o; 1 if it was one. */
static int take_option(struct ca_train_opts *o, int id, const char *arg)
{
	switch (id) {
	case CA_TRAIN_OPT_AGG:
		if ((o->agg = ca_ppo_agg_parse(arg)) < 0) {
			ca_err_warn("--agg: unknown mode '%s' (token-mean, seq-mean-token-mean, seq-mean-token-sum, "
				"seq-mean-token-sum-norm)", arg);
			ca_opt_bad_usage();
		}
		return 1;
	case CA_TRAIN_OPT_LOSS_SCALE_FACTOR:
		o->loss_scale_factor = ca_opt_double("--loss-scale-factor", arg, 1e-30, 1e30);
		return 1;
	case CA_TRAIN_OPT_BETA1: o->adamw.beta1 = ca_opt_double("--beta1", arg, 0, 0.999999); return 1;
	case CA_TRAIN_OPT_BETA2: o->adamw.beta2 = ca_opt_double("--beta2", arg, 0, 0.999999999); return 1;
	case CA_TRAIN_OPT_DEVICE: o->device = (int)ca_device_parse("--device", arg); return 1;
	case CA_TRAIN_OPT_EPOCHS: o->epochs = (int)ca_opt_long("--epochs", arg, 1, 1000); return 1;
	case CA_TRAIN_OPT_EPS: o->adamw.eps = ca_opt_double("--eps", arg, 1e-30, 1); return 1;
	case CA_TRAIN_OPT_LR: o->adamw.lr = ca_opt_double("--lr", arg, 0, 10); return 1;
	case CA_TRAIN_OPT_MAX_GRAD_NORM:
		o->adamw.max_grad_norm = ca_opt_double("--max-grad-norm", arg, 0, 1e30);
		return 1;
	case CA_TRAIN_OPT_MINI_BATCHES:
		o->mini_batches = (int)ca_opt_long("--mini-batches", arg, 1, 1 << 20);
		return 1;
	case CA_TRAIN_OPT_WEIGHT_DECAY:
		o->adamw.weight_decay = ca_opt_double("--weight-decay", arg, 0, 1);
		return 1;
	case CA_TRAIN_OPT_SERVE: o->serve = 1; return 1;
	case 'm': o->model = arg; return 1;
	case 'o': o->output = arg; return 1;
	}
	return 0;
}

int ca_train_getopt(struct ca_train_opts *o, int argc, char **argv, const struct option *longopts)
{
	int c;
	do
		c = getopt_long(argc, argv, "hm:o:", longopts, NULL);
	while (c != -1 && take_option(o, c, optarg));
	return c;
}

static void check_options(struct ca_train_opts *o, const char *usage, int nfiles)
{
	if (o->serve && (o->model || o->output || nfiles > 0)) {
		ca_err_warn("--serve takes no -m, -o or files: each request names its own");
		fputs(usage, stderr);
		ca_opt_bad_usage();
	}
	if (!o->model && !o->serve) {
		ca_err_warn("-m DIR is required");
		fputs(usage, stderr);
		ca_opt_bad_usage();
	}
	if (!o->output)
		o->output = o->model;
}

void ca_train_sum(struct ca_train_engine *e, double *x, size_t n)
{
	ca_dist_sum(&e->dist, x, n);
}

double ca_train_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

jv ca_train_mean(double sum, double n)
{
	return n > 0 ? ca_json_num_or_null(sum / n) : jv_null();
}

/*
 * The engine. The CUDA backend is a shared object opened at run time
 * (lib/device), so this file and the commands build without CUDA.
 */
/* Put m on the engine whose ranks are set up already (on CUDA: upload it). */
static void engine_attach(struct ca_train_engine *e, struct ca_model *m, int device)
{
	char why[CA_MODEL_WHY];
	e->m = m;
	e->device = device;
	e->idle = 0;
	if (device != CA_DEVICE_CUDA)
		return;
	const struct ca_cuda_api *api = ca_device_cuda(why);
	if (!api)
		ca_err_die(CA_EXIT_SYSTEM, "--device cuda: %s", why);
	if (!api->model_upload || !api->model_free || !api->model_forward_train || !api->model_backward ||
	    !api->model_zero_grad || !api->model_adamw_step || !api->model_download ||
	    (ca_dist_device_sums(&e->dist) && !api->model_grad_buffer))
		ca_err_die(CA_EXIT_SYSTEM, "--device cuda: %s lacks the training entry points (rebuild: make model-cuda)",
			api->path);
	e->api = api;
	if (!(e->gpu = api->model_upload(m, why)))
		ca_err_die(CA_EXIT_SYSTEM, "--device cuda: %s", why);
}

void ca_train_engine_open(struct ca_train_engine *e, struct ca_model *m, int device)
{
	*e = (struct ca_train_engine){0};
	ca_dist_init(&e->dist);
	engine_attach(e, m, device);
}

void ca_train_engine_forward(struct ca_train_engine *e, const struct ca_train_pack *p, float *logprobs,
	float *entropy, float *values)
{
	char why[CA_MODEL_WHY];
	e->idle = p->T == 0;
	if (e->gpu) {
		if (e->api->model_zero_grad(e->gpu, why) < 0 ||
		    (p->T > 0 &&
			e->api->model_forward_train(e->gpu, &p->batch, p->targets, logprobs, entropy, values, why) < 0))
			ca_err_die(CA_EXIT_SYSTEM, "--device cuda: %s", why);
		return;
	}
	ca_model_zero_grad(e->m);
	if (p->T == 0)  /* a rank with no share of this mini-batch: a zero gradient */
		return;
	if (ca_model_forward(e->m, &p->batch, p->targets, logprobs, entropy, values, 1, why) < 0)
		ca_err_die(CA_EXIT_DATA, "%s", why);
}

void ca_train_engine_backward(struct ca_train_engine *e, const float *dlogp, const float *dentropy,
	const float *dvalue)
{
	char why[CA_MODEL_WHY];
	if (e->idle)
		return;
	if (!e->gpu) {
		ca_model_backward(e->m, dlogp, dentropy, dvalue);
		return;
	}
	if (e->api->model_backward(e->gpu, dlogp, dentropy, dvalue, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "--device cuda: %s", why);
}

double ca_train_engine_adamw(struct ca_train_engine *e, const struct ca_adamw *opt)
{
	char why[CA_MODEL_WHY];
	if (!e->gpu) {
		ca_dist_sum_float(&e->dist, e->m->grad, e->m->nparams);
		return ca_model_adamw_step(e->m, opt);
	}
	if (ca_dist_device_sums(&e->dist)) {
		size_t n = 0;
		float *grad = e->api->model_grad_buffer(e->gpu, &n, why);
		char dwhy[256];
		if (!grad)
			ca_err_die(CA_EXIT_SYSTEM, "--device cuda: %s", why);
		if (ca_dist_sum_device(&e->dist, grad, n, NULL, dwhy) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "rank %d of %d: %s", e->dist.rank, e->dist.world, dwhy);
	}
	double norm = 0;
	if (e->api->model_adamw_step(e->gpu, opt, &norm, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "--device cuda: %s", why);
	return norm;
}

/* The trained weights and AdamW state back into e->m; the engine keeps its copy. */
static void engine_sync(struct ca_train_engine *e)
{
	char why[CA_MODEL_WHY];
	if (e->gpu && e->api->model_download(e->gpu, e->m, 0, why) < 0)
		ca_err_die(CA_EXIT_SYSTEM, "--device cuda: %s", why);
}

void ca_train_engine_close(struct ca_train_engine *e)
{
	engine_sync(e);
	if (e->gpu)
		e->api->model_free(e->gpu);
	e->gpu = NULL;
}

/*
 * A rank's pack gets the aggregation denominators of the whole mini-batch
 * [first, first + count), as ca_train_pack counts them; every rank has the data.
 */
static void whole_batch_denominators(struct ca_train_pack *p, const struct ca_train_data *d, int first, int count)
{
	double tokens = 0, nonempty = 0;
	int longest = 0;
	for (int s = first; s < first + count; s++) {
		long n = 0;
		for (int i = 0; i < d->seq[s].n; i++)
			n += d->seq[s].mask[i] != 0;
		tokens += (double)n;
		nonempty += n > 0;
		if (d->seq[s].n > longest)
			longest = d->seq[s].n;
	}
	p->all_tokens = tokens;
	p->all_nonempty = nonempty;
	p->all_horizon = longest > 1 ? longest - 1 : 1;
}

/* An epoch's mini-batches: as asked, but no more than there are sequences. */
static int epoch_mini_batches(const struct ca_train_data *d, const struct ca_train_opts *o)
{
	return o->mini_batches < d->nseq ? o->mini_batches : d->nseq;
}

int ca_train_updates(const struct ca_train_data *d, const struct ca_train_opts *o)
{
	return epoch_mini_batches(d, o) * o->epochs;
}

double ca_train_epochs(struct ca_train_engine *e, const struct ca_train_data *d, const struct ca_train_opts *o,
	ca_train_update_fn update, void *ctx)
{
	int nmb = epoch_mini_batches(d, o);
	double seconds = 0;
	for (int epoch = 0; epoch < o->epochs; epoch++)
		for (int k = 0; k < nmb; k++) {
			int first, count, mine, nmine;
			ca_train_split(d->nseq, nmb, k, &first, &count);
			ca_dist_share(&e->dist, count, &mine, &nmine);
			struct ca_train_pack p;
			ca_train_pack(&p, d, first + mine, nmine);
			if (e->dist.world > 1)
				whole_batch_denominators(&p, d, first, count);
			if (o->loss_scale_factor > 0)
				p.all_horizon = o->loss_scale_factor;
			double u0 = ca_train_now();
			update(e, &p, ctx);
			seconds += ca_train_now() - u0;
			ca_train_pack_free(&p);
		}
	return seconds;
}

jv ca_train_stats_begin(const char *command, const struct ca_model *m, const struct ca_train_data *d,
	const struct ca_train_opts *o)
{
	jv r = jv_object();
	r = jv_object_set(r, jv_string("command"), jv_string(command));
	r = jv_object_set(r, jv_string("step"), jv_number((double)m->adam_step));
	r = jv_object_set(r, jv_string("lr"), jv_number(o->adamw.lr));
	r = jv_object_set(r, jv_string("records"), jv_number((double)d->records));
	r = jv_object_set(r, jv_string("skipped"), jv_number((double)d->skipped));
	r = jv_object_set(r, jv_string("sequences"), jv_number(d->nseq));
	r = jv_object_set(r, jv_string("tokens"), jv_number((double)d->agent_tokens));
	r = jv_object_set(r, jv_string("tokens_total"), jv_number((double)d->tokens));
	r = jv_object_set(r, jv_string("reward_mean"),
		d->rewarded ? jv_number(d->reward_sum / (double)d->rewarded) : jv_null());
	r = jv_object_set(r, jv_string("reward_3_share"),
		d->rewarded ? jv_number((double)d->reward_3 / (double)d->rewarded) : jv_null());
	r = jv_object_set(r, jv_string("updates"), jv_number(ca_train_updates(d, o)));
	return r;
}

/*
 * Running steps. A cold run and a server go through the same step(); the
 * server keeps its model after a step (on CUDA, the engine's copy too: the
 * weights, the AdamW state and the context), with the identity of the
 * files it saved, and takes it for a later request whose -m directory
 * still holds exactly those files: same device and inode, size and
 * modification time, so a checkpoint rewritten or replaced since is read
 * again, and a hard-linked copy is not. A checkpoint in bf16 or fp16 stays
 * resident too once its optimizer state is written, since that holds the
 * fp32 master weights a cold step reads back (ca_model_save_optimizer);
 * without optimizer state its weights would be rounded on disk, and the
 * next step must start from what the disk holds.
 */
static const char *const checkpoint_files[] = {"config.json", "model.safetensors", "optimizer.safetensors"};
#define NCHECKPOINT_FILES (sizeof checkpoint_files / sizeof checkpoint_files[0])

struct file_ident {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

struct resident {
	struct ca_model *m;
	struct ca_train_engine e;   /* its ranks are set up once; it holds m when attached */
	int attached;
	int saved;                  /* ident is the checkpoint m was last saved as, m unchanged since */
	struct file_ident ident[NCHECKPOINT_FILES];
	struct ca_train_data d;
};

static int identify(const char *dir, struct file_ident ident[NCHECKPOINT_FILES])
{
	for (size_t i = 0; i < NCHECKPOINT_FILES; i++) {
		char path[PATH_MAX];
		struct stat st;
		snprintf(path, sizeof path, "%s/%s", dir, checkpoint_files[i]);
		if (stat(path, &st) < 0)
			return -1;
		ident[i] = (struct file_ident){.dev = st.st_dev, .ino = st.st_ino, .size = st.st_size,
			.mtime = st.st_mtim};
	}
	return 0;
}

static int resident_is(const struct resident *r, const char *dir)
{
	struct file_ident now[NCHECKPOINT_FILES];
	if (!r->m || !r->saved || identify(dir, now) < 0)
		return 0;
	for (size_t i = 0; i < NCHECKPOINT_FILES; i++)
		if (now[i].dev != r->ident[i].dev || now[i].ino != r->ident[i].ino || now[i].size != r->ident[i].size ||
		    now[i].mtime.tv_sec != r->ident[i].mtime.tv_sec || now[i].mtime.tv_nsec != r->ident[i].mtime.tv_nsec)
			return 0;
	return 1;
}

/* After a save to dir: keep m as that checkpoint, its sidecar files now in dir. */
static void resident_saved(struct resident *r, const char *dir)
{
	r->saved = (r->m->save_dtype == CA_ST_F32 || r->m->adam_m) && identify(dir, r->ident) == 0;
	free(r->m->source_dir);
	r->m->source_dir = ca_xstrdup(dir);
}

/* Let the model go: the engine's copy without reading it back (a failed step's is not wanted). */
static void resident_drop(struct resident *r)
{
	if (r->e.gpu)
		r->e.api->model_free(r->e.gpu);
	r->e.gpu = NULL;
	r->attached = 0;
	r->saved = 0;
	if (r->m)
		ca_model_free(r->m);
	r->m = NULL;
	ca_train_data_free(&r->d);
}

/* One step from o->model to o->output over files; the stats record and, in *status, the step's exit status. */
static jv step(const struct ca_train_step *s, const struct ca_train_opts *o, struct resident *r, int nfiles,
	char **files, int *status, int *warm)
{
	double t0 = ca_train_now();
	*warm = resident_is(r, o->model);
	if (!*warm) {
		resident_drop(r);
		r->m = ca_train_load(o->model, s->critic);
	}
	ca_train_read(nfiles, files, s->names, &r->m->cfg, &r->d);
	if (s->begin)
		s->begin(&r->d, s->ctx);
	r->saved = 0;  /* from here on m is no longer what o->model holds */
	if (!r->attached) {
		engine_attach(&r->e, r->m, o->device);
		r->attached = 1;
	}
	double update_seconds = ca_train_epochs(&r->e, &r->d, o, s->update, s->ctx);
	engine_sync(&r->e);
	jv rec = s->stats(&r->e, &r->d, ca_train_updates(&r->d, o), ca_train_stats_begin(s->command, r->m, &r->d, o),
		s->ctx);
	if (r->e.api && r->e.api->peak_bytes)
		rec = jv_object_set(rec, jv_string("device_peak_bytes"), jv_number((double)r->e.api->peak_bytes()));
	/* Every rank holds the same weights: rank 0 alone writes them and the record. */
	if (r->e.dist.rank == 0) {
		ca_train_save(r->m, o->output);
		resident_saved(r, o->output);
	}
	rec = jv_object_set(rec, jv_string("agg"), jv_string(ca_ppo_agg_name(o->agg)));
	rec = jv_object_set(rec, jv_string("ranks"), jv_number(r->e.dist.world));
	rec = jv_object_set(rec, jv_string("update_seconds"), jv_number(update_seconds));
	rec = jv_object_set(rec, jv_string("seconds"), jv_number(ca_train_now() - t0));
	*status = r->d.status;
	ca_train_data_free(&r->d);
	return rec;
}

int ca_train_run(const struct ca_train_step *s, const struct ca_train_opts *o, int nfiles, char **files)
{
	struct resident r = {0};
	int status, warm;
	ca_dist_init(&r.e.dist);
	jv rec = step(s, o, &r, nfiles, files, &status, &warm);
	int rank = r.e.dist.rank;
	ca_dist_close(&r.e.dist);
	if (rank != 0)
		jv_free(rec);
	else if (ca_ndjson_write(rec) != 0)
		status = CA_EXIT_SYSTEM;
	resident_drop(&r);
	return ca_err_finish(status);
}

/* A request's members. */
struct request {
	struct ca_train_opts o;
	int nfiles;
	char **files;
};

/* Read a request into q: NULL, or why it is refused, with *status CA_EXIT_DATA for a malformed request
 * or CA_EXIT_SYSTEM for an input that cannot be read (status is left alone otherwise).
 */
static const char *parse_request(jv req, struct request *q, const struct ca_train_opts *o, int *status)
{
	static char why[PATH_MAX + 100];
	memset(q, 0, sizeof *q);
	q->o = *o;
	if (jv_get_kind(req) != JV_KIND_OBJECT)
		return "a request is a JSON object {\"model\": DIR, \"output\": DIR, \"inputs\": [FILE, ...]}";
	int bad = 0;
	jv_object_foreach(req, key, value) {  /* borrows req */
		const char *k = jv_string_value(key);
		if (!bad && strcmp(k, "model") != 0 && strcmp(k, "output") != 0 && strcmp(k, "inputs") != 0) {
			snprintf(why, sizeof why, "unknown request member \"%.100s\" (model, output, inputs)", k);
			bad = 1;
		}
		jv_free(key);
		jv_free(value);
	}
	if (bad)
		return why;
	jv model = jv_object_get(jv_copy(req), jv_string("model")), output = jv_object_get(jv_copy(req),
		jv_string("output")), inputs = jv_object_get(jv_copy(req), jv_string("inputs"));
	const char *no = NULL;
	if (jv_get_kind(model) != JV_KIND_STRING)
		no = "\"model\" (the checkpoint directory to start from) must be a string";
	else if (jv_get_kind(output) != JV_KIND_STRING && jv_get_kind(output) != JV_KIND_INVALID)
		no = "\"output\" (the checkpoint directory to write) must be a string";
	else if (jv_get_kind(inputs) != JV_KIND_ARRAY || jv_array_length(jv_copy(inputs)) == 0)
		no = "\"inputs\" (the files of token records) must be an array of one or more file names";
	if (!no) {
		q->o.model = ca_xstrdup(jv_string_value(model));
		q->o.output = jv_get_kind(output) == JV_KIND_STRING ? ca_xstrdup(jv_string_value(output)) : q->o.model;
		q->nfiles = jv_array_length(jv_copy(inputs));
		q->files = ca_xcalloc((size_t)q->nfiles, sizeof(char *));
		for (int i = 0; i < q->nfiles && !no; i++) {
			jv f = jv_array_get(jv_copy(inputs), i);
			if (jv_get_kind(f) != JV_KIND_STRING) {
				snprintf(why, sizeof why, "inputs[%d] is not a file name", i);
				no = why;
			} else if (access(jv_string_value(f), R_OK) < 0) {
				snprintf(why, sizeof why, "inputs[%d]: %.*s: %s", i, PATH_MAX, jv_string_value(f),
					strerror(errno));
				no = why;
				*status = CA_EXIT_SYSTEM;
			} else {
				q->files[i] = ca_xstrdup(jv_string_value(f));
			}
			jv_free(f);
		}
	}
	jv_free(model);
	jv_free(output);
	jv_free(inputs);
	return no;
}

static void request_free(struct request *q)
{
	for (int i = 0; i < q->nfiles; i++)
		free(q->files[i]);
	free(q->files);
	if (q->o.output != q->o.model)
		free((char *)q->o.output);
	free((char *)q->o.model);
}

static jv error_answer(long line, int status, const char *message)
{
	jv e = jv_object();
	e = jv_object_set(e, jv_string("line"), jv_number((double)line));
	e = jv_object_set(e, jv_string("status"), jv_number(status));
	e = jv_object_set(e, jv_string("message"), jv_string(message));
	return jv_object_set(jv_object(), jv_string("error"), e);
}

/*
 * A request's step, with ca_err_die caught: a failed step's answer is an
 * error, and the resident model (which the step may have been changing)
 * is let go, so the next request reads its checkpoint from disk.
 */
static jv serve_one(const struct ca_train_step *s, const struct request *q, struct resident *r, long line,
	int *status)
{
	jmp_buf catcher;
	int caught = setjmp(catcher);
	if (caught) {
		ca_err_catch(NULL);
		resident_drop(r);
		*status = caught;
		return error_answer(line, caught, ca_err_caught());
	}
	ca_err_catch(&catcher);
	int warm;
	jv rec = step(s, &q->o, r, q->nfiles, q->files, status, &warm);
	ca_err_catch(NULL);
	rec = jv_object_set(rec, jv_string("warm"), jv_bool(warm));
	return jv_object_set(rec, jv_string("status"), jv_number(*status));
}

int ca_train_serve(const struct ca_train_step *s, const struct ca_train_opts *o)
{
	/* Static: what the server holds must survive a caught die's longjmp as it was. */
	static struct resident r;
	ca_dist_init(&r.e.dist);
	if (r.e.dist.world > 1)
		ca_err_die(CA_EXIT_USAGE, "--serve runs as one rank (the environment names %d)", r.e.dist.world);
	struct ca_ndjson_reader *rd = ca_ndjson_open(0, NULL);
	int worst = CA_EXIT_OK, kind;
	long line = 0;
	const char *text;
	size_t len;
	while ((kind = ca_ndjson_next_text(rd, &text, &len)) != CA_NDJSON_EOF) {
		line++;
		jv req, answer;
		int status = CA_EXIT_DATA;
		if (kind == CA_NDJSON_BAD) {
			ca_ndjson_warn(rd, "%s", text);
			answer = error_answer(line, status, text);
		} else if (ca_ndjson_parse(text, len, &req) != CA_NDJSON_RECORD) {
			ca_ndjson_warn(rd, "%s", jv_string_value(req));
			answer = error_answer(line, status, jv_string_value(req));
			jv_free(req);
		} else {
			struct request q;
			const char *no = parse_request(req, &q, o, &status);
			jv_free(req);
			if (no) {
				ca_ndjson_warn(rd, "%s", no);
				answer = error_answer(line, status, no);
			} else {
				answer = serve_one(s, &q, &r, line, &status);
			}
			request_free(&q);
		}
		worst = ca_err_worst(worst, status);
		if (ca_ndjson_write(answer) != 0 || fflush(stdout) != 0) {
			worst = CA_EXIT_SYSTEM;
			break;
		}
	}
	worst = ca_err_worst(worst, ca_ndjson_status(rd));
	ca_ndjson_close(rd);
	resident_drop(&r);
	ca_dist_close(&r.e.dist);
	return ca_err_finish(worst);
}

int ca_train_start(const struct ca_train_step *s, struct ca_train_opts *o, const char *usage, int nfiles,
	char **files)
{
	check_options(o, usage, nfiles);
	if (o->serve)
		return ca_train_serve(s, o);
	return ca_train_run(s, o, nfiles, files);
}
