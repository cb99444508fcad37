/* ppo: see ppo.h. */
#include <math.h>
#include <string.h>

#include "ppo.h"

#define ACTIVE(mask, i) (!(mask) || (mask)[i])

static const char *const agg_names[] = {
	[CA_PPO_TOKEN_MEAN] = "token-mean",
	[CA_PPO_SEQ_MEAN_TOKEN_MEAN] = "seq-mean-token-mean",
	[CA_PPO_SEQ_MEAN_TOKEN_SUM] = "seq-mean-token-sum",
	[CA_PPO_SEQ_MEAN_TOKEN_SUM_NORM] = "seq-mean-token-sum-norm",
};

int ca_ppo_agg_parse(const char *name)
{
	for (size_t i = 0; i < sizeof agg_names / sizeof agg_names[0]; i++)
		if (strcmp(name, agg_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *ca_ppo_agg_name(int agg)
{
	if (agg < 0 || (size_t)agg >= sizeof agg_names / sizeof agg_names[0])
		return "?";
	return agg_names[agg];
}

size_t ca_ppo_agg_counts(size_t nseq, const size_t *start, const unsigned char *mask, size_t *nonempty,
	size_t *longest)
{
	size_t tokens = 0, widest = 0;
	*nonempty = 0;
	for (size_t s = 0; s < nseq; s++) {
		size_t count = 0;
		for (size_t i = start[s]; i < start[s + 1]; i++)
			count += ACTIVE(mask, i) != 0;
		tokens += count;
		*nonempty += count > 0;
		if (start[s + 1] - start[s] > widest)
			widest = start[s + 1] - start[s];
	}
	if (longest)
		*longest = widest;
	return tokens;
}

size_t ca_ppo_agg_weights(int agg, size_t nseq, const size_t *start, const unsigned char *mask,
	double *weights)
{
	size_t nonempty, longest, tokens = ca_ppo_agg_counts(nseq, start, mask, &nonempty, &longest);
	ca_ppo_agg_weights_of(agg, nseq, start, mask, (double)tokens, (double)nonempty, (double)longest, weights);
	return tokens;
}

void ca_ppo_agg_weights_of(int agg, size_t nseq, const size_t *start, const unsigned char *mask, double tokens,
	double nonempty, double horizon, double *weights)
{
	for (size_t s = 0; s < nseq; s++) {
		size_t count = 0;
		for (size_t i = start[s]; i < start[s + 1]; i++)
			count += ACTIVE(mask, i) != 0;
		double w = 0;  /* a sequence without tokens is out of every mean (verl's sequence mask) */
		if (count > 0) {
			switch (agg) {
			case CA_PPO_SEQ_MEAN_TOKEN_MEAN:
				/* In verl's order: a row's sum over its count + 1e-8, then the mean over rows. */
				w = 1.0 / ((double)count + CA_PPO_MEAN_EPS) / nonempty;
				break;
			case CA_PPO_SEQ_MEAN_TOKEN_SUM:
				w = 1.0 / nonempty;
				break;
			case CA_PPO_SEQ_MEAN_TOKEN_SUM_NORM:
				/* verl divides the seq-mean by the horizon after it. */
				w = 1.0 / nonempty / horizon;
				break;
			default:
				w = 1.0 / tokens;
				break;
			}
		}
		for (size_t i = start[s]; i < start[s + 1]; i++)
			weights[i] = ACTIVE(mask, i) ? w : 0;
	}
}

double ca_ppo_aggregate(size_t n, const double *weights, const double *x)
{
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		if (weights[i] != 0)
			sum += weights[i] * x[i];
	return sum;
}

/* d max(a, b) / da under torch's rule: 1 when a wins, 1/2 on a tie. */
static double max_share(double a, double b)
{
	return a > b ? 1 : a == b ? 0.5 : 0;
}

static double clamp(double x, double lo, double hi)
{
	return x < lo ? lo : x > hi ? hi : x;
}

/* torch.clamp's gradient: 1 on the closed interval, else 0. */
static double clamp_passes(double x, double lo, double hi)
{
	return x >= lo && x <= hi;
}

/* A token the mask leaves out of a loss: 1, its gradient (if any) 0. */
static int masked_out(const unsigned char *mask, size_t i, double *grad)
{
	if (ACTIVE(mask, i))
		return 0;
	if (grad)
		grad[i] = 0;
	return 1;
}

double ca_ppo_policy_loss(size_t n, const double *logp, const double *old_logp,
	const double *advantages, const unsigned char *mask, const double *weights,
	const struct ca_ppo_clip *clip, double *grad, struct ca_ppo_policy_stats *stats)
{
	const double lo = 1 - clip->low, hi = 1 + clip->high, c = clip->dual;
	const int dual = isfinite(c);
	double loss = 0, kl = 0, clipped = 0, clipped_high = 0, clipped_low = 0, dual_clipped = 0;
	double rmin = INFINITY, rmax = -INFINITY;
	size_t tokens = 0;
	for (size_t i = 0; i < n; i++) {
		if (masked_out(mask, i, grad))
			continue;
		tokens++;
		double a = advantages[i];
		double raw = logp[i] - old_logp[i];
		double log_ratio = clamp(raw, -CA_PPO_LOG_RATIO_LIMIT, CA_PPO_LOG_RATIO_LIMIT);
		double ratio = exp(log_ratio);
		double l1 = -a * ratio;
		double l2 = -a * clamp(ratio, lo, hi);
		double l = l1 > l2 ? l1 : l2;   /* torch.maximum */
		/* dl/dratio through the max: both branches, each weighted by its share. */
		double dl = max_share(l1, l2) * -a + max_share(l2, l1) * -a * clamp_passes(ratio, lo, hi);
		int is_clipped = l2 > l1;
		double l3 = -a * c;
		int dual_on = 0;
		if (a < 0 && dual) {
			double m = l3 < l ? l3 : l;   /* torch.min(l3, l) */
			dual_on = l > l3;
			dl *= max_share(-l, -l3);     /* l's share of the minimum */
			l = m;
		}
		loss += weights[i] * l;
		if (grad)
			grad[i] = weights[i] * dl * ratio * clamp_passes(raw, -CA_PPO_LOG_RATIO_LIMIT,
				CA_PPO_LOG_RATIO_LIMIT);
		kl += -log_ratio;
		clipped += is_clipped;
		clipped_high += is_clipped && a > 0;
		clipped_low += is_clipped && a < 0;
		dual_clipped += dual_on;
		if (ratio < rmin)
			rmin = ratio;
		if (ratio > rmax)
			rmax = ratio;
	}
	if (stats) {
		double denominator = (double)tokens + CA_PPO_MEAN_EPS;
		stats->loss = loss;
		stats->pg_clipfrac = clipped / denominator;
		stats->ratio_clipped_high_frac = clipped_high / denominator;
		stats->ratio_clipped_low_frac = clipped_low / denominator;
		stats->pg_clipfrac_lower = dual_clipped / denominator;
		stats->approx_kl = kl / denominator;
		stats->ratio_min = tokens ? rmin : 1;
		stats->ratio_max = tokens ? rmax : 1;
		stats->tokens = tokens;
	}
	return loss;
}

double ca_ppo_value_loss(size_t n, const double *values, const double *returns,
	const double *old_values, const unsigned char *mask, const double *weights, double clip,
	double *grad, double *clipfrac)
{
	const int clipping = old_values && isfinite(clip);
	double loss = 0, clipped = 0;
	size_t tokens = 0;
	for (size_t i = 0; i < n; i++) {
		if (masked_out(mask, i, grad))
			continue;
		tokens++;
		double v = values[i], r = returns[i];
		double l1 = (v - r) * (v - r), g1 = 2 * (v - r);
		double l = l1, g = g1;
		if (clipping) {
			/* verl's clip_by_value: max(min(v, old + clip), old - clip). */
			double top = old_values[i] + clip, bottom = old_values[i] - clip;
			double m = v < top ? v : top;
			double dm = max_share(-v, -top);
			double vc = m > bottom ? m : bottom;
			double dvc = dm * max_share(m, bottom);
			double l2 = (vc - r) * (vc - r), g2 = 2 * (vc - r) * dvc;
			l = l1 > l2 ? l1 : l2;
			g = max_share(l1, l2) * g1 + max_share(l2, l1) * g2;
			clipped += l2 > l1;
		}
		loss += weights[i] * l;
		if (grad)
			grad[i] = 0.5 * weights[i] * g;
	}
	if (clipfrac)
		*clipfrac = clipped / ((double)tokens + CA_PPO_MEAN_EPS);
	return 0.5 * loss;
}

double ca_ppo_nll_loss(size_t n, const double *logp, const double *weights, double *grad)
{
	double loss = 0;
	for (size_t i = 0; i < n; i++) {
		if (weights[i] != 0)
			loss -= weights[i] * logp[i];
		if (grad)
			grad[i] = -weights[i];
	}
	return loss;
}

static const struct {
	const char *name;
	int kind;
} kl_names[] = {
	{"kl", CA_PPO_KL_K1}, {"k1", CA_PPO_KL_K1}, {"abs", CA_PPO_KL_ABS},
	{"mse", CA_PPO_KL_MSE}, {"k2", CA_PPO_KL_MSE},
	{"low_var_kl", CA_PPO_KL_LOW_VAR}, {"k3", CA_PPO_KL_LOW_VAR},
};

int ca_ppo_kl_parse(const char *name)
{
	for (size_t i = 0; i < sizeof kl_names / sizeof kl_names[0]; i++)
		if (strcmp(name, kl_names[i].name) == 0)
			return kl_names[i].kind;
	return -1;
}

const char *ca_ppo_kl_name(int kind)
{
	for (size_t i = 0; i < sizeof kl_names / sizeof kl_names[0]; i++)
		if (kl_names[i].kind == kind)
			return kl_names[i].name;
	return "?";
}

void ca_ppo_kl_penalty(int kind, size_t n, const double *logp, const double *ref_logp,
	double *kl, double *grad)
{
	for (size_t i = 0; i < n; i++) {
		double d = logp[i] - ref_logp[i], k, g;
		switch (kind) {
		case CA_PPO_KL_ABS:
			k = fabs(d);
			g = d > 0 ? 1 : d < 0 ? -1 : 0;
			break;
		case CA_PPO_KL_MSE:
			k = 0.5 * d * d;
			g = d;
			break;
		case CA_PPO_KL_LOW_VAR: {
			/* verl: kl = clamp(ref - logp, -20, 20); clamp(exp(kl) - kl - 1, -10, 10). */
			double raw = -d;
			double x = clamp(raw, -20, 20);
			double ratio = exp(x);
			double kld = ratio - x - 1;
			k = clamp(kld, -10, 10);
			/* dk/dlogp = dk/dkld * dkld/dx * dx/draw * draw/dlogp */
			g = clamp_passes(kld, -10, 10) * (ratio - 1) * clamp_passes(raw, -20, 20) * -1;
			break;
		}
		default:
			k = d;
			g = 1;
			break;
		}
		kl[i] = k;
		if (grad)
			grad[i] = g;
	}
}
