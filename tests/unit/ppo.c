/*
 * Unit tests for lib/ppo: hand-computed cases of verl's definitions, an
 * independent reference written the way verl writes it (padded rows,
 * masked means; verl-project/verl core_algos.py agg_loss and
 * torch_functional.py masked_mean), and finite-difference checks of every
 * gradient.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ppo.h"

static int failures, checks;

#define CHECK(cond) do { \
	checks++; \
	if (!(cond)) { \
		fprintf(stderr, "test-ppo: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

static int close_to(double a, double b, double tol)
{
	return fabs(a - b) <= tol * (1 + fabs(b));
}

/* Relative: |a - b| <= tol |b|, the measure the issue sets for agreement with verl (1e-9). */
#define REL(a, b, tol) do { \
	double a_ = (a), b_ = (b); \
	checks++; \
	if (!(fabs(a_ - b_) <= (tol) * fabs(b_))) { \
		fprintf(stderr, "test-ppo: %s:%d: %s = %.17g, wanted %.17g (relative %.3g)\n", __FILE__, __LINE__, \
			#a, a_, b_, fabs(a_ - b_) / fabs(b_)); \
		failures++; \
	} \
} while (0)

#define NEAR(a, b, tol) do { \
	double a_ = (a), b_ = (b); \
	checks++; \
	if (!close_to(a_, b_, tol)) { \
		fprintf(stderr, "test-ppo: %s:%d: %s = %.17g, wanted %.17g\n", __FILE__, __LINE__, \
			#a, a_, b_); \
		failures++; \
	} \
} while (0)

/* A deterministic generator so failures reproduce. */
static unsigned long long rng_state = 0x9e3779b97f4a7c15ULL;
static double uniform(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (double)(rng_state >> 11) / 9007199254740992.0;
}

static void test_names(void)
{
	CHECK(ca_ppo_agg_parse("token-mean") == CA_PPO_TOKEN_MEAN);
	CHECK(ca_ppo_agg_parse("seq-mean-token-mean") == CA_PPO_SEQ_MEAN_TOKEN_MEAN);
	CHECK(ca_ppo_agg_parse("seq-mean-token-sum") == CA_PPO_SEQ_MEAN_TOKEN_SUM);
	CHECK(ca_ppo_agg_parse("seq-mean-token-sum-norm") == CA_PPO_SEQ_MEAN_TOKEN_SUM_NORM);
	CHECK(strcmp(ca_ppo_agg_name(CA_PPO_SEQ_MEAN_TOKEN_SUM_NORM), "seq-mean-token-sum-norm") == 0);
	CHECK(ca_ppo_agg_parse("token-sum") == -1);
	CHECK(strcmp(ca_ppo_agg_name(CA_PPO_SEQ_MEAN_TOKEN_SUM), "seq-mean-token-sum") == 0);
	CHECK(ca_ppo_kl_parse("k3") == CA_PPO_KL_LOW_VAR);
	CHECK(ca_ppo_kl_parse("low_var_kl") == CA_PPO_KL_LOW_VAR);
	CHECK(ca_ppo_kl_parse("mse") == CA_PPO_KL_MSE);
	CHECK(ca_ppo_kl_parse("full") == -1);
	CHECK(strcmp(ca_ppo_kl_name(CA_PPO_KL_ABS), "abs") == 0);
}

/*
 * Three sequences, the middle one with no policy token: verl leaves it out
 * of both seq-mean modes; token-mean divides by the count alone, a row's
 * token mean by its count + 1e-8.
 */
