/*
 * ca-ppo-step: one PPO update of a policy checkpoint from a batch of token
 * records (the output of ca-logprob and ca-gae), then one stats record.
 *
 * Per mini-batch: recompute the log-probs, form verl's clipped surrogate
 * (lib/rl/ppo.c) over the policy's own tokens, add the optional entropy bonus
 * and KL penalty, and take one AdamW step; --epochs passes over the batch.
 * The gradient of the loss with respect to each token's log-prob (and
 * entropy) is what the engine's backward pass consumes.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "opt.h"
#include "ppo.h"
#include "rl.h"
#include "train.h"

static const char usage_text[] =
	"usage: ca-ppo-step [-h] [--advantages FIELD] [--agg MODE] [--beta1 X] [--beta2 X]\n"
	"                   [--clip-high X] [--clip-low X] [--device cpu|cuda] [--dual-clip C]\n"
	"                   [--entropy-coef X] [--epochs N] [--eps X] [--kl-coef X] [--kl-type TYPE]\n"
	"                   [--loss-scale-factor X] [--lr X] [--max-grad-norm X] [--mini-batches N]\n"
	"                   [--weight-decay X] [--whiten]\n"
	"                   -m DIR [-o DIR] [file ...]\n"
	"       ca-ppo-step --serve [option ...]\n";

struct config {
	struct ca_train_opts train;
	struct ca_ppo_clip clip;
	int kl_type, whiten;
	double entropy_coef, kl_coef;
	const char *advantages;
};

/* Sums over the updates of one call, averaged into the stats record. */
struct totals {
	const struct config *cfg;
	double loss, pg_loss, pg_clipfrac, clipped_high, clipped_low, pg_clipfrac_lower, approx_kl, entropy, kl, grad_norm;
	double ratio_min, ratio_max;
};

/* verl's masked_whiten over every policy token of the batch; fewer than two is bad data, as verl raises. */
static void whiten(struct ca_train_data *d)
{
	struct ca_rl_moments m = {0};
	for (int s = 0; s < d->nseq; s++)
		ca_rl_moments_add(&m, (size_t)d->seq[s].n, d->seq[s].field[CA_TRAIN_ADVANTAGES], d->seq[s].mask);
	for (int s = 0; s < d->nseq; s++)
		ca_rl_moments_add_centered(&m, (size_t)d->seq[s].n, d->seq[s].field[CA_TRAIN_ADVANTAGES],
			d->seq[s].mask);
	double mean = ca_rl_moments_mean(&m), var;
	if (ca_rl_moments_var(&m, &var) < 0)
		ca_err_die(CA_EXIT_DATA, "--whiten: %zu policy token%s in the batch; whitening needs at least 2", m.count,
			m.count == 1 ? "" : "s");
	for (int s = 0; s < d->nseq; s++) {
		double *a = d->seq[s].field[CA_TRAIN_ADVANTAGES];
		ca_rl_whiten((size_t)d->seq[s].n, a, d->seq[s].mask, mean, var, a);
	}
}

