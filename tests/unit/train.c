/*
 * test-train POLICY CRITIC: the losses of lib/ppo through the engine.
 * The gradient the engine accumulates from ppo's per-token gradients
 * (after lib/train's shift from record to engine positions) must match
 * central differences of the loss itself, computed by forward passes, for
 * the PPO surrogate with entropy bonus (policy) and the clipped value loss
 * (critic). This checks the sign, the scale and the alignment of what the
 * step commands hand to ca_model_backward.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "ppo.h"
#include "train.h"

static int failures;
static unsigned long long state = 12345;
static double uniform(void)
{
	state = state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (double)(state >> 11) / 9007199254740992.0;
}

/* A batch of three records over the model's vocabulary, with the fields the losses need. */
static void make_data(struct ca_train_data *d, int vocab)
{
	static const int lens[] = {5, 7, 4};
	memset(d, 0, sizeof *d);
	d->nseq = 3;
	d->seq = calloc(3, sizeof *d->seq);
	for (int s = 0; s < 3; s++) {
		struct ca_train_seq *q = &d->seq[s];
		q->n = lens[s];
		q->tokens = malloc(sizeof(int) * (size_t)q->n);
		q->mask = malloc((size_t)q->n);
		for (int k = 0; k < CA_TRAIN_NFIELDS; k++)
			q->field[k] = calloc((size_t)q->n, sizeof(double));
		for (int i = 0; i < q->n; i++) {
			q->tokens[i] = (int)(uniform() * vocab);
			q->mask[i] = i >= 2 && !(s == 1 && i == 4);
			q->field[CA_TRAIN_ADVANTAGES][i] = uniform() * 2 - 1;
			q->field[CA_TRAIN_RETURNS][i] = uniform() * 2 - 1;
		}
	}
}

struct setup {
	struct ca_model *m;
	struct ca_train_pack *p;
	struct ca_ppo_clip clip;
	double entropy_coef;
	double value_clip;
};

/* The loss at the model's current weights; with grad set, also its backward. */
static double loss(struct setup *s, int grad)
{
	struct ca_train_pack *p = s->p;
	size_t T = (size_t)p->T;
	char why[CA_MODEL_WHY];
	int critic = s->m->cfg.critic;
	if (grad)
		ca_model_zero_grad(s->m);
	int rc = critic ? ca_model_forward(s->m, &p->batch, NULL, NULL, NULL, p->engine[0], grad, why)
			: ca_model_forward(s->m, &p->batch, p->targets, p->engine[0], p->engine[1], NULL, grad, why);
	if (rc < 0)
		ca_err_die(4, "%s", why);
	ca_train_to_record(p, p->engine[0], p->record[0]);
	ca_ppo_agg_weights(CA_PPO_TOKEN_MEAN, (size_t)p->nseq, p->start, p->mask, p->weights);
	double l;
	if (critic) {
		l = ca_ppo_value_loss(T, p->record[0], p->field[CA_TRAIN_RETURNS], p->field[CA_TRAIN_VALUES],
			p->mask, p->weights, s->value_clip, p->grad, NULL);
		if (grad) {
			ca_train_to_engine(p, p->grad, p->engine[2]);
			ca_model_backward(s->m, NULL, NULL, p->engine[2]);
		}
		return l;
	}
	ca_train_to_record(p, p->engine[1], p->record[1]);
	l = ca_ppo_policy_loss(T, p->record[0], p->field[CA_TRAIN_LOGPROBS], p->field[CA_TRAIN_ADVANTAGES],
		p->mask, p->weights, &s->clip, p->grad, NULL);
	l -= s->entropy_coef * ca_ppo_aggregate(T, p->weights, p->record[1]);
	if (grad) {
		ca_train_to_engine(p, p->grad, p->engine[2]);
		for (size_t i = 0; i < T; i++)
			p->record[2][i] = -s->entropy_coef * p->weights[i];
		ca_train_to_engine(p, p->record[2], p->engine[1]);
		ca_model_backward(s->m, p->engine[2], p->engine[1], NULL);
	}
	return l;
}