static void test_agg_weights(void)
{
	const size_t start[] = {0, 3, 5, 9};
	const unsigned char mask[] = {1, 1, 0, 0, 0, 1, 0, 1, 1};
	const double x[] = {1, 2, 100, 100, 100, 3, 100, 4, 5};
	double w[9];
	CHECK(ca_ppo_agg_weights(CA_PPO_TOKEN_MEAN, 3, start, mask, w) == 5);
	REL(ca_ppo_aggregate(9, w, x), 15 / 5.0, 1e-15);
	CHECK(w[2] == 0 && w[6] == 0);
	ca_ppo_agg_weights(CA_PPO_SEQ_MEAN_TOKEN_SUM, 3, start, mask, w);
	REL(ca_ppo_aggregate(9, w, x), (3 + 12) / 2.0, 1e-15);
	ca_ppo_agg_weights(CA_PPO_SEQ_MEAN_TOKEN_MEAN, 3, start, mask, w);
	REL(ca_ppo_aggregate(9, w, x), (3 / (2 + 1e-8) + 12 / (3 + 1e-8)) / 2, 1e-15);
	/* seq-mean-token-sum over the horizon: the longest sequence (4) unless given. */
	ca_ppo_agg_weights(CA_PPO_SEQ_MEAN_TOKEN_SUM_NORM, 3, start, mask, w);
	REL(ca_ppo_aggregate(9, w, x), (3 + 12) / 2.0 / 4, 1e-15);
	ca_ppo_agg_weights_of(CA_PPO_SEQ_MEAN_TOKEN_SUM_NORM, 3, start, mask, 5, 2, 100, w);
	REL(ca_ppo_aggregate(9, w, x), (3 + 12) / 2.0 / 100, 1e-15);
	size_t nonempty, longest;
	CHECK(ca_ppo_agg_counts(3, start, mask, &nonempty, &longest) == 5 && nonempty == 2 && longest == 4);
	/* One token: the epsilons are the whole difference (1e-8 relative). */
	const size_t one[] = {0, 1};
	const double y[] = {7};
	ca_ppo_agg_weights(CA_PPO_TOKEN_MEAN, 1, one, NULL, w);
	REL(ca_ppo_aggregate(1, w, y), 7, 1e-15);
	ca_ppo_agg_weights(CA_PPO_SEQ_MEAN_TOKEN_MEAN, 1, one, NULL, w);
	REL(ca_ppo_aggregate(1, w, y), 7 / (1 + 1e-8), 1e-15);
	/* No mask: every token counts. */
	ca_ppo_agg_weights(CA_PPO_SEQ_MEAN_TOKEN_MEAN, 3, start, NULL, w);
	REL(ca_ppo_aggregate(9, w, x), (103 / (3 + 1e-8) + 200 / (2 + 1e-8) + 112 / (4 + 1e-8)) / 3, 1e-15);
	/* Empty mask and empty batch: loss 0, no NaN. */
	const unsigned char none[] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
	for (int agg = 0; agg < 4; agg++) {
		CHECK(ca_ppo_agg_weights(agg, 3, start, none, w) == 0);
		CHECK(ca_ppo_aggregate(9, w, x) == 0);
	}
	const size_t zero[] = {0};
	CHECK(ca_ppo_agg_weights(CA_PPO_SEQ_MEAN_TOKEN_SUM, 0, zero, NULL, w) == 0);
}

