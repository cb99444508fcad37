/*
 * model_cuda: the policy engine's CUDA backend (owner: policy engine,
 * issue 6). FIRST STAGE, COMPILED BUT NOT YET RUN ON A GPU: the forward
 * pass with log-probs, entropies and values, for ca-logprob. Weights are
 * bf16 on the device; matrix products run in cuBLAS with bf16 inputs and
 * fp32 accumulation; the residual stream, norms, softmax and attention are
 * fp32. Attention is one warp per (token, head) with an online softmax
 * over the token's own sequence, so no [T, T] matrix exists.
 *
 * Every kernel has its CPU reference in lib/nn.c; tests/gpu/t0500 compares
 * the whole forward with the CPU backend (bf16 tolerance). Backward, AdamW
 * and sampling on the GPU are still to come.
 *
 * Built only when nvcc is found, by `make model-cuda`.
 */
#ifndef CA_MODEL_CUDA_H
#define CA_MODEL_CUDA_H

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ca_cuda_model;

/* Copy a loaded model's weights to the current device as bf16. */
struct ca_cuda_model *ca_cuda_model_upload(const struct ca_model *m, char why[CA_MODEL_WHY]);
void ca_cuda_model_free(struct ca_cuda_model *g);
/* As ca_model_forward (inference only): outputs on the host, NULL when not wanted. */
int ca_cuda_model_forward(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets,
			  float *logprobs, float *entropy, float *values, char why[CA_MODEL_WHY]);

#ifdef __cplusplus
}
#endif

#endif
