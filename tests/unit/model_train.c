/*
 * model_train: a test driver for the policy engine's training path.
 *
 *   test-model_train grad DIR OUT.safetensors < tokens.ndjson
 *   test-model_train adamw DIR OUTDIR LR WD CLIP STEPS < tokens.ndjson
 *   test-model_train to-critic DIR OUTDIR
 *   test-model_train save-as DIR OUTDIR f32|bf16|f16
 *
 * Modes "grad-recompute" and "adamw-recompute" do the same with activation
 * recomputation.
 *
 * Packs every record into one batch and takes the gradient of
 *   L = sum_t weights[t] * logp[t] + entropy_weights[t] * H[t]
 * (policy) or L = sum_t weights[t] * V[t] (critic), the loss ca_hf.py
 * computes with torch autograd record by record; "grad" writes the
 * gradients, "adamw" takes STEPS AdamW steps and saves the model (fp32).
 * "save-as" writes the weights a step would start from (the fp32 master
 * copy of DIR/optimizer.safetensors when it holds one) in another dtype.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "json.h"
#include "model.h"
#include "ndjson.h"
#include "opt.h"
#include "safetensors.h"

static float *number_array(jv rec, const char *key, int n)
{
	float *out = ca_xcalloc((size_t)n, sizeof *out);
	jv a = ca_json_get(rec, key);
	if (jv_get_kind(a) == JV_KIND_ARRAY)
		for (int i = 0; i < n && i < jv_array_length(jv_copy(a)); i++) {
			jv x = jv_array_get(jv_copy(a), i);
			out[i] = jv_get_kind(x) == JV_KIND_NUMBER ? (float)jv_number_value(x) : 0;
			jv_free(x);
		}
	jv_free(a);
	return out;
}

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc < 4)
		ca_err_die(CA_EXIT_USAGE, "usage: test-model_train grad DIR OUT | adamw DIR OUTDIR LR WD CLIP STEPS");
	char why[CA_MODEL_WHY];
	struct ca_model *m = ca_model_load(argv[2], why);
	if (!m)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	if (strcmp(argv[1], "save-as") == 0) {
		int dtype = argc < 5 ? -1 : strcmp(argv[4], "f32") == 0 ? CA_ST_F32 :
			strcmp(argv[4], "bf16") == 0 ? CA_ST_BF16 : strcmp(argv[4], "f16") == 0 ? CA_ST_F16 : -1;
		if (dtype < 0)
			ca_err_die(CA_EXIT_USAGE, "save-as needs DIR OUTDIR f32|bf16|f16");
		char path[4096];
		snprintf(path, sizeof path, "%s/optimizer.safetensors", argv[2]);
		FILE *fp = fopen(path, "rb");
		if (fp)
			fclose(fp);
		if (fp && ca_model_load_optimizer(m, argv[2], why) < 0)
			ca_err_die(CA_EXIT_DATA, "%s", why);
		if (ca_model_save(m, argv[3], dtype, 0, why) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
		ca_model_free(m);
		return 0;
	}
	if (strcmp(argv[1], "to-critic") == 0) {
		ca_model_to_critic(m, 42);
		if (ca_model_save(m, argv[3], -1, 0, why) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
		ca_model_free(m);
		return 0;
	}
	int cap = 1024, T = 0, nseq = 0;
	int *tokens = ca_xmalloc(sizeof(int) * (size_t)cap), *targets = ca_xmalloc(sizeof(int) * (size_t)cap);
	float *dlogp = ca_xmalloc(sizeof(float) * (size_t)cap), *dent = ca_xmalloc(sizeof(float) * (size_t)cap);
	int *lens = ca_xmalloc(sizeof(int) * 4096);
	struct ca_ndjson_reader *r = ca_ndjson_open(0, NULL);
	jv rec;
	while (ca_ndjson_next(r, &rec) == CA_NDJSON_RECORD) {
		jv toks = ca_json_get(rec, "tokens");
		int n = jv_array_length(jv_copy(toks));
		float *w = number_array(rec, "weights", n), *e = number_array(rec, "entropy_weights", n);
		while (T + n > cap) {
			cap *= 2;
			tokens = ca_xrealloc(tokens, sizeof(int) * (size_t)cap);
			targets = ca_xrealloc(targets, sizeof(int) * (size_t)cap);
			dlogp = ca_xrealloc(dlogp, sizeof(float) * (size_t)cap);
			dent = ca_xrealloc(dent, sizeof(float) * (size_t)cap);
		}
		for (int j = 0; j < n; j++) {
			jv x = jv_array_get(jv_copy(toks), j);
			tokens[T + j] = (int)jv_number_value(x);
			jv_free(x);
		}
		for (int j = 0; j < n; j++) {
			targets[T + j] = j + 1 < n ? tokens[T + j + 1] : -1;
			if (m->cfg.critic) {
				dlogp[T + j] = w[j];
			} else {
				dlogp[T + j] = j + 1 < n ? w[j + 1] : 0;
				dent[T + j] = j + 1 < n ? e[j + 1] : 0;
			}
		}
		free(w);
		free(e);
		jv_free(toks);
		jv_free(rec);
		lens[nseq++] = n;
		T += n;
	}
	ca_ndjson_close(r);
	struct ca_batch b = {.T = T, .tokens = tokens, .nseq = nseq, .seq_len = lens};
	int steps = 1;
	struct ca_adamw opt = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
	int adam = strncmp(argv[1], "adamw", 5) == 0;
	m->recompute = strstr(argv[1], "-recompute") != NULL;
	if (adam) {
		if (argc < 8)
			ca_err_die(CA_EXIT_USAGE, "adamw needs DIR OUTDIR LR WD CLIP STEPS");
		opt.lr = ca_opt_double("LR", argv[4], 0, 1);
		opt.weight_decay = ca_opt_double("WD", argv[5], 0, 1);
		opt.max_grad_norm = ca_opt_double("CLIP", argv[6], 0, 1e9);
		steps = (int)ca_opt_long("STEPS", argv[7], 1, 1000);
	}
	for (int s = 0; s < steps; s++) {
		if (ca_model_forward(m, &b, targets, NULL, NULL, NULL, 1, why) < 0)
			ca_err_die(CA_EXIT_DATA, "%s", why);
		ca_model_zero_grad(m);
		if (m->cfg.critic)
			ca_model_backward(m, NULL, NULL, dlogp);
		else
			ca_model_backward(m, dlogp, dent, NULL);
		if (adam) {
			double norm = ca_model_adamw_step(m, &opt);
			fprintf(stderr, "step %d grad norm %.6g\n", s + 1, norm);
		}
	}
	if (adam) {
		if (ca_model_save(m, argv[3], CA_ST_F32, 0, why) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", why);
	} else {
		struct ca_st_out *out = ca_xcalloc((size_t)m->ntensors, sizeof *out);
		for (int i = 0; i < m->ntensors; i++) {
			out[i].name = m->tensors[i].name;
			out[i].ndim = m->tensors[i].ndim;
			out[i].shape[0] = m->tensors[i].shape[0];
			out[i].shape[1] = m->tensors[i].shape[1];
			out[i].data = m->grad + m->tensors[i].offset;
		}
		char stwhy[CA_ST_WHY];
		if (ca_st_write_file(argv[3], m->ntensors, out, CA_ST_F32, stwhy) < 0)
			ca_err_die(CA_EXIT_SYSTEM, "%s", stwhy);
		free(out);
	}
	free(tokens); free(targets); free(dlogp); free(dent); free(lens);
	ca_model_free(m);
	return 0;
}