static void test_policy_by_hand(void)
{
	/* Token 0 on-policy; 1 clipped above (A > 0); 2 clipped below (A < 0); 3 masked. */
	const double logp[] = {-1, -0.5, -2, -0.1};
	const double old[] = {-1, -1, -1.5, -3};
	const double adv[] = {1, 2, -1, 0.5};
	const unsigned char mask[] = {1, 1, 1, 0};
	const size_t start[] = {0, 4};
	double w[4], g[4];
	struct ca_ppo_clip clip = {0.2, 0.28, 3};
	struct ca_ppo_policy_stats st;
	ca_ppo_agg_weights(CA_PPO_TOKEN_MEAN, 1, start, mask, w);
	double loss = ca_ppo_policy_loss(4, logp, old, adv, mask, w, &clip, g, &st);
	NEAR(loss, (-1 - 2 * 1.28 + 0.8) / 3, 1e-14);
	NEAR(st.loss, loss, 0);
	NEAR(st.pg_clipfrac, 2 / 3.0, 1e-8);
	NEAR(st.ratio_clipped_high_frac, 1 / 3.0, 1e-8);
	NEAR(st.ratio_clipped_low_frac, 1 / 3.0, 1e-8);
	NEAR(st.pg_clipfrac_lower, 0, 0);
	NEAR(st.approx_kl, 0, 1e-15);
	NEAR(st.ratio_min, exp(-0.5), 1e-15);
	NEAR(st.ratio_max, exp(0.5), 1e-15);
	CHECK(st.tokens == 3);
	NEAR(g[0], -1 / 3.0, 1e-14);
	CHECK(g[1] == 0 && g[2] == 0 && g[3] == 0);

	/* Dual clip: A < 0 and ratio e^2 > c = 3 caps the loss at -A c. */
	const double logp2[] = {0}, old2[] = {-2}, adv2[] = {-1};
	ca_ppo_agg_weights(CA_PPO_TOKEN_MEAN, 1, (const size_t[]){0, 1}, NULL, w);
	loss = ca_ppo_policy_loss(1, logp2, old2, adv2, NULL, w, &clip, g, &st);
	NEAR(loss, 3, 1e-14);
	CHECK(g[0] == 0);
	NEAR(st.pg_clipfrac_lower, 1, 1e-8);
	NEAR(st.pg_clipfrac, 0, 0);  /* the unclipped term won the inner max */
	/* Without dual clip the same token pays A * ratio and keeps its gradient. */
	clip.dual = INFINITY;
	loss = ca_ppo_policy_loss(1, logp2, old2, adv2, NULL, w, &clip, g, &st);
	NEAR(loss, exp(2), 1e-8);
	NEAR(g[0], exp(2), 1e-8);
	NEAR(st.pg_clipfrac_lower, 0, 0);

	/* The log-ratio clamp at +-20: the ratio is e^20 and the gradient stops. */
	const double logp3[] = {0}, old3[] = {-30}, adv3[] = {1};
	clip.high = 1e12;
	loss = ca_ppo_policy_loss(1, logp3, old3, adv3, NULL, w, &clip, g, &st);
	NEAR(loss, -exp(20), 1e-8);
	CHECK(g[0] == 0);
	NEAR(st.approx_kl, -20, 1e-8);

	/* An empty mask: loss 0, gradient 0, ratios reported as 1. */
	const unsigned char none[] = {0, 0, 0, 0};
	ca_ppo_agg_weights(CA_PPO_TOKEN_MEAN, 1, start, none, w);
	clip = (struct ca_ppo_clip){0.2, 0.28, 3};
	loss = ca_ppo_policy_loss(4, logp, old, adv, none, w, &clip, g, &st);
	CHECK(loss == 0 && st.tokens == 0 && st.pg_clipfrac == 0 && st.ratio_min == 1 && st.ratio_max == 1);
	CHECK(g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0);
}

/* Ties: inside the clip range the two branches of the max are equal, and
 * torch's half-and-half rule still sums to the full gradient. */
static void test_policy_ties(void)
{
	const double logp[] = {log(1.28)}, old[] = {0}, adv[] = {1};
	double w[1] = {1}, g[1];
	struct ca_ppo_clip clip = {0.2, 0.28, INFINITY};
	ca_ppo_policy_loss(1, logp, old, adv, NULL, w, &clip, g, NULL);
	/* ratio == 1 + high up to rounding: either side of the kink is -A ratio or 0. */
	CHECK(close_to(g[0], -1.28, 1e-12) || g[0] == 0 || close_to(g[0], -0.64, 1e-12));
}

/*
 * verl's formulas on padded [rows, cols] matrices, written independently:
 * masked_mean is the masked sum over the count + 1e-8; agg_loss's
 * token-mean the masked sum over the count; its seq-mean modes the mean
 * over the rows with a token of each row's sum (seq-mean-token-sum) or sum
 * over count + 1e-8 (seq-mean-token-mean); seq-mean-token-sum-norm is
 * seq-mean-token-sum over the padded width (cols). An empty batch gives 0
 * here where verl gives 0/0, as ca does on purpose.
 */
struct padded {
	int rows, cols;
	double *logp, *old, *adv, *mask;
};

static double masked_mean(const double *x, const double *mask, int n)
{
	double s = 0, m = 0;
	for (int i = 0; i < n; i++) {
		s += x[i] * mask[i];
		m += mask[i];
	}
	return s / (m + 1e-8);
}

static double verl_agg(const struct padded *p, const double *loss, int agg)
{
	double all = 0, tokens = 0, rows = 0, total = 0;
	for (int r = 0; r < p->rows; r++) {
		double s = 0, m = 0;
		for (int c = 0; c < p->cols; c++) {
			s += loss[r * p->cols + c] * p->mask[r * p->cols + c];
			m += p->mask[r * p->cols + c];
		}
		all += s;
		tokens += m;
		if (m > 0) {
			rows++;
			total += agg == CA_PPO_SEQ_MEAN_TOKEN_MEAN ? s / (m + 1e-8) : s;
		}
	}
	if (agg == CA_PPO_TOKEN_MEAN)
		return tokens > 0 ? all / tokens : 0;
	double mean = rows > 0 ? total / rows : 0;
	return agg == CA_PPO_SEQ_MEAN_TOKEN_SUM_NORM ? mean / p->cols : mean;
}

