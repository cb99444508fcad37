/*
 * model_cuda_dist: what data-parallel training (lib/dist) needs of the
 * CUDA model: its fp32 gradient as one device buffer, summed over the
 * ranks through NCCL between backward and AdamW.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "cuda/model_cuda_impl.h"

extern "C" float *ca_cuda_model_grad_buffer(struct ca_cuda_model *g, size_t *n, char *why)
{
	if (!g->grad) {
		snprintf(why, CA_MODEL_WHY, "no gradient on the GPU yet (no training forward)");
		return NULL;
	}
	// NCCL runs on its own stream: the backward's kernels must be done.
	cudaError_t rc = cudaDeviceSynchronize();
	if (rc != cudaSuccess) {
		snprintf(why, CA_MODEL_WHY, "CUDA: %s", cudaGetErrorString(rc));
		return NULL;
	}
	*n = g->nparams;
	return g->grad;
}
