/*
 * ca-sft-step: one step of supervised fine-tuning of a policy checkpoint on
 * a batch of token records: the masked negative log-likelihood of the
 * tokens whose mask is 1. Rejection fine-tuning (RFT) is this step run on
 * the trajectories ca-rft-filter kept.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "err.h"
#include "opt.h"
#include "ppo.h"
#include "train.h"

static const char usage_text[] =
	"usage: ca-sft-step [-h] [--agg MODE] [--beta1 X] [--beta2 X] [--device cpu|cuda] [--epochs N]\n"
	"                   [--eps X] [--loss-scale-factor X] [--lr X] [--max-grad-norm X] [--mini-batches N]\n"
	"                   [--weight-decay X] -m DIR [-o DIR] [file ...]\n"
	"       ca-sft-step --serve [option ...]\n";

struct totals {
	const struct ca_train_opts *o;
	double loss, grad_norm, entropy;
};

static void update(struct ca_train_engine *e, struct ca_train_pack *p, void *ctx)
{
	struct totals *t = ctx;
	size_t T = (size_t)p->T;
	double *logp = p->record[0], *ent = p->record[1];
	ca_train_engine_forward(e, p, p->engine[0], p->engine[1], NULL);
	ca_train_to_record(p, p->engine[0], logp);
	ca_train_to_record(p, p->engine[1], ent);
	ca_train_weights(p, t->o->agg);
	/* Aggregates with the whole mini-batch's weights: sums over the ranks. */
	double x[2] = {ca_ppo_nll_loss(T, logp, p->weights, p->grad), ca_ppo_aggregate(T, p->weights, ent)};
	ca_train_to_engine(p, p->grad, p->engine[2]);
	ca_train_engine_backward(e, p->engine[2], NULL, NULL);
	t->grad_norm += ca_train_engine_adamw(e, &t->o->adamw);
	ca_train_sum(e, x, 2);
	t->loss += x[0];
	t->entropy += x[1];
}

static void begin(struct ca_train_data *d, void *ctx)
{
	(void)d;
	struct totals *t = ctx;
	*t = (struct totals){.o = t->o};
}

static jv stats(struct ca_train_engine *e, const struct ca_train_data *d, int updates, jv r, void *ctx)
{
	(void)e;
	(void)d;
	const struct totals *t = ctx;
	r = jv_object_set(r, jv_string("loss"), ca_train_mean(t->loss, updates));
	r = jv_object_set(r, jv_string("entropy"), ca_train_mean(t->entropy, updates));
	return jv_object_set(r, jv_string("grad_norm"), ca_train_mean(t->grad_norm, updates));
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		CA_TRAIN_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct ca_train_opts o;
	ca_train_opts_default(&o, 3e-6);
	int c;
	ca_err_init(argv[0]);
	while ((c = ca_train_getopt(&o, argc, argv, longopts)) != -1)
		ca_opt_common(c, usage_text);
	struct totals t = {.o = &o};
	struct ca_train_step step = {
		.command = "ca-sft-step", .critic = 0, .begin = begin, .update = update, .stats = stats, .ctx = &t,
	};
	return ca_train_start(&step, &o, usage_text, argc - optind, argv + optind);
}
