/*
 * ca-sft-step: one step of supervised fine-tuning of a policy checkpoint on
 * a batch of token records: the masked negative log-likelihood of the
 * tokens whose mask is 1. Rejection fine-tuning (RFT) is this step run on
 * the trajectories ca-rft-filter kept.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "ppo.h"
#include "train.h"

static const char usage_text[] =
	"usage: ca-sft-step [-h] [--agg MODE] [--beta1 X] [--beta2 X] [--epochs N] [--eps X] [--lr X]\n"
	"                   [--max-grad-norm X] [--mini-batches N] [--weight-decay X]\n"
	"                   -m DIR [-o DIR] [file ...]\n";

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct totals {
	double loss, grad_norm, entropy;
	int updates;
};

static void update(struct ca_model *m, const struct ca_train_opts *o, int agg, struct ca_train_pack *p,
	struct totals *t)
{
	size_t T = (size_t)p->T;
	char why[CA_MODEL_WHY];
	double *logp = p->record[0], *ent = p->record[1];
	ca_model_zero_grad(m);
	if (ca_model_forward(m, &p->batch, p->targets, p->engine[0], p->engine[1], NULL, 1, why) < 0)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	ca_train_to_record(p, p->engine[0], logp);
	ca_train_to_record(p, p->engine[1], ent);
	ca_ppo_agg_weights(agg, (size_t)p->nseq, p->start, p->mask, p->weights);
	t->loss += ca_ppo_nll_loss(T, logp, p->weights, p->grad);
	t->entropy += ca_ppo_aggregate(T, p->weights, ent);
	ca_train_to_engine(p, p->grad, p->engine[2]);
	ca_model_backward(m, p->engine[2], NULL, NULL);
	t->grad_norm += ca_model_adamw_step(m, &o->adamw);
	t->updates++;
}

static jv mean_or_null(double sum, int n)
{
	return n ? ca_json_num_or_null(sum / n) : jv_null();
}

int main(int argc, char **argv)
{
	enum { OPT_AGG = 1 };
	static const struct option longopts[] = {
		{"agg", required_argument, NULL, OPT_AGG},
		{"help", no_argument, NULL, 'h'},
		{"model", required_argument, NULL, 'm'},
		{"output", required_argument, NULL, 'o'},
		CA_TRAIN_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct ca_train_opts o;
	ca_train_opts_default(&o, 3e-6);
	int agg = CA_PPO_TOKEN_MEAN, c;
	const char *in = NULL, *out = NULL;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hm:o:", longopts, NULL)) != -1) {
		if (ca_train_opt(&o, c, optarg))
			continue;
		switch (c) {
		case OPT_AGG:
			if ((agg = ca_ppo_agg_parse(optarg)) < 0) {
				ca_err_warn("--agg: unknown mode '%s' (token-mean, seq-mean-token-mean, seq-mean-token-sum)", optarg);
				ca_opt_bad_usage();
			}
			break;
		case 'h': fputs(usage_text, stdout); return ca_err_finish(CA_EXIT_OK);
		case 'm': in = optarg; break;
		case 'o': out = optarg; break;
		default: fputs(usage_text, stderr); ca_opt_bad_usage();
		}
	}
	if (!in) {
		ca_err_warn("-m DIR is required");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	if (!out)
		out = in;
	double t0 = now();
	struct ca_model *m = ca_train_load(in, 0);
	const char *names[CA_TRAIN_NFIELDS] = {0};
	struct ca_train_data d;
	ca_train_read(argc - optind, argv + optind, names, &m->cfg, &d);
	struct totals t = {0};
	int nmb = o.mini_batches < d.nseq ? o.mini_batches : d.nseq;
	double update_seconds = 0;
	for (int e = 0; e < o.epochs; e++) {
		for (int k = 0; k < nmb; k++) {
			int first, count;
			ca_train_split(d.nseq, nmb, k, &first, &count);
			struct ca_train_pack p;
			ca_train_pack(&p, &d, first, count);
			double u0 = now();
			update(m, &o, agg, &p, &t);
			update_seconds += now() - u0;
			ca_train_pack_free(&p);
		}
	}
	ca_train_save(m, out);
	jv r = ca_train_stats_begin("ca-sft-step", m, &d, &o);
	r = jv_object_set(r, jv_string("updates"), jv_number(t.updates));
	r = jv_object_set(r, jv_string("loss"), mean_or_null(t.loss, t.updates));
	r = jv_object_set(r, jv_string("entropy"), mean_or_null(t.entropy, t.updates));
	r = jv_object_set(r, jv_string("grad_norm"), mean_or_null(t.grad_norm, t.updates));
	r = jv_object_set(r, jv_string("agg"), jv_string(ca_ppo_agg_name(agg)));
	r = jv_object_set(r, jv_string("update_seconds"), jv_number(update_seconds));
	r = jv_object_set(r, jv_string("seconds"), jv_number(now() - t0));
	int status = d.status;
	if (ca_ndjson_write(r) != 0)
		status = CA_EXIT_SYSTEM;
	ca_train_data_free(&d);
	ca_model_free(m);
	return ca_err_finish(status);
}
