/*
 * model_cuda_sample: generation with a key/value cache on the GPU, the
 * CUDA counterpart of ca_model_generate (lib/model/model_sample.c; owner: policy
 * engine sampling, issue 6).
 *
 * Weights are bf16 on the device (fp32 in exact mode), matrix products run
 * in cuBLAS with fp32 accumulation, the residual stream, norms, rotary
 * embeddings, the cache and the softmax are fp32, as in the CUDA forward
 * (model_cuda.cu).
 * Requests are batched continuously: a sampler has a fixed number of
 * cache slots; a request takes a free slot, its whole prompt runs in the
 * next step packed beside the one-token steps of the requests already
 * decoding, and a finished request frees its slot for the next one. So
 * any number of requests can be given at once.
 *
 * Temperature 0 is greedy (the lowest id among equal maxima, the log-prob
 * that of the unscaled distribution, as on the CPU). Otherwise the logits
 * are divided by the temperature, top-p keeps the most probable tokens
 * whose mass reaches top_p (ties at the edge all kept), and the token is
 * drawn with the request's own splitmix64 stream, the uniform numbers the
 * CPU backend draws for the same seed.
 *
 * A decoding step (one token per sequence) is captured as a CUDA graph the
 * first time a batch of that size decodes, then replayed; CA_CUDA_GRAPHS=0
 * turns that off. With CA_CUDA_DEBUG set every kernel is followed by a
 * synchronisation (no graphs), and a failure names the kernel and layer.
 *
 * Built only by `make model-cuda`, into the shared object that
 * lib/model/device.c opens at run time.
 */
#ifndef CA_MODEL_CUDA_SAMPLE_H
#define CA_MODEL_CUDA_SAMPLE_H

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ca_cuda_sampler;

/* One prompt to continue; the sampler fills the outputs. */
struct ca_sample_request {
	const int *prompt;
	int n;
	struct ca_sample_params params;   /* per request; stop tokens are kept in the output */
	ca_stop_fn stop_fn;               /* may be NULL; asked after each token */
	void *stop_ctx;
	int *out_tokens;                  /* room for params.max_tokens */
	float *out_logprobs;              /* may be NULL */
	int produced;                     /* out: tokens generated, or -1 with why set */
	char why[CA_MODEL_WHY];
};

/*
 * Copy a policy's weights to the current GPU as bf16 and set up slots
 * cache slots of max_len positions each (prompt plus completion; at most
 * max_position_embeddings). With exact set the matrices and every matrix
 * product's input stay fp32 (cuBLAS without TF32): twice the memory and
 * slower, but the CPU backend's numbers up to the order of summation, so
 * greedy decoding gives the CPU's tokens.
 */
struct ca_cuda_sampler *ca_cuda_sampler_new(const struct ca_model *m, int slots, int max_len, int exact,
					    char why[CA_MODEL_WHY]);
void ca_cuda_sampler_free(struct ca_cuda_sampler *s);
/*
 * Generate for every request. A request that cannot run (empty prompt,
 * token outside the vocabulary, prompt longer than the cache) gets
 * produced -1 and its why; the others go on. Returns 0, or -1 with why
 * set when the GPU failed (then no output is to be trusted).
 */
int ca_cuda_sampler_generate(struct ca_cuda_sampler *s, struct ca_sample_request *requests, int n,
			     char why[CA_MODEL_WHY]);
/* Tokens run through the model and steps taken since the sampler was made (for benchmarks). */
void ca_cuda_sampler_counts(const struct ca_cuda_sampler *s, long *tokens, long *steps);

#ifdef __cplusplus
}
#endif

#endif
