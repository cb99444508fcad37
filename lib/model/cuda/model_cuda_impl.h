/*
 * model_cuda_impl: the CUDA backend's device-side model, shared by the
 * files of lib/model/cuda (C++ only; the public interface is model_cuda.h).
 *
 * params is the fp32 master copy laid out as the CPU model's m->params,
 * params16 its bf16 copy; a weight's views into both (and into grad) sit
 * at the same offset. Matrices are read as bf16 by cuBLAS; norms' weights
 * and biases as fp32 from params.
 */
#ifndef CA_MODEL_CUDA_IMPL_H
#define CA_MODEL_CUDA_IMPL_H

#include <cublas_v2.h>

#include "cuda/model_cuda.h"
#include "cuda/nn_cuda.h"

struct layer_weights {
	bf16 *wq, *wk, *wv, *wo, *wgate, *wup, *wdown;
	float *bq, *bk, *bv, *bo, *ln1, *ln2;
	float *q_norm, *k_norm;  /* Qwen3's per-head norms' weights [head_dim] (else NULL) */
	size_t off[15];  /* offsets of wq..wdown, bq..bo, ln1, ln2, q_norm, k_norm (SIZE_MAX: absent) */
};

struct cuda_acts;

struct ca_cuda_model {
	struct ca_model_config cfg;
	cublasHandle_t blas;
	void *blas_workspace;            /* cuBLAS's workspace (32 MiB, as Hopper's kernels want) */
	struct matmul_lt *lt;            /* CA_CUDA_GEMM_TUNE=1: matmuls through tuned cuBLASLt */
	size_t nparams;
	float *params;
	bf16 *params16;
	float *grad, *adam_m, *adam_v;   /* NULL until training needs them */
	long adam_step;
	bf16 *embed, *lm_head, *score_w;
	float *norm, *score_b, *score_w32;
	size_t off_embed, off_lm_head, off_norm, off_score_w, off_score_b;
	struct layer_weights *layers;
	float *rope_cos, *rope_sin;
	struct cuda_acts *acts;
	double *partial;                 /* grad-norm partial sums */
	int recompute;                   /* the CPU model's m->recompute at upload */
};

/* cudaMalloc and cudaFree with the byte count kept for ca_cuda_model_peak_bytes. */
void *ca_cuda_alloc(size_t bytes);
void ca_cuda_release(void *p);

#endif
