/*
 * lib/model, the policy engine; this header is the folder's face (see
 * core/core.h for the folders). Beside the transformer here (model.c
 * loads and saves, model_forward.c runs forward and backward,
 * model_sample.c generates, model_random.c writes random checkpoints):
 * nn.h its CPU layers, safetensors.h and tokenizer.h the Hugging Face
 * checkpoint files, chat.h conversations in the chat format, device.h the
 * CUDA backend of cuda/ (model_cuda.h, model_cuda_sample.h; the rest of
 * cuda/ is private to it), opened at run time. A file includes the ones it
 * uses. model knows lib/core and nothing else; in particular not lib/eval.
 */
/*
 * model: the policy engine's decoder-only transformer of the Llama, Qwen2
 * and Qwen3 (dense) families (owner: policy engine, issue 6). Qwen3 is
 * Qwen2 without q/k/v biases and with an RMSNorm over each head of q and k
 * (q_norm, k_norm, head_dim weights shared by the heads) before the rotary
 * embedding; its head_dim need not be hidden_size / num_heads.
 *
 * A model is loaded from a Hugging Face checkpoint directory (config.json
 * plus model.safetensors or shards with model.safetensors.index.json,
 * weights in bf16/fp16/fp32) into fp32 parameters held in one buffer, and
 * written back in the same format, so transformers and ca read each
 * other's checkpoints. Two heads: the language-model head (tied to the
 * embedding or not) for a policy, and a scalar value head ("score", one
 * value per token, as transformers' *ForTokenClassification with
 * num_labels 1) for a critic.
 *
 * The CPU backend is fp32 (nn.c). A batch is several sequences packed
 * one after another; attention never crosses sequences and positions
 * restart at 0 in each.
 *
 * Training: ca_model_forward with train set keeps the activations;
 * ca_model_backward adds the gradients of
 *     L = sum_t dlogp[t] * logp[t] + dentropy[t] * H[t] + dvalue[t] * V[t]
 * to m->grad (so the caller passes dL/dlogp etc. per token; a weighted
 * log-prob loss is L = -sum_t w_t logp_t, i.e. dlogp = -w). Then
 * ca_model_adamw_step clips the gradient norm and updates the weights.
 */
#ifndef CA_MODEL_H
#define CA_MODEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <jv.h>

#define CA_MODEL_WHY 256

struct ca_model_config {
	char model_type[32];
	int vocab_size;
	int hidden_size;
	int intermediate_size;
	int num_layers;
	int num_heads;
	int num_kv_heads;
	int head_dim;
	int max_positions;
	float rms_norm_eps;
	double rope_theta;
	int tied;        /* lm head shares the embedding matrix */
	int qkv_bias;    /* q, k, v projections have biases (Qwen2) */
	int o_bias;      /* the output projection has a bias (Llama attention_bias) */
	int qk_norm;     /* RMSNorm over each head of q and k before RoPE (Qwen3) */
	int critic;      /* value head instead of lm head */
	int score_bias;  /* the value head has a bias */
};

/* One named parameter tensor inside the model's buffers. */
struct ca_model_tensor {
	char name[96];
	int ndim;
	int64_t shape[2];
	size_t offset;  /* in floats, into params, grad, adam_m, adam_v */
	size_t numel;
};

struct ca_model_layer {
	float *ln1, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *ln2, *wgate, *wup, *wdown;
	float *q_norm, *k_norm;  /* [head_dim] each, Qwen3 only (else NULL) */
};

struct ca_model_acts;

struct ca_model {
	struct ca_model_config cfg;
	jv config_json;        /* config.json as read, written back on save */
	char *source_dir;      /* for copying tokenizer files on save */
	int ntensors;
	struct ca_model_tensor *tensors;
	size_t nparams;
	float *params;
	float *grad;           /* NULL until ca_model_zero_grad */
	float *adam_m, *adam_v;
	long adam_step;
	int save_dtype;        /* enum ca_st_dtype the checkpoint had */
	/* Views into params. */
	float *embed, *norm, *lm_head, *score_w, *score_b;
	struct ca_model_layer *layers;
	float *rope_cos, *rope_sin;
	struct ca_model_acts *acts;
	/*
	 * Activation recomputation: a training forward keeps only each layer's
	 * input and the backward recomputes the layer, about a third more work
	 * for a fraction of the memory. Same numbers either way.
	 */
	int recompute;
};

/* A packed batch: tokens[0..T) made of nseq sequences of the given lengths. */
struct ca_batch {
	int T;
	const int *tokens;
	int nseq;
	const int *seq_len;
};

/* Load a checkpoint directory; NULL with why set on failure. */
struct ca_model *ca_model_load(const char *dir, char why[CA_MODEL_WHY]);
/* ca_model_load for a command's -m DIR: dies (CA_EXIT_DATA) with the reason where it fails. */
struct ca_model *ca_model_open(const char *dir);
void ca_model_free(struct ca_model *m);
/*
 * Write config.json and the weights (same dtype as loaded unless dtype >= 0,
 * an enum ca_st_dtype) into dir, created if needed; tokenizer and generation
 * files of the source directory are copied along. max_shard_bytes 0: one file.
 */
int ca_model_save(const struct ca_model *m, const char *dir, int dtype, size_t max_shard_bytes,
		  char why[CA_MODEL_WHY]);
