/*
 * train: what the three training-step commands share (owner: RL steps,
 * issue 7): reading a batch of token records, packing mini-batches for the
 * policy engine, loading a checkpoint with its optimizer state, writing it
 * back without ever leaving a half-written directory, and the options of
 * the AdamW step, and running steps: one per process, or (--serve) one
 * per request line of a resident server that keeps the model, its
 * optimizer state and the engine between steps. The loss arithmetic is in
 * ppo.h, GAE in rl.h, the model in model.h.
 *
 * Alignment. Token records carry arrays with one entry per token
 * ("tokens", "mask", "logprobs", "advantages", "returns", "values"). Entry
 * i of a per-token quantity belongs to the action of emitting tokens[i]:
 * its log-prob and entropy are those of the distribution computed at
 * position i - 1, and its value is the critic's output at position i - 1
 * (the state before the action, as verl's critic reads its values). The
 * first token of a record is never trained on: nothing predicts it.
 */
#ifndef CA_TRAIN_H
#define CA_TRAIN_H

#include <getopt.h>
#include <stddef.h>

#include <jv.h>

#include "device.h"
#include "dist.h"
#include "model.h"

/* The per-token number fields a command may need. */
enum {
	CA_TRAIN_LOGPROBS,      /* old log-probs ("logprobs") */
	CA_TRAIN_ADVANTAGES,    /* "advantages" (or the field --advantages names) */
	CA_TRAIN_RETURNS,       /* "returns" */
	CA_TRAIN_VALUES,        /* old values ("values") */
	CA_TRAIN_REF_LOGPROBS,  /* reference policy log-probs ("ref_logprobs") */
	CA_TRAIN_NFIELDS
};

struct ca_train_seq {
	int n;
	int *tokens;
	unsigned char *mask;               /* mask[0] is always 0 */
	double *field[CA_TRAIN_NFIELDS];   /* NULL unless wanted */
};

struct ca_train_data {
	int nseq;
	struct ca_train_seq *seq;
	long records;          /* records read, good or bad */
	long skipped;          /* records left out of the batch, each reported on stderr */
	long tokens, agent_tokens;
	double reward_sum;     /* over records with a numeric "reward" */
	long rewarded;
	long reward_3;         /* records whose reward is 3, the paper's best score */
	int status;            /* worst exit status met while reading */
};

/*
 * Read every record of files (none: stdin) into d. names[k] is the record
 * field holding per-token field k, or NULL when the command does not need
 * it; a record lacking a needed field, or with a null or non-number at a
 * mask-1 token, is reported as FILE:LINE and skipped (d->status becomes
 * CA_EXIT_DATA). Token ids must be in the model's vocabulary and a record
 * no longer than its max_position_embeddings. Booleans count as 0/1.
 */
void ca_train_read(int nfiles, char **files, const char *const names[CA_TRAIN_NFIELDS],
	const struct ca_model_config *cfg, struct ca_train_data *d);
void ca_train_data_free(struct ca_train_data *d);

/* A mini-batch packed for the engine: sequences first..first+nseq of a batch. */
struct ca_train_pack {
	int nseq, T;
	int *tokens, *targets, *seq_len;
	size_t *start;                     /* nseq + 1 offsets into the packed arrays */
	unsigned char *mask;
	double *field[CA_TRAIN_NFIELDS];   /* packed copies of the wanted fields, else NULL */
	struct ca_batch batch;             /* the engine's view of tokens and seq_len */
	/* Scratch, T entries each: engine-side (float) and record-aligned (double). */
	float *engine[3];
	double *record[3], *weights, *grad;
	/*
	 * The aggregation denominators of the whole mini-batch this pack is
	 * one rank's share of (lib/dist): mask-1 tokens, sequences with any,
	 * and seq-mean-token-sum-norm's horizon: the longest record's scored
	 * positions (its tokens but the first, the width verl's right-padded
	 * batch has) or --loss-scale-factor. ca_train_pack sets them to the
	 * pack's own.
	 */
	double all_tokens, all_nonempty, all_horizon;
};
void ca_train_pack(struct ca_train_pack *p, const struct ca_train_data *d, int first, int nseq);
void ca_train_pack_free(struct ca_train_pack *p);
/* record[i] = engine[i - 1] within each sequence, record[first] = 0. */
void ca_train_to_record(const struct ca_train_pack *p, const float *engine, double *record);
/* engine[i - 1] = record[i] within each sequence, engine[last] = 0. */
void ca_train_to_engine(const struct ca_train_pack *p, const double *record, float *engine);

