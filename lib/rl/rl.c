/* rl: see rl.h. */
#include <math.h>
#include <string.h>

#include "rl.h"

#define MASKED(mask, i) ((mask) && !(mask)[i])

void ca_rl_gae(size_t n, const double *values, const double *rewards, const unsigned char *mask,
	double gamma, double lambda, double *advantages, double *returns)
{
	double next_value = 0, next_advantage = 0;
	for (size_t k = n; k-- > 0;) {
		if (MASKED(mask, k)) {
			advantages[k] = 0;
			if (returns)
				returns[k] = 0;
			continue;
		}
		double delta = rewards[k] + gamma * next_value - values[k];
		double a = delta + gamma * lambda * next_advantage;
		advantages[k] = a;
		if (returns)
			returns[k] = a + values[k];
		next_value = values[k];
		next_advantage = a;
	}
}

long ca_rl_outcome_rewards(size_t n, const unsigned char *mask, double reward, double *rewards)
{
	memset(rewards, 0, n * sizeof *rewards);
	for (size_t k = n; k-- > 0;) {
		if (!MASKED(mask, k)) {
			rewards[k] = reward;
			return (long)k;
		}
	}
	return -1;
}

void ca_rl_moments_add(struct ca_rl_moments *m, size_t n, const double *x, const unsigned char *mask)
{
	for (size_t i = 0; i < n; i++) {
		if (MASKED(mask, i))
			continue;
		m->count++;
		m->sum += x[i];
	}
}

double ca_rl_moments_mean(const struct ca_rl_moments *m)
{
	return m->sum / ((double)m->count + CA_RL_MEAN_EPS);
}

void ca_rl_moments_add_centered(struct ca_rl_moments *m, size_t n, const double *x, const unsigned char *mask)
{
	double mean = ca_rl_moments_mean(m);
	for (size_t i = 0; i < n; i++) {
		if (MASKED(mask, i))
			continue;
		double d = x[i] - mean;
		m->squares += d * d;
	}
}

int ca_rl_moments_var(const struct ca_rl_moments *m, double *var)
{
	if (m->count < 2)
		return -1;
	double n = (double)m->count;
	/* In verl's order: the masked mean of the squares, then Bessel's correction. */
	*var = m->squares / (n + CA_RL_MEAN_EPS) * (n / (n - 1));
	return 0;
}

void ca_rl_whiten(size_t n, const double *x, const unsigned char *mask, double mean, double var, double *out)
{
	double scale = 1 / sqrt(var + CA_RL_WHITEN_EPS);
	for (size_t i = 0; i < n; i++)
		out[i] = MASKED(mask, i) ? 0 : (x[i] - mean) * scale;
}
