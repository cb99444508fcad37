/*
 * ca-value-step: one critic update from a batch of token records: regress
 * the value of each policy token's state onto ca-gae's "returns" with
 * verl's value loss (lib/ppo.c), optionally clipped around the old values
 * the records carry. Value pretraining (on RFT trajectories, before PPO)
 * and the critic's half of every PPO step are both this command.
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
	"usage: ca-value-step [-h] [--agg MODE] [--beta1 X] [--beta2 X] [--clip-value X] [--epochs N]\n"
	"                     [--eps X] [--lr X] [--max-grad-norm X] [--mini-batches N]\n"
	"                     [--weight-decay X] -m DIR [-o DIR] [file ...]\n";

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct totals {
	double loss, clipfrac, grad_norm, vpred, resid_sq, ret_sum, ret_sq;
	long tokens;
	int updates;
};

static void update(struct ca_model *m, const struct ca_train_opts *o, int agg, double clip,
	struct ca_train_pack *p, struct totals *t)
{
	size_t T = (size_t)p->T;
	char why[CA_MODEL_WHY];
	double *v = p->record[0];
	ca_model_zero_grad(m);
	if (ca_model_forward(m, &p->batch, NULL, NULL, NULL, p->engine[0], 1, why) < 0)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	ca_train_to_record(p, p->engine[0], v);
	ca_ppo_agg_weights(agg, (size_t)p->nseq, p->start, p->mask, p->weights);
	double clipfrac;
	double loss = ca_ppo_value_loss(T, v, p->field[CA_TRAIN_RETURNS],
		isfinite(clip) ? p->field[CA_TRAIN_VALUES] : NULL, p->mask, p->weights, clip, p->grad, &clipfrac);
	/* Predictions before the update, for verl's explained variance. */
	const double *ret = p->field[CA_TRAIN_RETURNS];
	for (size_t i = 0; i < T; i++) {
		if (!p->mask[i])
			continue;
		t->vpred += v[i];
		t->resid_sq += (ret[i] - v[i]) * (ret[i] - v[i]);
		t->ret_sum += ret[i];
		t->ret_sq += ret[i] * ret[i];
		t->tokens++;
	}
	ca_train_to_engine(p, p->grad, p->engine[1]);
	ca_model_backward(m, NULL, NULL, p->engine[1]);
	t->grad_norm += ca_model_adamw_step(m, &o->adamw);
	t->loss += loss;
	t->clipfrac += clipfrac;
	t->updates++;
}

static jv mean_or_null(double sum, double n)
{
	return n > 0 ? ca_json_num_or_null(sum / n) : jv_null();
}

int main(int argc, char **argv)
{
	enum { OPT_AGG = 1, OPT_CLIP };
	static const struct option longopts[] = {
		{"agg", required_argument, NULL, OPT_AGG},
		{"clip-value", required_argument, NULL, OPT_CLIP},
		{"help", no_argument, NULL, 'h'},
		{"model", required_argument, NULL, 'm'},
		{"output", required_argument, NULL, 'o'},
		CA_TRAIN_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	struct ca_train_opts o;
	ca_train_opts_default(&o, 6e-6);
	int agg = CA_PPO_TOKEN_MEAN, c;
	double clip = INFINITY;
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
		case OPT_CLIP: clip = ca_opt_double("--clip-value", optarg, 0, 1e30); break;
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
	struct ca_model *m = ca_train_load(in, 1);
	const char *names[CA_TRAIN_NFIELDS] = {
		[CA_TRAIN_RETURNS] = "returns",
		[CA_TRAIN_VALUES] = isfinite(clip) ? "values" : NULL,
	};
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
			update(m, &o, agg, clip, &p, &t);
			update_seconds += now() - u0;
			ca_train_pack_free(&p);
		}
	}
	ca_train_save(m, out);
	jv r = ca_train_stats_begin("ca-value-step", m, &d, &o);
	r = jv_object_set(r, jv_string("updates"), jv_number(t.updates));
	r = jv_object_set(r, jv_string("vf_loss"), mean_or_null(t.loss, t.updates));
	r = jv_object_set(r, jv_string("vf_clipfrac"), mean_or_null(t.clipfrac, t.updates));
	r = jv_object_set(r, jv_string("vpred_mean"), mean_or_null(t.vpred, (double)t.tokens));
	r = jv_object_set(r, jv_string("returns_mean"), mean_or_null(t.ret_sum, (double)t.tokens));
	/* verl's vf_explained_var: 1 - Var(returns - V) / Var(returns), biased variances. */
	jv ev = jv_null();
	if (t.tokens > 0) {
		double n = (double)t.tokens, mean_r = t.ret_sum / n;
		double var_r = t.ret_sq / n - mean_r * mean_r;
		double mean_e = (t.ret_sum - t.vpred) / n;
		double var_e = t.resid_sq / n - mean_e * mean_e;
		ev = ca_json_num_or_null(1 - var_e / (var_r + CA_PPO_MEAN_EPS));
	}
	r = jv_object_set(r, jv_string("vf_explained_var"), ev);
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