/*
 * Write a random Qwen2 policy into dir (created if needed), for benchmarks
 * and tests: config.json and model.safetensors in bf16, tied embedding,
 * q/k/v biases, heads of hidden_size / num_heads dims; norms' weights 1,
 * the rest uniform in [-0.02, 0.02) from a fixed generator (the same
 * checkpoint every time). The shape is shape's hidden_size,
 * intermediate_size, num_layers, num_heads, num_kv_heads, vocab_size and
 * max_positions; the rest of it is ignored. Returns 0, or -1 with why set.
 * (model_random.c)
 */
int ca_model_write_random(const char *dir, const struct ca_model_config *shape, char why[CA_MODEL_WHY]);
const struct ca_model_tensor *ca_model_find(const struct ca_model *m, const char *name);
/*
 * Turn a policy into a critic with the same body: the language-model head
 * is dropped and a value head score.weight [1, hidden] is added, drawn from
 * N(0, initializer_range) with the seed (its bias 0), and config.json names a
 * *ForTokenClassification architecture with one label, so transformers
 * loads the saved critic. Optimizer state and gradients are dropped.
 * This is how value pretraining starts from the actor.
 */
void ca_model_to_critic(struct ca_model *m, uint64_t seed);

/*
 * Forward over a packed batch. targets[t] is the token whose log-prob is
 * wanted at position t (-1: none, logprobs[t] = 0). Outputs may be NULL:
 * logprobs[T], entropy[T] (policy), values[T] (critic). With train set the
 * activations are kept for ca_model_backward. Returns 0, or -1 with why
 * set (token out of range, sequence longer than max_position_embeddings).
 */
int ca_model_forward(struct ca_model *m, const struct ca_batch *b, const int *targets,
		     float *logprobs, float *entropy, float *values, int train,
		     char why[CA_MODEL_WHY]);
/* Add gradients for the last training forward; any of the arrays may be NULL. */
void ca_model_backward(struct ca_model *m, const float *dlogp, const float *dentropy,
		       const float *dvalue);
/* Allocate (first call) and zero m->grad. */
void ca_model_zero_grad(struct ca_model *m);
double ca_model_grad_norm(const struct ca_model *m);

struct ca_adamw {
	double lr, beta1, beta2, eps, weight_decay;
	double max_grad_norm;  /* <= 0: no clipping */
};
/*
 * The scalars of AdamW's step number step (counted from 1) for a gradient
 * of the given norm. Inline because the CUDA backend, a library that links
 * none of ours, takes its step from them too: both do the same arithmetic.
 */
struct ca_adamw_scalars {
	float clip;  /* as torch.nn.utils.clip_grad_norm_: max / (norm + 1e-6) when above, else 1 */
	float beta1, beta2, step_size, bc2_sqrt, eps, decay;
};
static inline struct ca_adamw_scalars ca_adamw_scalars(const struct ca_adamw *o, double norm, long step)
{
	struct ca_adamw_scalars s;
	s.clip = 1.0f;
	if (o->max_grad_norm > 0 && norm > o->max_grad_norm)
		s.clip = (float)(o->max_grad_norm / (norm + 1e-6));
	double bc1 = 1.0 - pow(o->beta1, (double)step);
	double bc2 = 1.0 - pow(o->beta2, (double)step);
	s.beta1 = (float)o->beta1;
	s.beta2 = (float)o->beta2;
	s.step_size = (float)(o->lr / bc1);
	s.bc2_sqrt = (float)sqrt(bc2);
	s.eps = (float)o->eps;
	s.decay = (float)(1.0 - o->lr * o->weight_decay);
	return s;
}
/* One AdamW step (decoupled weight decay, bias correction, as torch.optim.AdamW).
 * Returns the gradient norm before clipping. */
double ca_model_adamw_step(struct ca_model *m, const struct ca_adamw *opt);
/*
 * Optimizer state beside a checkpoint: DIR/optimizer.safetensors, fp32
 * adam_m, adam_v and step, and for a model file narrower than fp32 the
 * fp32 weights as "master". Loading (after ca_model_load of the same
 * directory) puts master into m->params when the model file holds exactly
 * its rounding, else leaves the file's weights and says so on stderr.
 */
int ca_model_save_optimizer(const struct ca_model *m, const char *dir, char why[CA_MODEL_WHY]);
int ca_model_load_optimizer(struct ca_model *m, const char *dir, char why[CA_MODEL_WHY]);

/* Sampling with a KV cache: see model_sample.c. */
struct ca_sample_params {
	double temperature;   /* 0: greedy */
	double top_p;         /* 1: off */
	int max_tokens;
	int nstop_tokens;
	const int *stop_tokens;   /* e.g. eos ids; the stop token is kept in the output */
	uint64_t seed;
};
/*
 * Continue prompt[0..n) with up to max_tokens tokens. Writes the new tokens
 * to out_tokens and their log-probs under the sampling distribution (after
 * temperature and top-p) to out_logprobs; returns the number generated, or
 * -1 with why set. stop_fn (may be NULL) is asked after each token whether
 * to stop (for stop strings); it gets the tokens generated so far.
 */
typedef int (*ca_stop_fn)(const int *tokens, int n, void *ctx);
int ca_model_generate(struct ca_model *m, const int *prompt, int n, const struct ca_sample_params *p,
		      ca_stop_fn stop_fn, void *stop_ctx, int *out_tokens, float *out_logprobs,
		      char why[CA_MODEL_WHY]);

#endif
