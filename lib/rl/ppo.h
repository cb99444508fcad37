/*
 * ppo: the loss arithmetic of the training steps (owner: RL steps, issue 7):
 * the clipped PPO surrogate, the critic's value loss, the KL penalties,
 * the loss aggregation modes, and the gradient of each loss with respect
 * to the per-token log-probs or values it was computed from. The policy
 * engine's backward consumes those gradients as per-token weights, so the
 * commands ca-sft-step, ca-value-step and ca-ppo-step never differentiate
 * through the loss themselves. GAE and whitening live in rl.h.
 *
 * The definitions are verl's (verl-project/verl, verl/trainer/ppo/core_algos.py:
 * agg_loss, compute_policy_loss_vanilla, compute_value_loss, kl_penalty;
 * verl/utils/torch_functional.py: masked_mean), with torch's autograd rules
 * at the kinks (clamp passes the gradient on its closed interval; maximum
 * and minimum split it in half on exact ties), so a loss and its gradient
 * agree with verl's to rounding. Deliberate differences:
 *   - an empty mask gives a loss of 0 and a gradient of 0 (verl's agg_loss
 *     divides 0 by 0 there: its token-mean divides by the token count and
 *     its seq-mean modes by the count of sequences with any token, neither
 *     with an epsilon);
 *   - dual clip and value clipping are options (verl always applies them,
 *     with clip_ratio_c = 3 and cliprange_value = 0.5); "off" is infinity;
 *   - a mini-batch is aggregated as a whole, as verl does with one
 *     micro-batch per mini-batch.
 *
 * Arrays are double and packed: the tokens of all sequences of a batch
 * one after the other, sequence s owning [start[s], start[s+1]). Masks
 * follow rl.h: mask[i] != 0 marks a token the policy generated (the only
 * tokens any loss sees); a NULL mask means all 1. No function allocates.
 */
#ifndef CA_PPO_H
#define CA_PPO_H

#include <stddef.h>

/*
 * verl's masked_mean adds this to its denominator (the clip fractions and
 * approx_kl are masked means), and its seq-mean-token-mean to each
 * sequence's token count.
 */
#define CA_PPO_MEAN_EPS 1e-8
/* verl clamps log(ratio) to [-20, 20] before exp. */
#define CA_PPO_LOG_RATIO_LIMIT 20.0

/*
 * verl's loss_agg_mode. A sequence without mask-1 tokens is left out of the
 * seq-mean modes' mean, as verl's agg_loss leaves it out. The horizon of
 * seq-mean-token-sum-norm is verl's loss_scale_factor: by default the
 * padded width of the batch, loss_mask.shape[-1] (Dr. GRPO's constant
 * normaliser when that width is fixed).
 */
enum ca_ppo_agg {
	CA_PPO_TOKEN_MEAN,               /* sum over tokens / tokens */
	CA_PPO_SEQ_MEAN_TOKEN_MEAN,      /* mean over sequences of sum / (tokens + 1e-8) */
	CA_PPO_SEQ_MEAN_TOKEN_SUM,       /* mean over sequences of sum */
	CA_PPO_SEQ_MEAN_TOKEN_SUM_NORM,  /* mean over sequences of sum, / horizon */
};
/* "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"; -1 if unknown. */
int ca_ppo_agg_parse(const char *name);
const char *ca_ppo_agg_name(int agg);

/*
 * Every aggregation mode is linear in the per-token losses: agg(l) =
 * sum_i weights[i] * l[i]. Fill weights[0..start[nseq]) (0 on masked
 * tokens) and return the number of mask-1 tokens. The same weights are
 * dagg/dl, which is how every gradient below is formed. The horizon is
 * the longest sequence, the width the batch would have right-padded.
 */
size_t ca_ppo_agg_weights(int agg, size_t nseq, const size_t *start, const unsigned char *mask,
	double *weights);
/*
 * The same with the denominators given: mask-1 tokens, non-empty
 * sequences and the horizon (> 0) of the whole batch, of which [0, nseq)
 * is one rank's share (data-parallel steps, lib/dist).
 */
void ca_ppo_agg_weights_of(int agg, size_t nseq, const size_t *start, const unsigned char *mask, double tokens,
	double nonempty, double horizon, double *weights);
