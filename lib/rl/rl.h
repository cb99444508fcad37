/*
 * lib/rl, training; this header is the folder's face (see core/core.h for
 * the folders). Beside the arithmetic here (GAE, whitening): ppo.h the
 * losses of the training steps, train.h what the step commands share
 * (batches, checkpoints with optimizer state, the step servers), dist.h
 * data-parallel ranks. rl knows lib/core and lib/model (the policy it
 * trains), not lib/eval or lib/synth.
 */
/*
 * rl: the reinforcement-learning arithmetic shared by the training
 * commands (ca-gae's advantages and returns, whitening; the PPO and value
 * losses are in ppo.h). Pure functions over double arrays:
 * no JSON, no I/O, no allocation unless a comment says so, so every
 * function can be unit-tested against a plain reference.
 *
 * Masks follow verl's multi-turn convention: mask[i] != 0 marks a token
 * the policy generated (a step of the decision process), 0 a token the
 * environment wrote (tool output, observation). A NULL mask means all 1.
 */
#ifndef CA_RL_H
#define CA_RL_H

#include <stddef.h>

/*
 * Generalized Advantage Estimation over one trajectory of n tokens.
 * rewards[i] is the reward of token i (use ca_rl_outcome_rewards for an
 * outcome reward). The recursion runs over the mask-1 tokens only, as if
 * the masked tokens were removed: the next value of an agent token is the
 * value of the next agent token (0 after the last), no discount is applied
 * across masked tokens, and rewards and values of masked tokens are ignored.
 *   delta_t = r_t + gamma * V(next) - V_t
 *   A_t     = delta_t + gamma * lambda * A(next)
 *   R_t     = A_t + V_t                 (the critic's regression target)
 * advantages[i] and returns[i] are 0 at masked positions. Either output
 * may alias nothing else; returns may be NULL.
 */
void ca_rl_gae(size_t n, const double *values, const double *rewards, const unsigned char *mask,
	double gamma, double lambda, double *advantages, double *returns);

/*
 * Fill rewards[0..n) with 0 and put reward on the last token whose mask
 * is 1. Returns the index used, or -1 when no token is unmasked (then the
 * reward is dropped: there is no decision to credit).
 */
long ca_rl_outcome_rewards(size_t n, const unsigned char *mask, double reward, double *rewards);

/*
 * Mean and variance over the masked (mask-1) elements of a batch, as
 * verl's masked_mean and masked_var(unbiased=True) compute them
 * (verl-project/verl, verl/utils/torch_functional.py). Feed every array
 * with ca_rl_moments_add (pass 1: the mean), then every array again with
 * ca_rl_moments_add_centered (pass 2: the squared deviations from that
 * mean); the two passes keep the variance accurate when the mean is large.
 */
struct ca_rl_moments {
	size_t count;     /* masked elements seen */
	double sum;       /* pass 1 */
	double squares;   /* pass 2: sum of (x - mean)^2 */
};
void ca_rl_moments_add(struct ca_rl_moments *m, size_t n, const double *x, const unsigned char *mask);
void ca_rl_moments_add_centered(struct ca_rl_moments *m, size_t n, const double *x, const unsigned char *mask);

/* verl's masked_mean adds this to the count it divides by. */
#define CA_RL_MEAN_EPS 1e-8
/* verl's masked_mean: sum / (count + 1e-8); 0 when there is nothing. */
double ca_rl_moments_mean(const struct ca_rl_moments *m);
/*
 * verl's masked_var(unbiased=True): the masked mean of the squared
 * deviations, squares / (count + 1e-8), times count / (count - 1). With
 * fewer than two elements verl raises; so do we: -1 and *var untouched.
 */
int ca_rl_moments_var(const struct ca_rl_moments *m, double *var);

/* verl's epsilon in masked_whiten: (x - mean) / sqrt(var + 1e-8). */
#define CA_RL_WHITEN_EPS 1e-8
/*
 * out[i] = (x[i] - mean) / sqrt(var + CA_RL_WHITEN_EPS) for mask-1 i, 0
 * elsewhere (verl's masked_whiten leaves the masked positions shifted and
 * scaled too; nothing reads them).
 */
void ca_rl_whiten(size_t n, const double *x, const unsigned char *mask, double mean, double var, double *out);

#endif