static double verl_policy_loss(const struct padded *p, const struct ca_ppo_clip *clip, int agg,
	double *pg_clipfrac, double *pg_clipfrac_lower, double *kl)
{
	int n = p->rows * p->cols;
	double *losses = malloc(n * sizeof *losses), *gt = malloc(n * sizeof *gt);
	double *dual = malloc(n * sizeof *dual), *negkl = malloc(n * sizeof *negkl);
	for (int i = 0; i < n; i++) {
		double nk = fmin(fmax(p->logp[i] - p->old[i], -20), 20);
		double ratio = exp(nk);
		double l1 = -p->adv[i] * ratio;
		double l2 = -p->adv[i] * fmin(fmax(ratio, 1 - clip->low), 1 + clip->high);
		double cl1 = fmax(l1, l2);
		double l3 = -p->adv[i] * clip->dual;
		double cl2 = fmin(l3, cl1);
		losses[i] = p->adv[i] < 0 ? cl2 : cl1;
		gt[i] = l2 > l1;
		dual[i] = cl1 > l3 && p->adv[i] < 0;
		negkl[i] = -nk;
	}
	double loss = verl_agg(p, losses, agg);
	*pg_clipfrac = masked_mean(gt, p->mask, n);
	*pg_clipfrac_lower = masked_mean(dual, p->mask, n);
	*kl = masked_mean(negkl, p->mask, n);
	free(losses);
	free(gt);
	free(dual);
	free(negkl);
	return loss;
}

static double verl_value_loss(const struct padded *p, const double *v, const double *ret,
	const double *oldv, double clip, int agg)
{
	int n = p->rows * p->cols;
	double *losses = malloc(n * sizeof *losses);
	for (int i = 0; i < n; i++) {
		double vc = fmax(fmin(v[i], oldv[i] + clip), oldv[i] - clip);
		losses[i] = fmax((v[i] - ret[i]) * (v[i] - ret[i]), (vc - ret[i]) * (vc - ret[i]));
	}
	double loss = 0.5 * verl_agg(p, losses, agg);
	free(losses);
	return loss;
}

/*
 * Random batches: rows of different lengths packed for ca, padded for the
 * reference; compare losses and check gradients by central differences.
 */