static void update(struct ca_train_engine *e, struct ca_train_pack *p, void *ctx)
{
	struct totals *t = ctx;
	const struct config *cfg = t->cfg;
	size_t T = (size_t)p->T;
	float *logp_e = p->engine[0], *ent_e = p->engine[1], *grad_e = p->engine[2];
	double *logp = p->record[0], *ent = p->record[1], *x = p->record[2];
	ca_train_engine_forward(e, p, logp_e, ent_e, NULL);
	ca_train_to_record(p, logp_e, logp);
	ca_train_to_record(p, ent_e, ent);
	ca_train_weights(p, cfg->train.agg);
	struct ca_ppo_policy_stats st;
	double pg = ca_ppo_policy_loss(T, logp, p->field[CA_TRAIN_LOGPROBS], p->field[CA_TRAIN_ADVANTAGES],
		p->mask, p->weights, &cfg->clip, p->grad, &st);
	double entropy = ca_ppo_aggregate(T, p->weights, ent);
	double loss = pg - cfg->entropy_coef * entropy, kl = 0;
	if (cfg->kl_coef != 0) {
		double *dkl = ca_xmalloc(sizeof(double) * T);
		ca_ppo_kl_penalty(cfg->kl_type, T, logp, p->field[CA_TRAIN_REF_LOGPROBS], x, dkl);
		kl = ca_ppo_aggregate(T, p->weights, x);
		loss += cfg->kl_coef * kl;
		for (size_t i = 0; i < T; i++)
			p->grad[i] += cfg->kl_coef * p->weights[i] * dkl[i];
		free(dkl);
	}
	ca_train_to_engine(p, p->grad, grad_e);
	float *dent = NULL;
	if (cfg->entropy_coef != 0) {
		for (size_t i = 0; i < T; i++)
			x[i] = -cfg->entropy_coef * p->weights[i];
		dent = ent_e;  /* the entropies are no longer needed */
		ca_train_to_engine(p, x, dent);
	}
	ca_train_engine_backward(e, grad_e, dent, NULL);
	double norm = ca_train_engine_adamw(e, &cfg->train.adamw);
	/*
	 * Over the ranks: the aggregates are sums already (the weights are the
	 * whole mini-batch's); the token shares are weighted by tokens; each
	 * rank's ratio extremes travel in its own two slots.
	 */
	int world = e->dist.world, rank = e->dist.rank;
	size_t n = 10 + 2 * (size_t)world;
	double *y = ca_xcalloc(n, sizeof(double)), tok = (double)st.tokens;
	double mine[10] = {loss, pg, entropy, kl, st.pg_clipfrac * tok, st.ratio_clipped_high_frac * tok,
		st.ratio_clipped_low_frac * tok, st.pg_clipfrac_lower * tok, st.approx_kl * tok, tok};
	memcpy(y, mine, sizeof mine);
	y[10 + 2 * rank] = st.tokens ? st.ratio_min : INFINITY;
	y[11 + 2 * rank] = st.tokens ? st.ratio_max : -INFINITY;
	if (world > 1) {
		ca_train_sum(e, y, n);
		for (int k = 4; k < 9; k++)
			y[k] = y[9] > 0 ? y[k] / y[9] : 0;
	} else {
		/* One rank: the shares as ca_ppo_policy_loss gave them, exactly. */
		y[4] = st.pg_clipfrac, y[5] = st.ratio_clipped_high_frac, y[6] = st.ratio_clipped_low_frac;
		y[7] = st.pg_clipfrac_lower, y[8] = st.approx_kl;
	}
	t->loss += y[0];
	t->pg_loss += y[1];
	t->entropy += y[2];
	t->kl += y[3];
	t->pg_clipfrac += y[4];
	t->clipped_high += y[5];
	t->clipped_low += y[6];
	t->pg_clipfrac_lower += y[7];
	t->approx_kl += y[8];
	t->grad_norm += norm;
	for (int r = 0; r < world; r++) {
		if (y[10 + 2 * r] < t->ratio_min)
			t->ratio_min = y[10 + 2 * r];
		if (y[11 + 2 * r] > t->ratio_max)
			t->ratio_max = y[11 + 2 * r];
	}
	free(y);
}

/* A step's start: fresh totals, the advantages whitened when asked. */
static void begin(struct ca_train_data *d, void *ctx)
{
	struct totals *t = ctx;
	*t = (struct totals){.cfg = t->cfg, .ratio_min = INFINITY, .ratio_max = -INFINITY};
	if (t->cfg->whiten)
		whiten(d);
}

