/*
 * model_cuda: the policy engine's CUDA backend (owner: policy engine,
 * issue 6): forward with log-probs, entropies and values, the backward of
 * ca_model_backward's loss, and AdamW with fp32 master weights, for
 * ca-logprob and the training steps (--device cuda).
 *
 * The device holds the parameters as the CPU model lays them out: one
 * fp32 master buffer (same offsets as m->params), a bf16 copy of it that
 * the matmuls read, and, once training starts, fp32 gradients and AdamW
 * moments. Matrix products run in cuBLAS with bf16 inputs and fp32
 * accumulation; the residual stream, norms, softmax statistics and the
 * gradients of everything but matmul inputs are fp32. Attention is
 * flash-style: no [T, T] matrix exists.
 *
 * A training forward keeps every layer's activations for the backward,
 * or only each layer's input when recomputing (CA_CUDA_RECOMPUTE=1; by
 * default when the model asks for it or the activations would not fit):
 * a third more work, a fraction of the memory, the same numbers. The
 * head's logits are kept too when they fit in a quarter of the free memory
 * (CA_CUDA_KEEP_LOGITS=0/1 to decide), else computed again.
 * Attention runs on tensor cores (lib/model/cuda/attention_mma.cu, FlashAttention-2's
 * tiling on mma.sync, bf16 operands) for heads of 16 to 128 dims, on the
 * older WMMA kernels (attention_wmma.cu) with CA_CUDA_ATTENTION=wmma, on the
 * fp32 kernels of attention_cuda.cu for heads of 256 or with
 * CA_CUDA_ATTENTION=fp32; CA_CUDA_ATTENTION_DQ=atomic or 128 and
 * CA_CUDA_ATTENTION_FWD=128 select variants of the mma kernels.
 * CA_CUDA_PROFILE=1 synchronises between phases and prints the seconds per
 * step each took when the model is freed; 2 also times every matmul.
 *
 * Every kernel has its CPU reference in lib/model/nn.c or lib/model/model.c;
 * test-model-cuda compares the forward, test-train-cuda the gradients per
 * tensor and one AdamW step (tests/gpu/t0500, t0510).
 *
 * Built only when nvcc is found, by `make model-cuda`: into the test
 * binaries and into $(BIN)/libca-model-cuda.so, which lib/model/device.c opens
 * with dlopen for --device cuda, so the CPU build needs no CUDA at all.
 */
#ifndef CA_MODEL_CUDA_H
#define CA_MODEL_CUDA_H

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ca_cuda_model;

/* Copy a loaded model's weights (and AdamW state, when it has one) to the current device. */
struct ca_cuda_model *ca_cuda_model_upload(const struct ca_model *m, char why[CA_MODEL_WHY]);
void ca_cuda_model_free(struct ca_cuda_model *g);
/* As ca_model_forward with train 0: outputs on the host, NULL when not wanted. */
int ca_cuda_model_forward(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets,
			  float *logprobs, float *entropy, float *values, char why[CA_MODEL_WHY]);
/* As ca_model_forward with train 1: the activations stay on the device for the backward. */
int ca_cuda_model_forward_train(struct ca_cuda_model *g, const struct ca_batch *b, const int *targets,
				float *logprobs, float *entropy, float *values, char why[CA_MODEL_WHY]);
/* As ca_model_backward (host arrays of T entries, each may be NULL): adds into the device gradient. */
int ca_cuda_model_backward(struct ca_cuda_model *g, const float *dlogp, const float *dentropy,
			   const float *dvalue, char why[CA_MODEL_WHY]);
int ca_cuda_model_zero_grad(struct ca_cuda_model *g, char why[CA_MODEL_WHY]);
/* As ca_model_adamw_step; *grad_norm gets the norm before clipping. */
int ca_cuda_model_adamw_step(struct ca_cuda_model *g, const struct ca_adamw *opt, double *grad_norm,
			     char why[CA_MODEL_WHY]);
/*
 * Copy the device's parameters and AdamW state (allocated in m when
 * missing) back into m, for saving; with grad set, the gradient too.
 */
int ca_cuda_model_download(struct ca_cuda_model *g, struct ca_model *m, int grad, char why[CA_MODEL_WHY]);
/* Replace the device gradient by grad[nparams] (tests: one AdamW step on the CPU's gradient). */
int ca_cuda_model_set_grad(struct ca_cuda_model *g, const float *grad, char why[CA_MODEL_WHY]);
/* The most device memory this backend has held at once, in bytes (weights, state, activations). */
size_t ca_cuda_model_peak_bytes(void);

#ifdef __cplusplus
}
#endif

#endif
