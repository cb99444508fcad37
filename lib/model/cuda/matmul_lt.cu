// matmul_lt: cuBLASLt matmuls tuned per shape; see matmul_lt.h. The first
// call of a shape asks the heuristic for its best candidates, times each
// (C saved and restored around the trials when it is accumulated into), keeps
// the fastest and then does the real product; later calls reuse the choice.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/matmul_lt.h"

#define CANDIDATES 8
#define MAX_SHAPES 128

struct shape {
	int m, n, k, lda, ldb, ldc, ta, tb, ct, accumulate;
	unsigned align_a, align_b, align_c;  // the pointers' alignment: the heuristic assumes 256 bytes unless told
	unsigned zero;                      // no padding before op: keys compare with memcmp
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulAlgo_t algo;
	int usable;
};

struct matmul_lt {
	cublasLtHandle_t handle;
	void *workspace;
	size_t bytes;
	struct shape shapes[MAX_SHAPES];
	int nshapes;
	cudaEvent_t start, stop;
};

struct matmul_lt *matmul_lt_new(void *workspace, size_t bytes)
{
	struct matmul_lt *lt = (struct matmul_lt *)calloc(1, sizeof *lt);
	if (!lt)
		return NULL;
	if (cublasLtCreate(&lt->handle) != CUBLAS_STATUS_SUCCESS || cudaEventCreate(&lt->start) != cudaSuccess ||
	    cudaEventCreate(&lt->stop) != cudaSuccess) {
		free(lt);
		return NULL;
	}
	lt->workspace = workspace;
	lt->bytes = workspace ? bytes : 0;
	return lt;
}

void matmul_lt_free(struct matmul_lt *lt)
{
	if (!lt)
		return;
	for (int i = 0; i < lt->nshapes; i++) {
		struct shape *s = &lt->shapes[i];
		if (s->a)
			cublasLtMatrixLayoutDestroy(s->a);
		if (s->b)
			cublasLtMatrixLayoutDestroy(s->b);
		if (s->c)
			cublasLtMatrixLayoutDestroy(s->c);
		if (s->op)
			cublasLtMatmulDescDestroy(s->op);
	}
	cublasLtDestroy(lt->handle);
	cudaEventDestroy(lt->start);
	cudaEventDestroy(lt->stop);
	free(lt);
}

static cublasStatus_t run(struct matmul_lt *lt, struct shape *s, const cublasLtMatmulAlgo_t *algo, const bf16 *A,
			  const bf16 *B, void *C, float beta)
{
	const float one = 1.0f;
	return cublasLtMatmul(lt->handle, s->op, &one, A, s->a, B, s->b, &beta, C, s->c, C, s->c, algo, lt->workspace,
			      lt->bytes, 0);
}

// Describe the shape and pick its algorithm by timing; s->usable 0 when nothing works.
static void tune(struct matmul_lt *lt, struct shape *s, const bf16 *A, const bf16 *B, void *C, float beta)
{
	cublasOperation_t ta = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	cudaDataType ct = (cudaDataType)s->ct;
	if (cublasLtMatmulDescCreate(&s->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
		return;
	cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
	cublasLtMatmulDescSetAttribute(s->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
	if (cublasLtMatrixLayoutCreate(&s->a, CUDA_R_16BF, s->ta ? s->k : s->m, s->ta ? s->m : s->k, s->lda) !=
		    CUBLAS_STATUS_SUCCESS ||
	    cublasLtMatrixLayoutCreate(&s->b, CUDA_R_16BF, s->tb ? s->n : s->k, s->tb ? s->k : s->n, s->ldb) !=
		    CUBLAS_STATUS_SUCCESS ||
	    cublasLtMatrixLayoutCreate(&s->c, ct, s->m, s->n, s->ldc) != CUBLAS_STATUS_SUCCESS)
		return;
	cublasLtMatmulPreference_t pref;
	if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
		return;
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt->bytes,
					     sizeof lt->bytes);
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &s->align_a,
					     sizeof s->align_a);
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &s->align_b,
					     sizeof s->align_b);
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &s->align_c,
					     sizeof s->align_c);
	cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &s->align_c,
					     sizeof s->align_c);
	cublasLtMatmulHeuristicResult_t found[CANDIDATES];
	int nfound = 0;
	cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt->handle, s->op, s->a, s->b, s->c, s->c, pref, CANDIDATES,
							  found, &nfound);
	cublasLtMatmulPreferenceDestroy(pref);
	if (st != CUBLAS_STATUS_SUCCESS || nfound <= 0)
		return;
	// The trials write C: keep what an accumulating product must add to.
	size_t elem = ct == CUDA_R_32F ? 4 : 2, cbytes = elem * ((size_t)s->ldc * (s->n - 1) + s->m);
	void *saved = NULL;
	if (s->accumulate && (cudaMalloc(&saved, cbytes) != cudaSuccess ||
			      cudaMemcpyAsync(saved, C, cbytes, cudaMemcpyDeviceToDevice) != cudaSuccess)) {
		cudaFree(saved);
		saved = NULL;
		nfound = 1;  // no room to try: the heuristic's first choice
	}
	int best = -1;
	float best_ms = 0;
	for (int i = 0; i < nfound && (saved || !s->accumulate); i++) {
		if (found[i].state != CUBLAS_STATUS_SUCCESS || run(lt, s, &found[i].algo, A, B, C, beta) != CUBLAS_STATUS_SUCCESS)
			continue;
		float ms = 0;
		cudaEventRecord(lt->start);
		for (int r = 0; r < 3; r++)
			run(lt, s, &found[i].algo, A, B, C, beta);
		cudaEventRecord(lt->stop);
		if (cudaEventSynchronize(lt->stop) != cudaSuccess ||
		    cudaEventElapsedTime(&ms, lt->start, lt->stop) != cudaSuccess)
			continue;
		if (best < 0 || ms < best_ms) {
			best = i;
			best_ms = ms;
		}
	}
	if (saved) {
		cudaMemcpyAsync(C, saved, cbytes, cudaMemcpyDeviceToDevice);
		cudaStreamSynchronize(0);
		cudaFree(saved);
	}
	if (best < 0 && nfound > 0 && found[0].state == CUBLAS_STATUS_SUCCESS)
		best = 0;
	if (best < 0)
		return;
	s->algo = found[best].algo;
	s->usable = 1;
}

static unsigned alignment(const void *p)
{
	unsigned a = 256;
	while (a > 1 && (uintptr_t)p % a)
		a /= 2;
	return a;
}

int matmul_lt(struct matmul_lt *lt, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const bf16 *A,
	      int lda, const bf16 *B, int ldb, void *C, cudaDataType ct, int ldc, float beta)
{
	struct shape key;
	memset(&key, 0, sizeof key);
	key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
	key.ta = ta != CUBLAS_OP_N, key.tb = tb != CUBLAS_OP_N, key.ct = (int)ct, key.accumulate = beta != 0.0f;
	key.align_a = alignment(A), key.align_b = alignment(B), key.align_c = alignment(C);
	struct shape *s = NULL;
	for (int i = 0; i < lt->nshapes && !s; i++)
		if (memcmp(&lt->shapes[i], &key, offsetof(struct shape, op)) == 0)
			s = &lt->shapes[i];
	if (!s) {
		if (lt->nshapes == MAX_SHAPES)
			return -1;
		s = &lt->shapes[lt->nshapes++];
		*s = key;
		tune(lt, s, A, B, C, beta);
	}
	if (!s->usable)
		return -1;
	return run(lt, s, &s->algo, A, B, C, beta) == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}