static jv stats(struct ca_train_engine *e, const struct ca_train_data *d, int updates, jv r, void *ctx)
{
	(void)e;
	(void)d;
	const struct totals *t = ctx;
	r = jv_object_set(r, jv_string("loss"), ca_train_mean(t->loss, updates));
	r = jv_object_set(r, jv_string("pg_loss"), ca_train_mean(t->pg_loss, updates));
	r = jv_object_set(r, jv_string("pg_clipfrac"), ca_train_mean(t->pg_clipfrac, updates));
	r = jv_object_set(r, jv_string("pg_clipfrac_lower"), ca_train_mean(t->pg_clipfrac_lower, updates));
	r = jv_object_set(r, jv_string("ratio_clipped_high_frac"), ca_train_mean(t->clipped_high, updates));
	r = jv_object_set(r, jv_string("ratio_clipped_low_frac"), ca_train_mean(t->clipped_low, updates));
	r = jv_object_set(r, jv_string("approx_kl"), ca_train_mean(t->approx_kl, updates));
	r = jv_object_set(r, jv_string("entropy"), ca_train_mean(t->entropy, updates));
	if (t->cfg->kl_coef != 0)
		r = jv_object_set(r, jv_string("kl"), ca_train_mean(t->kl, updates));
	r = jv_object_set(r, jv_string("grad_norm"), ca_train_mean(t->grad_norm, updates));
	r = jv_object_set(r, jv_string("ratio_min"), isfinite(t->ratio_min) ? jv_number(t->ratio_min) : jv_null());
	return jv_object_set(r, jv_string("ratio_max"), isfinite(t->ratio_max) ? jv_number(t->ratio_max) : jv_null());
}

int main(int argc, char **argv)
{
	enum { OPT_ADV = 1, OPT_CLIP_HIGH, OPT_CLIP_LOW, OPT_DUAL, OPT_ENT, OPT_KL, OPT_KL_TYPE,
		OPT_WHITEN };
	static const struct option longopts[] = {
		{"advantages", required_argument, NULL, OPT_ADV},
		{"clip-high", required_argument, NULL, OPT_CLIP_HIGH},
		{"clip-low", required_argument, NULL, OPT_CLIP_LOW},
		{"dual-clip", required_argument, NULL, OPT_DUAL},
		{"entropy-coef", required_argument, NULL, OPT_ENT},
		{"help", no_argument, NULL, 'h'},
		{"kl-coef", required_argument, NULL, OPT_KL},
		{"kl-type", required_argument, NULL, OPT_KL_TYPE},
		{"whiten", no_argument, NULL, OPT_WHITEN},
		CA_TRAIN_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct config cfg = {
		.clip = {.low = 0.2, .high = 0.28, .dual = INFINITY},
		.kl_type = CA_PPO_KL_LOW_VAR, .advantages = "advantages",
	};
	ca_train_opts_default(&cfg.train, 3e-6);
	int c;
	ca_err_init(argv[0]);
	while ((c = ca_train_getopt(&cfg.train, argc, argv, longopts)) != -1) {
		switch (c) {
		case OPT_ADV: cfg.advantages = optarg; break;
		case OPT_CLIP_HIGH: cfg.clip.high = ca_opt_double("--clip-high", optarg, 0, 1e9); break;
		case OPT_CLIP_LOW: cfg.clip.low = ca_opt_double("--clip-low", optarg, 0, 1); break;
		case OPT_DUAL: cfg.clip.dual = ca_opt_double("--dual-clip", optarg, 1.000001, 1e9); break;
		case OPT_ENT: cfg.entropy_coef = ca_opt_double("--entropy-coef", optarg, -1e3, 1e3); break;
		case OPT_KL: cfg.kl_coef = ca_opt_double("--kl-coef", optarg, 0, 1e3); break;
		case OPT_KL_TYPE:
			if ((cfg.kl_type = ca_ppo_kl_parse(optarg)) < 0) {
				ca_err_warn("--kl-type: unknown type '%s' (kl, abs, mse, low_var_kl)", optarg);
				ca_opt_bad_usage();
			}
			break;
		case OPT_WHITEN: cfg.whiten = 1; break;
		default: ca_opt_common(c, usage_text);
		}
	}
	struct totals t = {.cfg = &cfg};
	struct ca_train_step step = {
		.command = "ca-ppo-step", .critic = 0, .begin = begin, .update = update, .stats = stats, .ctx = &t,
		.names = {
			[CA_TRAIN_LOGPROBS] = "logprobs",
			[CA_TRAIN_ADVANTAGES] = cfg.advantages,
			[CA_TRAIN_REF_LOGPROBS] = cfg.kl_coef != 0 ? "ref_logprobs" : NULL,
		},
	};
	return ca_train_start(&step, &cfg.train, usage_text, argc - optind, argv + optind);
}
