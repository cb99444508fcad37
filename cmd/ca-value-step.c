/*
 * ca-value-step: one critic update from a batch of token records: regress
 * the value of each policy token's state onto ca-gae's "returns" with
 * verl's value loss (lib/rl/ppo.c), optionally clipped around the old values
 * the records carry. Value pretraining (on RFT trajectories, before PPO)
 * and the critic's half of every PPO step are both this command.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "err.h"
#include "json.h"
#include "opt.h"
#include "ppo.h"
#include "train.h"

static const char usage_text[] =
	"usage: ca-value-step [-h] [--agg MODE] [--beta1 X] [--beta2 X] [--clip-value X]\n"
	"                     [--device cpu|cuda] [--epochs N] [--eps X] [--loss-scale-factor X] [--lr X]\n"
	"                     [--max-grad-norm X] [--mini-batches N] [--weight-decay X] -m DIR [-o DIR]\n"
	"                     [file ...]\n"
	"       ca-value-step --serve [option ...]\n";

struct totals {
	const struct ca_train_opts *o;
	double clip;
	double loss, clipfrac, grad_norm, vpred, resid_sq, ret_sum, ret_sq;
	long tokens;
};

static void update(struct ca_train_engine *e, struct ca_train_pack *p, void *ctx)
{
	struct totals *t = ctx;
	size_t T = (size_t)p->T;
	double *v = p->record[0];
	ca_train_engine_forward(e, p, NULL, NULL, p->engine[0]);
	ca_train_to_record(p, p->engine[0], v);
	ca_train_weights(p, t->o->agg);
	double clipfrac;
	double loss = ca_ppo_value_loss(T, v, p->field[CA_TRAIN_RETURNS],
		isfinite(t->clip) ? p->field[CA_TRAIN_VALUES] : NULL, p->mask, p->weights, t->clip, p->grad, &clipfrac);
	/* Predictions before the update, for verl's explained variance. */
	const double *ret = p->field[CA_TRAIN_RETURNS];
	for (size_t i = 0; i < T; i++) {
		if (!p->mask[i])
			continue;
		t->vpred += v[i];
		t->resid_sq += (ret[i] - v[i]) * (ret[i] - v[i]);
		t->ret_sum += ret[i];
		t->ret_sq += ret[i] * ret[i];
		t->tokens++;
	}
	ca_train_to_engine(p, p->grad, p->engine[1]);
	ca_train_engine_backward(e, NULL, NULL, p->engine[1]);
	t->grad_norm += ca_train_engine_adamw(e, &t->o->adamw);
	if (e->dist.world > 1) {
		/* The loss is a sum over the ranks; the clipped share is weighted by tokens. */
		size_t nonempty;
		double tok = (double)ca_ppo_agg_counts((size_t)p->nseq, p->start, p->mask, &nonempty, NULL);
		double x[3] = {loss, clipfrac * tok, tok};
		ca_train_sum(e, x, 3);
		loss = x[0];
		clipfrac = x[2] > 0 ? x[1] / x[2] : 0;
	}
	t->loss += loss;
	t->clipfrac += clipfrac;
}

static void begin(struct ca_train_data *d, void *ctx)
{
	(void)d;
	struct totals *t = ctx;
	*t = (struct totals){.o = t->o, .clip = t->clip};
}

static jv stats(struct ca_train_engine *e, const struct ca_train_data *d, int updates, jv r, void *ctx)
{
	(void)d;
	struct totals *t = ctx;
	if (e->dist.world > 1) {
		double x[5] = {t->vpred, t->resid_sq, t->ret_sum, t->ret_sq, (double)t->tokens};
		ca_train_sum(e, x, 5);
		t->vpred = x[0], t->resid_sq = x[1], t->ret_sum = x[2], t->ret_sq = x[3], t->tokens = (long)x[4];
	}
	r = jv_object_set(r, jv_string("vf_loss"), ca_train_mean(t->loss, updates));
	r = jv_object_set(r, jv_string("vf_clipfrac"), ca_train_mean(t->clipfrac, updates));
	r = jv_object_set(r, jv_string("vpred_mean"), ca_train_mean(t->vpred, (double)t->tokens));
	r = jv_object_set(r, jv_string("returns_mean"), ca_train_mean(t->ret_sum, (double)t->tokens));
	/* verl's vf_explained_var: 1 - Var(returns - V) / Var(returns), biased variances. */
	jv ev = jv_null();
	if (t->tokens > 0) {
		double n = (double)t->tokens, mean_r = t->ret_sum / n;
		double var_r = t->ret_sq / n - mean_r * mean_r;
		double mean_e = (t->ret_sum - t->vpred) / n;
		double var_e = t->resid_sq / n - mean_e * mean_e;
		ev = ca_json_num_or_null(1 - var_e / (var_r + CA_PPO_MEAN_EPS));
	}
	r = jv_object_set(r, jv_string("vf_explained_var"), ev);
	return jv_object_set(r, jv_string("grad_norm"), ca_train_mean(t->grad_norm, updates));
}

int main(int argc, char **argv)
{
	enum { OPT_CLIP = 1 };
	static const struct option longopts[] = {
		{"clip-value", required_argument, NULL, OPT_CLIP},
		{"help", no_argument, NULL, 'h'},
		CA_TRAIN_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct ca_train_opts o;
	ca_train_opts_default(&o, 6e-6);
	struct totals t = {.o = &o, .clip = INFINITY};
	int c;
	ca_err_init(argv[0]);
	while ((c = ca_train_getopt(&o, argc, argv, longopts)) != -1) {
		switch (c) {
		case OPT_CLIP: t.clip = ca_opt_double("--clip-value", optarg, 0, 1e30); break;
		default: ca_opt_common(c, usage_text);
		}
	}
	struct ca_train_step step = {
		.command = "ca-value-step", .critic = 1, .begin = begin, .update = update, .stats = stats, .ctx = &t,
		.names = {
			[CA_TRAIN_RETURNS] = "returns",
			[CA_TRAIN_VALUES] = isfinite(t.clip) ? "values" : NULL,
		},
	};
	return ca_train_start(&step, &o, usage_text, argc - optind, argv + optind);
}