static void check_gradient(struct setup *s, const char *what)
{
	loss(s, 1);
	float *g = malloc(sizeof(float) * s->m->nparams);
	memcpy(g, s->m->grad, sizeof(float) * s->m->nparams);
	double gnorm = 0;
	for (size_t i = 0; i < s->m->nparams; i++)
		gnorm += (double)g[i] * g[i];
	gnorm = sqrt(gnorm);
	/* The largest gradient entries of a few tensors: where differences are accurate. */
	int checked = 0;
	for (int t = 0; t < s->m->ntensors; t++) {
		const struct ca_model_tensor *mt = &s->m->tensors[t];
		size_t best = mt->offset;
		for (size_t i = mt->offset; i < mt->offset + mt->numel; i++)
			if (fabsf(g[i]) > fabsf(g[best]))
				best = i;
		if (fabsf(g[best]) < 1e-3 * gnorm)
			continue;
		float keep = s->m->params[best];
		const float h = 1e-2f;
		s->m->params[best] = keep + h;
		double up = loss(s, 0);
		s->m->params[best] = keep - h;
		double down = loss(s, 0);
		s->m->params[best] = keep;
		double fd = (up - down) / (2.0 * h);
		checked++;
		if (fabs(fd - g[best]) > 2e-2 * fabs(fd) + 1e-4 * gnorm) {
			fprintf(stderr, "test-train: %s: %s[%zu]: gradient %.6g, differences %.6g\n", what, mt->name,
				best - mt->offset, g[best], fd);
			failures++;
		}
	}
	if (checked < 3) {
		fprintf(stderr, "test-train: %s: only %d tensors had a usable gradient\n", what, checked);
		failures++;
	}
	printf("test-train: %s: %d tensors checked\n", what, checked);
	free(g);
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc != 3)
		ca_err_die(2, "usage: test-train POLICY CRITIC");
	struct ca_model *pol = ca_train_load(argv[1], 0), *crit = ca_train_load(argv[2], 1);
	struct ca_train_data d;
	make_data(&d, pol->cfg.vocab_size);
	struct ca_train_pack p;
	ca_train_pack(&p, &d, 0, d.nseq);

	/* Old log-probs a little off the current ones, so ratios spread around 1
	 * and both branches of the clip are taken. */
	char why[CA_MODEL_WHY];
	if (ca_model_forward(pol, &p.batch, p.targets, p.engine[0], NULL, NULL, 0, why) < 0)
		ca_err_die(4, "%s", why);
	ca_train_to_record(&p, p.engine[0], p.field[CA_TRAIN_LOGPROBS]);
	for (int i = 0; i < p.T; i++)
		p.field[CA_TRAIN_LOGPROBS][i] += (uniform() - 0.5) * 0.6;
	struct setup s = {.m = pol, .p = &p, .clip = {0.2, 0.28, 3}, .entropy_coef = 0.3};
	check_gradient(&s, "ppo surrogate + entropy");

	if (ca_model_forward(crit, &p.batch, NULL, NULL, NULL, p.engine[0], 0, why) < 0)
		ca_err_die(4, "%s", why);
	ca_train_to_record(&p, p.engine[0], p.field[CA_TRAIN_VALUES]);
	for (int i = 0; i < p.T; i++)
		p.field[CA_TRAIN_VALUES][i] += (uniform() - 0.5) * 0.2;
	struct setup v = {.m = crit, .p = &p, .value_clip = 0.05};
	check_gradient(&v, "clipped value loss");

	ca_train_pack_free(&p);
	ca_train_data_free(&d);
	ca_model_free(pol);
	ca_model_free(crit);
	if (failures) {
		fprintf(stderr, "test-train: %d checks failed\n", failures);
		return 1;
	}
	return 0;
}
