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
#include <unistd.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "paths.h"
#include "train.h"

/* A per-token number array; null is allowed (read as 0) where the mask is 0. */
static const char *number_array(jv record, const char *key, int n, const unsigned char *mask,
	double **out)
{
	static char why[160];
	jv a = ca_json_get(record, key);
	if (jv_get_kind(a) != JV_KIND_ARRAY) {
		jv_free(a);
		snprintf(why, sizeof why, "record has no %s array", key);
		return why;
	}
	if (jv_array_length(jv_copy(a)) != n) {
		jv_free(a);
		snprintf(why, sizeof why, "%s has a different length than tokens", key);
		return why;
	}
	double *x = ca_xmalloc(sizeof(double) * (size_t)n);
	for (int i = 0; i < n; i++) {
		jv e = jv_array_get(jv_copy(a), i);
		if (jv_get_kind(e) == JV_KIND_NUMBER && isfinite(jv_number_value(e))) {
			x[i] = jv_number_value(e);
		} else if (jv_get_kind(e) == JV_KIND_NULL && !mask[i]) {
			x[i] = 0;
		} else {
			jv_free(e);
			jv_free(a);
			free(x);
			snprintf(why, sizeof why, "%s[%d] is not a finite number", key, i);
			return why;
		}
		jv_free(e);
	}
	jv_free(a);
	*out = x;
	return NULL;
}

static void seq_free(struct ca_train_seq *s)
{
	free(s->tokens);
	free(s->mask);
	for (int k = 0; k < CA_TRAIN_NFIELDS; k++)
		free(s->field[k]);
}

static const char *parse_seq(jv record, const char *const names[CA_TRAIN_NFIELDS], int vocab_size,
	struct ca_train_seq *s)
{
	static char why[160];
	memset(s, 0, sizeof *s);
	jv toks = ca_json_get(record, "tokens");
	if (jv_get_kind(toks) != JV_KIND_ARRAY) {
		jv_free(toks);
		return "record has no tokens array";
	}
	int n = jv_array_length(jv_copy(toks));
	if (n < 2) {
		jv_free(toks);
		return "a record needs at least two tokens (the first is never trained on)";
	}
	s->n = n;
	s->tokens = ca_xmalloc(sizeof(int) * (size_t)n);
	s->mask = ca_xmalloc((size_t)n);
	for (int i = 0; i < n; i++) {
		jv t = jv_array_get(jv_copy(toks), i);
		double x = jv_get_kind(t) == JV_KIND_NUMBER ? jv_number_value(t) : -1;
		jv_free(t);
		if (!(x >= 0 && x < vocab_size) || x != floor(x)) {
			jv_free(toks);
			snprintf(why, sizeof why, "tokens[%d] is not a token id of the model (vocabulary %d)", i,
				vocab_size);
			return why;
		}
		s->tokens[i] = (int)x;
	}
	jv_free(toks);
	jv mask = ca_json_get(record, "mask");
	if (jv_get_kind(mask) == JV_KIND_ARRAY) {
		if (jv_array_length(jv_copy(mask)) != n) {
			jv_free(mask);
			return "mask has a different length than tokens";
		}
		for (int i = 0; i < n; i++) {
			jv e = jv_array_get(jv_copy(mask), i);
			int ok = jv_get_kind(e) == JV_KIND_NUMBER &&
				(jv_number_value(e) == 0 || jv_number_value(e) == 1);
			s->mask[i] = ok && jv_number_value(e) == 1;
			jv_free(e);
			if (!ok) {
				jv_free(mask);
				snprintf(why, sizeof why, "mask[%d] is not 0 or 1", i);
				return why;
			}
		}
	} else if (jv_get_kind(mask) == JV_KIND_INVALID || jv_get_kind(mask) == JV_KIND_NULL) {
		memset(s->mask, 1, (size_t)n);
	} else {
		jv_free(mask);
		return "mask is not an array";
	}
	jv_free(mask);
	s->mask[0] = 0;
	for (int k = 0; k < CA_TRAIN_NFIELDS; k++) {
		if (!names[k])
			continue;
		const char *bad = number_array(record, names[k], n, s->mask, &s->field[k]);
		if (bad)
			return bad;
	}
	return NULL;
}

void ca_train_read(int nfiles, char **files, const char *const names[CA_TRAIN_NFIELDS],
	int vocab_size, struct ca_train_data *d)
{
	memset(d, 0, sizeof *d);
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	int cap = 0, kind;
	jv v;
	while ((kind = ca_ndjson_next(r, &v)) != CA_NDJSON_EOF) {
		d->records++;
		if (kind == CA_NDJSON_BAD) {
			ca_ndjson_warn(r, "%s", jv_string_value(v));
			jv_free(v);
			d->skipped++;
			d->status = ca_err_worst(d->status, CA_EXIT_DATA);
			continue;
		}
		if (d->nseq == cap)
			d->seq = ca_xrealloc(d->seq, sizeof *d->seq * (size_t)(cap = cap ? 2 * cap : 64));
		struct ca_train_seq *s = &d->seq[d->nseq];
		const char *bad = parse_seq(v, names, vocab_size, s);
		double reward;
		if (!bad && ca_json_number(v, "reward", &reward) == 1) {
			d->reward_sum += reward;
			d->rewarded++;
		}
		jv_free(v);
		if (bad) {
			ca_ndjson_warn(r, "%s", bad);
			seq_free(s);
			d->skipped++;
			d->status = ca_err_worst(d->status, CA_EXIT_DATA);
			continue;
		}
		d->nseq++;
		d->tokens += s->n;
		for (int i = 0; i < s->n; i++)
			d->agent_tokens += s->mask[i];
	}
	d->status = ca_err_worst(d->status, ca_ndjson_status(r));
	ca_ndjson_close(r);
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
	struct ca_model *m = ca_model_load(dir, why);
	if (!m)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	if (critic && !m->cfg.critic)
		ca_err_die(CA_EXIT_DATA, "%s: not a critic checkpoint (no value head score.weight)", dir);
	if (!critic && m->cfg.critic)
		ca_err_die(CA_EXIT_DATA, "%s: a critic checkpoint, wanted a policy (language-model head)", dir);
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
	if (access(path, F_OK) == 0 && ca_model_load_optimizer(m, dir, why) < 0)
		ca_err_die(CA_EXIT_DATA, "%s", why);
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
	o->adamw = (struct ca_adamw){
		.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01,
		.max_grad_norm = 1.0,
	};
	o->mini_batches = 1;
	o->epochs = 1;
}

int ca_train_opt(struct ca_train_opts *o, int id, const char *arg)
{
	switch (id) {
	case CA_TRAIN_OPT_BETA1: o->adamw.beta1 = ca_opt_double("--beta1", arg, 0, 0.999999); return 1;
	case CA_TRAIN_OPT_BETA2: o->adamw.beta2 = ca_opt_double("--beta2", arg, 0, 0.999999999); return 1;
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
	}
	return 0;
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
	r = jv_object_set(r, jv_string("updates"), jv_number(o->mini_batches * o->epochs));
	return r;
}