/*
 * Mask-1 tokens of sequences [0, nseq), in *nonempty the sequences that
 * have any, in *longest (may be NULL) the longest sequence's length.
 */
size_t ca_ppo_agg_counts(size_t nseq, const size_t *start, const unsigned char *mask, size_t *nonempty,
	size_t *longest);
/* sum_i weights[i] * x[i]: the aggregate of any per-token quantity (entropy, KL). */
double ca_ppo_aggregate(size_t n, const double *weights, const double *x);

/* The clipped surrogate's bounds: ratio clipped to [1 - low, 1 + high]. */
struct ca_ppo_clip {
	double low;    /* verl clip_ratio_low (0.2 by default) */
	double high;   /* verl clip_ratio_high (0.28 by default in ca, as the paper) */
	double dual;   /* verl clip_ratio_c, > 1; INFINITY turns dual clip off */
};

/*
 * Per-batch statistics of the policy loss; shares and means are verl's
 * masked means (count + 1e-8). Named as verl names them where verl has
 * them (compute_policy_loss_vanilla's metrics).
 */
struct ca_ppo_policy_stats {
	double loss;                     /* the aggregated surrogate (verl pg_loss) */
	double pg_clipfrac;              /* verl pg_clipfrac: share of tokens where the clipped term won */
	double ratio_clipped_high_frac;  /* ca's: of those, ratio > 1 + high with advantage > 0 */
	double ratio_clipped_low_frac;   /* ca's: ratio < 1 - low with advantage < 0 */
	double pg_clipfrac_lower;        /* verl pg_clipfrac_lower: dual clip active (advantage < 0) */
	double approx_kl;                /* verl ppo_kl: masked mean of old - new log-prob (clamped) */
	double ratio_min, ratio_max;  /* over mask-1 tokens; 1 and 1 when there are none */
	size_t tokens;          /* mask-1 tokens */
};

/*
 * verl's compute_policy_loss_vanilla over n tokens, aggregated with
 * weights (from ca_ppo_agg_weights; they also carry the mask). Returns the
 * loss; grad (may be NULL) gets dloss/dlogp[i]; stats may be NULL.
 */
double ca_ppo_policy_loss(size_t n, const double *logp, const double *old_logp,
	const double *advantages, const unsigned char *mask, const double *weights,
	const struct ca_ppo_clip *clip, double *grad, struct ca_ppo_policy_stats *stats);

/*
 * verl's compute_value_loss: 0.5 * agg(max((V - R)^2, (Vclip - R)^2)) with
 * Vclip = V clipped to [old - clip, old + clip]; clip = INFINITY (or
 * old_values NULL) is the plain 0.5 * agg((V - R)^2). grad (may be NULL)
 * gets dloss/dV[i]; *clipfrac (may be NULL) the masked mean of the
 * clipped term winning.
 */
double ca_ppo_value_loss(size_t n, const double *values, const double *returns,
	const double *old_values, const unsigned char *mask, const double *weights, double clip,
	double *grad, double *clipfrac);

/*
 * The negative log-likelihood of SFT / RFT: -agg(logp); grad[i] = -weights[i].
 */
double ca_ppo_nll_loss(size_t n, const double *logp, const double *weights, double *grad);

/* verl's kl_penalty types between the policy and a reference policy. */
enum ca_ppo_kl {
	CA_PPO_KL_K1,       /* "kl" or "k1": logp - ref */
	CA_PPO_KL_ABS,      /* "abs": |logp - ref| */
	CA_PPO_KL_MSE,      /* "mse" or "k2": 0.5 (logp - ref)^2 */
	CA_PPO_KL_LOW_VAR,  /* "low_var_kl" or "k3": exp(ref - logp) - (ref - logp) - 1, clamped */
};
int ca_ppo_kl_parse(const char *name);
const char *ca_ppo_kl_name(int kind);
/* Per-token penalty into kl[i]; grad (may be NULL) gets dkl[i]/dlogp[i]. */
void ca_ppo_kl_penalty(int kind, size_t n, const double *logp, const double *ref_logp,
	double *kl, double *grad);

#endif