/* Fill p->weights for aggregation mode agg over the whole mini-batch (see all_tokens). */
void ca_train_weights(struct ca_train_pack *p, int agg);

/* The sequences of mini-batch k of n over nseq sequences: [*first, *first + *count). */
void ca_train_split(int nseq, int n, int k, int *first, int *count);

/*
 * Load a checkpoint and, when DIR/optimizer.safetensors exists, its AdamW
 * state. critic: 1 needs a value head, 0 a language-model head. Dies with
 * a message (exit 3 for a bad checkpoint, 4 for I/O) on failure.
 */
struct ca_model *ca_train_load(const char *dir, int critic);
/*
 * Write the model and its optimizer state (when it has one) to dir: into a
 * fresh sibling directory first, then swapped with dir in one rename
 * (renameat2 RENAME_EXCHANGE; two renames where that is missing), so a
 * crash leaves the old checkpoint or the new one, never a mixture. Files
 * of the old directory that the new one lacks are carried over. Dies with
 * exit 4 on failure.
 */
void ca_train_save(struct ca_model *m, const char *dir);

/*
 * The options every step command takes, with verl's defaults: AdamW,
 * mini-batches and epochs, --agg (a CA_PPO_* aggregation) and
 * --loss-scale-factor (its horizon), --device (cpu, or cuda through
 * lib/device), -m DIR and -o DIR, --serve.
 */
struct ca_train_opts {
	struct ca_adamw adamw;
	int mini_batches, epochs;
	int agg;
	double loss_scale_factor; /* verl's: seq-mean-token-sum-norm's horizon; 0: the batch's */
	int device;               /* enum ca_device */
	int serve;                /* --serve: requests on stdin name -m, -o and the files */
	const char *model, *output;
};
void ca_train_opts_default(struct ca_train_opts *o, double lr);
/*
 * getopt_long over a step command's arguments, its longopts holding
 * CA_TRAIN_LONGOPTS: the shared options (ids from CA_TRAIN_OPT_*, -m, -o)
 * are taken into o here; returns the next other one for the command (its
 * own, 'h', or '?'), or -1 at the end with the file operands from optind.
 */
int ca_train_getopt(struct ca_train_opts *o, int argc, char **argv, const struct option *longopts);
enum {
	CA_TRAIN_OPT_AGG = 1000, CA_TRAIN_OPT_BETA1, CA_TRAIN_OPT_BETA2, CA_TRAIN_OPT_DEVICE, CA_TRAIN_OPT_EPOCHS,
	CA_TRAIN_OPT_EPS, CA_TRAIN_OPT_LOSS_SCALE_FACTOR, CA_TRAIN_OPT_LR, CA_TRAIN_OPT_MAX_GRAD_NORM,
	CA_TRAIN_OPT_MINI_BATCHES, CA_TRAIN_OPT_SERVE, CA_TRAIN_OPT_WEIGHT_DECAY,
};
#define CA_TRAIN_LONGOPTS \
	{"agg", required_argument, NULL, CA_TRAIN_OPT_AGG}, \
	{"beta1", required_argument, NULL, CA_TRAIN_OPT_BETA1}, \
	{"beta2", required_argument, NULL, CA_TRAIN_OPT_BETA2}, \
	{"device", required_argument, NULL, CA_TRAIN_OPT_DEVICE}, \
	{"epochs", required_argument, NULL, CA_TRAIN_OPT_EPOCHS}, \
	{"eps", required_argument, NULL, CA_TRAIN_OPT_EPS}, \
	{"loss-scale-factor", required_argument, NULL, CA_TRAIN_OPT_LOSS_SCALE_FACTOR}, \
	{"lr", required_argument, NULL, CA_TRAIN_OPT_LR}, \
	{"max-grad-norm", required_argument, NULL, CA_TRAIN_OPT_MAX_GRAD_NORM}, \
	{"mini-batches", required_argument, NULL, CA_TRAIN_OPT_MINI_BATCHES}, \
	{"model", required_argument, NULL, 'm'}, \
	{"output", required_argument, NULL, 'o'}, \
	{"serve", no_argument, NULL, CA_TRAIN_OPT_SERVE}, \
	{"weight-decay", required_argument, NULL, CA_TRAIN_OPT_WEIGHT_DECAY}