static void test_random(void)
{
	for (int trial = 0; trial < 60; trial++) {
		int rows = 1 + (int)(uniform() * 5), cols = 1 + (int)(uniform() * 9);
		int agg = trial % 4;
		struct padded p = {rows, cols, NULL, NULL, NULL, NULL};
		int n = rows * cols;
		p.logp = calloc(n, sizeof(double));
		p.old = calloc(n, sizeof(double));
		p.adv = calloc(n, sizeof(double));
		p.mask = calloc(n, sizeof(double));
		double *v = calloc(n, sizeof(double)), *ret = calloc(n, sizeof(double));
		double *oldv = calloc(n, sizeof(double));
		size_t *start = calloc(rows + 1, sizeof(size_t));
		/* Packed copies: each row contributes its first len[r] columns. */
		double *logp = calloc(n, sizeof(double)), *old = calloc(n, sizeof(double));
		double *adv = calloc(n, sizeof(double)), *pv = calloc(n, sizeof(double));
		double *pret = calloc(n, sizeof(double)), *poldv = calloc(n, sizeof(double));
		unsigned char *mask = calloc(n, 1);
		size_t k = 0;
		for (int r = 0; r < rows; r++) {
			int len = 1 + (int)(uniform() * cols);
			/* Every fifth batch has a row without policy tokens, and some are all such rows. */
			int masked_row = trial % 5 == 0 && (r == 0 || trial % 15 == 0);
			start[r] = k;
			for (int c = 0; c < cols; c++) {
				int i = r * cols + c;
				p.old[i] = -3 * uniform();
				p.logp[i] = p.old[i] + (uniform() - 0.5) * (trial < 50 ? 1.2 : 60);
				p.adv[i] = (uniform() - 0.5) * 4;
				p.mask[i] = c < len && uniform() < 0.8 && !masked_row;
				oldv[i] = uniform() * 2 - 1;
				v[i] = oldv[i] + (uniform() - 0.5);
				ret[i] = uniform() * 2 - 1;
				if (c < len) {
					logp[k] = p.logp[i];
					old[k] = p.old[i];
					adv[k] = p.adv[i];
					pv[k] = v[i];
					pret[k] = ret[i];
					poldv[k] = oldv[i];
					mask[k] = (unsigned char)p.mask[i];
					k++;
				}
			}
		}
		start[rows] = k;
		double *w = calloc(k + 1, sizeof(double)), *g = calloc(k + 1, sizeof(double));
		double *x = calloc(k + 1, sizeof(double));
		/* The horizon is the padded width, which may exceed the longest row. */
		size_t nonempty, tokens = ca_ppo_agg_counts((size_t)rows, start, mask, &nonempty, NULL);
		ca_ppo_agg_weights_of(agg, (size_t)rows, start, mask, (double)tokens, (double)nonempty, cols, w);
		struct ca_ppo_clip clip = {0.2, 0.28, trial % 2 ? 3 : INFINITY};
		struct ca_ppo_clip refclip = clip;
		if (!isfinite(refclip.dual))
			refclip.dual = 1e300;
		struct ca_ppo_policy_stats st;
		double loss = ca_ppo_policy_loss(k, logp, old, adv, mask, w, &clip, g, &st);
		double ref_pg_clipfrac, ref_pg_clipfrac_lower, ref_kl;
		double ref = verl_policy_loss(&p, &refclip, agg, &ref_pg_clipfrac, &ref_pg_clipfrac_lower, &ref_kl);
		if (ref == 0)
			CHECK(loss == 0);
		else
			REL(loss, ref, 1e-9);
		NEAR(st.pg_clipfrac, ref_pg_clipfrac, 1e-12);
		NEAR(st.pg_clipfrac_lower, ref_pg_clipfrac_lower, 1e-12);
		NEAR(st.approx_kl, ref_kl, 1e-12);
		NEAR(st.ratio_clipped_high_frac + st.ratio_clipped_low_frac, st.pg_clipfrac, 1e-12);

		/* Gradient by central differences, away from the kinks. */
		const double h = 1e-6;
		for (size_t i = 0; i < k; i++) {
			double d = logp[i] - old[i], ratio = exp(d);
			if (fabs(ratio - 0.8) < 1e-4 || fabs(ratio - 1.28) < 1e-4 || fabs(fabs(d) - 20) < 1e-4
			    || (isfinite(clip.dual) && fabs(ratio - 3) < 1e-4))
				continue;
			double keep = logp[i];
			logp[i] = keep + h;
			double up = ca_ppo_policy_loss(k, logp, old, adv, mask, w, &clip, NULL, NULL);
			logp[i] = keep - h;
			double down = ca_ppo_policy_loss(k, logp, old, adv, mask, w, &clip, NULL, NULL);
			logp[i] = keep;
			double fd = (up - down) / (2 * h);
			/* Rounding of a loss of size |up| limits the difference's precision. */
			double slack = 64 * 2.2e-16 * (fabs(up) + fabs(down)) / h;
			checks++;
			if (fabs(fd - g[i]) > 1e-6 * (1 + fabs(fd)) + slack) {
				fprintf(stderr, "test-ppo: policy grad trial %d token %zu: %.12g vs fd %.12g\n",
					trial, i, g[i], fd);
				failures++;
			}
		}

		/* Value loss, clipped and not, against the reference and by differences. */
		double clipv = trial % 2 ? 0.2 : INFINITY;
		double cf;
		double vl = ca_ppo_value_loss(k, pv, pret, poldv, mask, w, clipv, g, &cf);
		double vref = verl_value_loss(&p, v, ret, oldv, isfinite(clipv) ? clipv : 1e300, agg);
		if (vref == 0)
			CHECK(vl == 0);
		else
			REL(vl, vref, 1e-9);
		for (size_t i = 0; i < k; i++) {
			if (isfinite(clipv) && fabs(fabs(pv[i] - poldv[i]) - clipv) < 1e-4)
				continue;
			double keep = pv[i];
			pv[i] = keep + h;
			double up = ca_ppo_value_loss(k, pv, pret, poldv, mask, w, clipv, NULL, NULL);
			pv[i] = keep - h;
			double down = ca_ppo_value_loss(k, pv, pret, poldv, mask, w, clipv, NULL, NULL);
			pv[i] = keep;
			double fd = (up - down) / (2 * h);
			checks++;
			if (fabs(fd - g[i]) > 1e-6 * (1 + fabs(fd))) {
				fprintf(stderr, "test-ppo: value grad trial %d token %zu: %.12g vs fd %.12g\n",
					trial, i, g[i], fd);
				failures++;
			}
		}

		/* NLL and the KL penalties by differences. */
		ca_ppo_nll_loss(k, logp, w, g);
		for (size_t i = 0; i < k; i++)
			CHECK(g[i] == -w[i]);
		for (int kind = 0; kind < 4; kind++) {
			ca_ppo_kl_penalty(kind, k, logp, old, x, g);
			for (size_t i = 0; i < k; i++) {
				double d = logp[i] - old[i];
				if (fabs(d) < 1e-4 || (kind == CA_PPO_KL_LOW_VAR && fabs(exp(-d) + d - 1 - 10) < 1e-3))
					continue;
				double a[1], b[1], lp[1] = {logp[i] + h}, lm[1] = {logp[i] - h};
				ca_ppo_kl_penalty(kind, 1, lp, old + i, a, NULL);
				ca_ppo_kl_penalty(kind, 1, lm, old + i, b, NULL);
				double fd = (a[0] - b[0]) / (2 * h);
				checks++;
				if (fabs(fd - g[i]) > 1e-5 * (1 + fabs(fd))) {
					fprintf(stderr, "test-ppo: kl %d grad trial %d token %zu: %.12g vs fd %.12g\n",
						kind, trial, i, g[i], fd);
					failures++;
				}
			}
		}
		free(p.logp); free(p.old); free(p.adv); free(p.mask);
		free(v); free(ret); free(oldv); free(start);
		free(logp); free(old); free(adv); free(pv); free(pret); free(poldv); free(mask);
		free(w); free(g); free(x);
	}
}

