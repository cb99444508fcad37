/* Unit tests of lib/rl: GAE by hand, the masked-tokens-removed equivalence, moments and whitening as verl's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "rl.h"

static int failures;
#define CLOSE(a, b) do { double a_ = (a), b_ = (b); if (!(fabs(a_ - b_) <= 1e-12 * fmax(1, fabs(b_)))) { \
	fprintf(stderr, "%s:%d: %s = %.17g, want %.17g\n", __FILE__, __LINE__, #a, a_, b_); failures++; } } while (0)
/* Relative, tight enough that an epsilon of 1e-8 on a count of a few shows. */
#define REL(a, b) do { double a_ = (a), b_ = (b); if (!(fabs(a_ - b_) <= 1e-14 * fabs(b_))) { \
	fprintf(stderr, "%s:%d: %s = %.17g, want %.17g\n", __FILE__, __LINE__, #a, a_, b_); failures++; } } while (0)
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

int main(void)
{
	/* By hand: gamma 1, lambda 0.95, outcome reward 1 on the last policy token. */
	double values[] = {0.5, 9.0, 0.1, 0.2}, rewards[4], adv[4], ret[4];
	unsigned char mask[] = {1, 0, 1, 1};
	CLOSE(ca_rl_outcome_rewards(4, mask, 1, rewards), 3);
	ca_rl_gae(4, values, rewards, mask, 1, 0.95, adv, ret);
	CLOSE(adv[3], 0.8);                      /* 1 + 0 - 0.2 */
	CLOSE(adv[2], 0.1 + 0.95 * 0.8);         /* 0 + 0.2 - 0.1 + 0.95 * A3 */
	CLOSE(adv[1], 0);                        /* masked */
	CLOSE(adv[0], -0.4 + 0.95 * adv[2]);     /* next value is token 2's, not token 1's */
	CLOSE(ret[0], adv[0] + 0.5);
	CLOSE(ret[1], 0);

	/* Masked tokens removed gives the same advantages. */
	double v2[] = {0.5, 0.1, 0.2}, r2[3], a2[3];
	ca_rl_outcome_rewards(3, NULL, 1, r2);
	ca_rl_gae(3, v2, r2, NULL, 1, 0.95, a2, NULL);
	CLOSE(a2[0], adv[0]);
	CLOSE(a2[1], adv[2]);
	CLOSE(a2[2], adv[3]);

	/* gamma < 1: delta uses the discounted next value. */
	double v3[] = {1, 2}, r3[] = {0.5, 1}, a3[2];
	ca_rl_gae(2, v3, r3, NULL, 0.9, 0.5, a3, NULL);
	CLOSE(a3[1], 1 - 2);
	CLOSE(a3[0], 0.5 + 0.9 * 2 - 1 + 0.9 * 0.5 * a3[1]);

	/* All masked: no decision, reward dropped, all zeros. */
	unsigned char none[] = {0, 0};
	CLOSE(ca_rl_outcome_rewards(2, none, 1, r3), -1);
	ca_rl_gae(2, v3, r3, none, 1, 0.95, a3, NULL);
	CLOSE(a3[0], 0);
	CLOSE(a3[1], 0);

	/*
	 * Moments over a batch of two arrays, masked entries ignored, with
	 * verl's epsilons: masked_mean divides by count + 1e-8, masked_var is
	 * the masked mean of the squared deviations (count + 1e-8 again) times
	 * count / (count - 1), whitening divides by sqrt(var + 1e-8).
	 */
	double x1[] = {1, 100, 2}, x2[] = {3, 4};
	unsigned char m1[] = {1, 0, 1};
	struct ca_rl_moments m = {0};
	ca_rl_moments_add(&m, 3, x1, m1);
	ca_rl_moments_add(&m, 2, x2, NULL);
	ca_rl_moments_add_centered(&m, 3, x1, m1);
	ca_rl_moments_add_centered(&m, 2, x2, NULL);
	double mean = 10 / (4 + 1e-8), var = -1;
	double squares = (1 - mean) * (1 - mean) + (2 - mean) * (2 - mean) + (3 - mean) * (3 - mean)
		+ (4 - mean) * (4 - mean);
	REL(ca_rl_moments_mean(&m), mean);
	CHECK(ca_rl_moments_var(&m, &var) == 0);
	REL(var, squares / (4 + 1e-8) * (4 / 3.0));
	double w[3];
	ca_rl_whiten(3, x1, m1, mean, var, w);
	REL(w[0], (1 - mean) / sqrt(var + 1e-8));
	CLOSE(w[1], 0);

	/* Two tokens: the epsilons are the whole difference from the plain formulas. */
	double two[] = {0, 1};
	struct ca_rl_moments t = {0};
	ca_rl_moments_add(&t, 2, two, NULL);
	ca_rl_moments_add_centered(&t, 2, two, NULL);
	REL(ca_rl_moments_mean(&t), 1 / (2 + 1e-8));
	CHECK(ca_rl_moments_var(&t, &var) == 0);
	double tm = 1 / (2 + 1e-8);
	REL(var, (tm * tm + (1 - tm) * (1 - tm)) / (2 + 1e-8) * 2);

	/* One element, or none: verl raises, and so does ca_rl_moments_var. */
	struct ca_rl_moments one = {0}, empty = {0};
	ca_rl_moments_add(&one, 1, x2, NULL);
	ca_rl_moments_add_centered(&one, 1, x2, NULL);
	var = 42;
	CHECK(ca_rl_moments_var(&one, &var) == -1 && var == 42);
	CHECK(ca_rl_moments_var(&empty, &var) == -1);
	CLOSE(ca_rl_moments_mean(&empty), 0);
	if (failures)
		fprintf(stderr, "test-rl: %d failures\n", failures);
	return failures != 0;
}
