/*
 * device: where the policy engine runs (owner: policy engine sampling,
 * issue 6). "cpu" is the fp32 backend linked into every command; "cuda"
 * is the bf16 backend of lib/model/cuda, built by `make model-cuda` into the
 * shared object libca-model-cuda.so and opened here at run time, so the
 * commands build and run where there is no nvcc and no GPU.
 *
 * The object is looked for in $CA_MODEL_CUDA_LIB when set, else beside
 * the running executable. Every entry point is looked up by name and is
 * NULL when the object lacks it; a command checks the ones it needs.
 */
#ifndef CA_DEVICE_H
#define CA_DEVICE_H

#include "model.h"
#include "cuda/model_cuda.h"
#include "cuda/model_cuda_sample.h"

enum ca_device { CA_DEVICE_CPU, CA_DEVICE_CUDA };

/* "cpu" or "cuda"; exits with a usage error otherwise (for --device). */
enum ca_device ca_device_parse(const char *option, const char *text);

struct ca_cuda_api {
	const char *path;   /* the shared object opened */
	struct ca_cuda_model *(*model_upload)(const struct ca_model *m, char why[CA_MODEL_WHY]);
	void (*model_free)(struct ca_cuda_model *g);
	int (*model_forward)(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets, float *logprobs,
			     float *entropy, float *values, char why[CA_MODEL_WHY]);
	struct ca_cuda_sampler *(*sampler_new)(const struct ca_model *m, int slots, int max_len, int exact,
					       char why[CA_MODEL_WHY]);
	void (*sampler_free)(struct ca_cuda_sampler *s);
	int (*sampler_generate)(struct ca_cuda_sampler *s, struct ca_sample_request *requests, int n,
				char why[CA_MODEL_WHY]);
	void (*sampler_counts)(const struct ca_cuda_sampler *s, long *tokens, long *steps);
	/* Training (E1, lib/model/cuda/model_cuda.h); lib/rl/train.c uses them for --device cuda. */
	int (*model_forward_train)(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets,
				   float *logprobs, float *entropy, float *values, char why[CA_MODEL_WHY]);
	int (*model_backward)(struct ca_cuda_model *g, const float *dlogp, const float *dentropy, const float *dvalue,
			      char why[CA_MODEL_WHY]);
	int (*model_zero_grad)(struct ca_cuda_model *g, char why[CA_MODEL_WHY]);
	int (*model_adamw_step)(struct ca_cuda_model *g, const struct ca_adamw *opt, double *grad_norm,
				char why[CA_MODEL_WHY]);
	int (*model_download)(struct ca_cuda_model *g, struct ca_model *m, int grad, char why[CA_MODEL_WHY]);
	/* Data-parallel training: the fp32 gradient on the device, n floats (backward finished). */
	float *(*model_grad_buffer)(struct ca_cuda_model *g, size_t *n, char why[CA_MODEL_WHY]);
	/* Most bytes the backend's own allocations held at once in this process. */
	size_t (*peak_bytes)(void);
};

/* Open the CUDA backend (once; later calls return the same table), or NULL with why set. */
const struct ca_cuda_api *ca_device_cuda(char why[CA_MODEL_WHY]);

/* What a command runs on the backend: the entry points it needs. */
enum ca_device_use { CA_DEVICE_FORWARD, CA_DEVICE_SAMPLER };
/*
 * For a command's --device: on cuda the backend, with the entry points
 * use needs; NULL on cpu. Dies (CA_EXIT_SYSTEM) where it cannot.
 */
const struct ca_cuda_api *ca_device_open(enum ca_device device, enum ca_device_use use);

#endif
