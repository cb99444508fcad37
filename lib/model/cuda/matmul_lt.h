/*
 * matmul_lt: the engine's matmuls through cuBLASLt with the algorithm of
 * each shape chosen by timing the heuristic's first candidates once, on
 * first use (CA_CUDA_GEMM_TUNE=1; owner: policy engine, issue 6). Private
 * to lib/model/cuda (C++).
 */
#ifndef CA_MATMUL_LT_H
#define CA_MATMUL_LT_H

#include <cublas_v2.h>

#include "cuda/cuda_util.h"

struct matmul_lt;

/* NULL when cuBLASLt cannot start; workspace (device, bytes) is lent, not owned. */
struct matmul_lt *matmul_lt_new(void *workspace, size_t bytes);
void matmul_lt_free(struct matmul_lt *lt);
/*
 * As cublasGemmEx(ta, tb, m, n, k, 1, A bf16, B bf16, beta, C of type ct)
 * with fp32 compute, on the default stream. -1 when cuBLASLt has no
 * algorithm for it: the caller falls back to cublasGemmEx.
 */
int matmul_lt(struct matmul_lt *lt, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const bf16 *A,
	      int lda, const bf16 *B, int ldb, void *C, cudaDataType ct, int ldc, float beta);

#endif