static void test_value_by_hand(void)
{
	const double v[] = {1, 2}, ret[] = {0, 0}, oldv[] = {0.5, 2.5};
	double w[2], g[2], cf;
	ca_ppo_agg_weights(CA_PPO_TOKEN_MEAN, 1, (const size_t[]){0, 2}, NULL, w);
	double loss = ca_ppo_value_loss(2, v, ret, oldv, NULL, w, 0.2, g, &cf);
	/* Token 0: unclipped (1) beats clipped (0.49); token 1: clipped 2.3^2 beats 4. */
	NEAR(loss, 0.5 * (1 + 2.3 * 2.3) / 2, 1e-14);
	NEAR(g[0], 0.5 * 2 / 2, 1e-14);
	CHECK(g[1] == 0);
	NEAR(cf, 0.5, 1e-8);
	loss = ca_ppo_value_loss(2, v, ret, oldv, NULL, w, INFINITY, g, &cf);
	NEAR(loss, 0.5 * (1 + 4) / 2, 1e-8);
	NEAR(g[1], 2 / 2.0, 1e-14);
	CHECK(cf == 0);
	/* The low-variance KL estimator at a few points. */
	double lp[] = {-1, -2, 0}, ref[] = {-1.5, -1, -30}, kl[3], kg[3];
	ca_ppo_kl_penalty(CA_PPO_KL_LOW_VAR, 3, lp, ref, kl, kg);
	NEAR(kl[0], exp(-0.5) + 0.5 - 1, 1e-15);
	NEAR(kl[1], exp(1) - 1 - 1, 1e-15);
	NEAR(kl[2], exp(-20) + 20 - 1 > 10 ? 10 : 0, 1e-15);  /* clamped at 10 */
	CHECK(kg[2] == 0);
}

int main(void)
{
	test_names();
	test_agg_weights();
	test_policy_by_hand();
	test_policy_ties();
	test_value_by_hand();
	test_random();
	if (failures) {
		fprintf(stderr, "test-ppo: %d of %d checks failed\n", failures, checks);
		return 1;
	}
	printf("test-ppo: %d checks passed\n", checks);
	return 0;
}