/*
 * The engine a step runs on: the CPU model itself, or (--device cuda) its
 * copy on the GPU, with fp32 master weights and AdamW state there; the
 * CPU model gets the trained weights back at ca_train_engine_close.
 * Failures die: exit 3 for data the model refuses, 4 for CUDA.
 */
struct ca_train_engine {
	struct ca_model *m;
	int device;
	struct ca_cuda_model *gpu;
	const struct ca_cuda_api *api;
	/*
	 * The data-parallel ranks (lib/dist, from the environment): each takes
	 * its share of every mini-batch's sequences, the gradients are summed
	 * over the ranks before AdamW, and rank 0 alone saves and writes the
	 * stats record.
	 */
	struct ca_dist dist;
	int idle;  /* the last forward had no tokens: backward adds nothing */
};
void ca_train_engine_open(struct ca_train_engine *e, struct ca_model *m, int device);
/* Zero the gradient, then a training forward over p (outputs of T entries, each may be NULL). */
void ca_train_engine_forward(struct ca_train_engine *e, const struct ca_train_pack *p, float *logprobs,
	float *entropy, float *values);
void ca_train_engine_backward(struct ca_train_engine *e, const float *dlogp, const float *dentropy,
	const float *dvalue);
/*
 * One AdamW step; returns the gradient norm before clipping. With several
 * ranks the gradients are summed over them first.
 */
double ca_train_engine_adamw(struct ca_train_engine *e, const struct ca_adamw *opt);
void ca_train_engine_close(struct ca_train_engine *e);

/* A command's update of one packed mini-batch. */
typedef void (*ca_train_update_fn)(struct ca_train_engine *e, struct ca_train_pack *p, void *ctx);
/*
 * How many updates the epochs make: one per mini-batch per epoch, and no
 * more mini-batches than sequences.
 */
int ca_train_updates(const struct ca_train_data *d, const struct ca_train_opts *o);
/* Every epoch over every mini-batch: pack it and update; returns the seconds spent updating. */
double ca_train_epochs(struct ca_train_engine *e, const struct ca_train_data *d, const struct ca_train_opts *o,
	ca_train_update_fn update, void *ctx);

/* Sum x[0..n) over the ranks (a no-op for one); every rank calls it alike. */
void ca_train_sum(struct ca_train_engine *e, double *x, size_t n);

double ca_train_now(void);
/* sum / n as a number, null when n is 0 or the mean is not finite. */
jv ca_train_mean(double sum, double n);

/* The fields every stats record starts with, "updates" (ca_train_updates) last. */
jv ca_train_stats_begin(const char *command, const struct ca_model *m, const struct ca_train_data *d,
	const struct ca_train_opts *o);

/*
 * A step command: what it reads, its update, its stats. The command owns
 * main() and its options; ca_train_run and ca_train_serve own the step
 * around them, so a step run cold and one served warm are the same code.
 */
struct ca_train_step {
	const char *command;   /* the stats record's "command" */
	int critic;            /* the checkpoint is a critic (1) or a policy (0) */
	const char *names[CA_TRAIN_NFIELDS];
	/* Before the epochs (may be NULL): reset ctx's totals, prepare the batch; may die. */
	void (*begin)(struct ca_train_data *d, void *ctx);
	ca_train_update_fn update;
	/* After the epochs, the trained weights in e->m: the command's fields added to r (means over updates). */
	jv (*stats)(struct ca_train_engine *e, const struct ca_train_data *d, int updates, jv r, void *ctx);
	void *ctx;
};

/*
 * One step, cold: load o->model, read files (none: stdin), run the epochs,
 * save o->output, write the stats record (with "agg", "ranks",
 * "update_seconds" and "seconds" added) and free everything; returns the
 * exit status.
 */
int ca_train_run(const struct ca_train_step *s, const struct ca_train_opts *o, int nfiles, char **files);
/*
 * --serve: one step per request line on stdin, one answer line each on
 * stdout (flushed), until end of input; the model, its optimizer state and
 * the engine stay resident between requests. The protocol is in
 * ca-ppo-step(1), SERVE MODE. Returns the worst status of the requests.
 */
int ca_train_serve(const struct ca_train_step *s, const struct ca_train_opts *o);
/*
 * A step command after its options, with its file operands: -m is
 * required, and --serve takes neither -m, -o nor files (else usage to
 * stderr and exit 2); -o defaults to -m. Then ca_train_serve or
 * ca_train_run; returns the exit status.
 */
int ca_train_start(const struct ca_train_step *s, struct ca_train_opts *o, const char *usage, int nfiles,
	char **files);

#endif
