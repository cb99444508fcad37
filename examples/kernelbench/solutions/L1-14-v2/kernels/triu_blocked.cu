// Second version: the same triangular structure, with cuBLAS doing the
// multiplication. Cut the matrices into 512 x 512 blocks: output block
// (I, J), J >= I, needs only k in [I*512, (J+1)*512). All blocks on one
// block diagonal d = J - I have the same k length, (d+1)*512, and sit at a
// constant stride from each other, so each diagonal is one strided batched
// SGEMM: 8 calls for N = 4096, about a quarter of a full GEMM's work. The
// blocks left of the diagonal are zeroed by a small kernel. Sizes that are
// not a multiple of 512 go to the hand-written kernel of triu_matmul.cu.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#define BLOCK 512

extern "C" int triu_matmul(const float* A, const float* B, float* C, long long N, cudaStream_t stream);

// The batched GEMM of block diagonal d, in cuBLAS's column-major view of our
// row-major matrices (C^T = B^T A^T): offsets of the first blocks, the
// stride between blocks, sizes and the batch count.
struct diagonal_gemm {
	long long offset_a, offset_b, offset_c, stride;
	int m, n, k, batch;
};

__host__ __device__ inline diagonal_gemm plan_diagonal(int d, long long N)
{
	diagonal_gemm g;
	int nb = (int)(N / BLOCK);
	g.offset_a = 0;                              // A[0][0]: rows of block 0, k from 0
	g.offset_b = (long long)d * BLOCK;           // B[0][d*BLOCK]
	g.offset_c = (long long)d * BLOCK;           // C[0][d*BLOCK]
	g.stride = (long long)BLOCK * N + BLOCK;     // one block down and one right
	g.m = BLOCK;                                 // columns of the C block
	g.n = BLOCK;                                 // rows of the C block
	g.k = (d + 1) * BLOCK;
	g.batch = nb - d;
	return g;
}

// Row i of C is zero left of its diagonal block.
__host__ __device__ inline int zero_end(int i) { return (i / BLOCK) * BLOCK; }

__global__ void zero_left_kernel(float* __restrict__ C, int n)
{
	int i = blockIdx.x, end = zero_end(i);
	for (int j = threadIdx.x; j < end; j += blockDim.x)
		C[(long long)i * n + j] = 0.f;
}

extern "C" int triu_matmul_blocked(const float* A, const float* B, float* C, long long N, cudaStream_t stream)
{
	if (N <= 0 || N % BLOCK != 0 || N > 65536)
		return triu_matmul(A, B, C, N, stream);
	static cublasHandle_t handle = nullptr;
	if (!handle && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS)
		return (int)cudaErrorInitializationError;
	if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS)
		return (int)cudaErrorInvalidValue;
	const float one = 1.f, zero = 0.f;
	int nb = (int)(N / BLOCK), ld = (int)N;
	for (int d = 0; d < nb; d++) {
		diagonal_gemm g = plan_diagonal(d, N);
		cublasStatus_t s = cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, g.m, g.n, g.k, &one,
			B + g.offset_b, ld, g.stride, A + g.offset_a, ld, g.stride, &zero, C + g.offset_c, ld, g.stride,
			g.batch);
		if (s != CUBLAS_STATUS_SUCCESS)
			return (int)cudaErrorLaunchFailure;
	}
	zero_left_kernel<<<(unsigned)N, 256, 0, stream>>>(C, ld);
	return (int)cudaGetLastError();
}
