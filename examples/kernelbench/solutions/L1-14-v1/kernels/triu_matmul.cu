// C = triu(A @ B) for upper triangular A and B (N x N, float32, row major).
//
// Only tiles on or above the diagonal are computed, and for tile (bi, bj)
// only k in [bi*T, (bj+1)*T) can contribute: A[i][k] is zero for k < i and
// B[k][j] is zero for k > j. That is about a sixth of a full GEMM's work.
// Tiles below the diagonal are written as zeros. Heavy tiles (far from the
// diagonal) are scheduled first so the tail of the grid is short.
//
// The steps are __host__ __device__ so a CPU emulation can check the
// indexing without a GPU.
#include <cuda_runtime.h>

#define TILE 128
#define BK 8
#define THREADS 256
#define TM 8
#define TN 8

struct tile { int bi, bj, upper; };

// Block b of the grid -> its tile. Blocks [0, T(T+1)/2) are the upper
// tiles, longest diagonal distance first; the rest are the lower tiles.
__host__ __device__ inline tile tile_of(int b, int T)
{
	tile t;
	int upper = T * (T + 1) / 2;
	if (b < upper) {
		for (int d = T - 1; d >= 0; d--) {       // diagonal d holds T - d tiles
			int n = T - d;
			if (b < n) {
				t.bi = b;
				t.bj = b + d;
				t.upper = 1;
				return t;
			}
			b -= n;
		}
	}
	b -= upper;
	for (int bi = 1; bi < T; bi++) {                 // row bi holds bi lower tiles
		if (b < bi) {
			t.bi = bi;
			t.bj = b;
			t.upper = 0;
			return t;
		}
		b -= bi;
	}
	t.bi = t.bj = 0;
	t.upper = -1;
	return t;
}

// Load the A tile (transposed into As[k][m]) and the B tile (Bs[k][n]) for step k0.
__host__ __device__ inline void load_tiles(int tid, const float* A, const float* B, int N,
	int row0, int col0, int k0, float* As, float* Bs)
{
	for (int l = 0; l < 4; l++) {
		int e = tid + l * THREADS;                // 0 .. 1023
		int m = e / BK, kk = e % BK;
		int r = row0 + m, k = k0 + kk;
		As[kk * TILE + m] = (r < N && k < N) ? A[(long long)r * N + k] : 0.f;
		int kb = e / TILE, n = e % TILE;
		int kr = k0 + kb, c = col0 + n;
		Bs[kb * TILE + n] = (kr < N && c < N) ? B[(long long)kr * N + c] : 0.f;
	}
}

__host__ __device__ inline void multiply_step(int tid, const float* As, const float* Bs, float acc[TM][TN])
{
	int ty = tid / 16, tx = tid % 16;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
	for (int kk = 0; kk < BK; kk++) {
		float a[TM], b[TN];
#ifdef __CUDA_ARCH__
		const float4* ap = reinterpret_cast<const float4*>(As + kk * TILE + ty * TM);
		const float4* bp = reinterpret_cast<const float4*>(Bs + kk * TILE + tx * TN);
		float4 a0 = ap[0], a1 = ap[1], b0 = bp[0], b1 = bp[1];
		a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w;
		a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
		b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w;
		b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
#pragma unroll
		for (int i = 0; i < TM; i++)
#pragma unroll
			for (int j = 0; j < TN; j++)
				acc[i][j] += a[i] * b[j];
#else
		for (int i = 0; i < TM; i++)
			a[i] = As[kk * TILE + ty * TM + i];
		for (int j = 0; j < TN; j++)
			b[j] = Bs[kk * TILE + tx * TN + j];
		for (int i = 0; i < TM; i++)
			for (int j = 0; j < TN; j++)
				acc[i][j] += a[i] * b[j];
#endif
	}
}

__host__ __device__ inline void store_tile(int tid, float* C, int N, int row0, int col0, float acc[TM][TN])
{
	int ty = tid / 16, tx = tid % 16;
	for (int i = 0; i < TM; i++) {
		int r = row0 + ty * TM + i;
		if (r >= N)
			break;
		for (int j = 0; j < TN; j++) {
			int c = col0 + tx * TN + j;
			if (c < N)
				C[(long long)r * N + c] = c >= r ? acc[i][j] : 0.f;
		}
	}
}

__host__ __device__ inline void zero_tile(int tid, float* C, int N, int row0, int col0)
{
	for (int e = tid; e < TILE * TILE; e += THREADS) {
		int r = row0 + e / TILE, c = col0 + e % TILE;
		if (r < N && c < N)
			C[(long long)r * N + c] = 0.f;
	}
}

// The k steps of tile (bi, bj): [bi*TILE, min(N, (bj+1)*TILE)) in steps of BK.
__host__ __device__ inline int k_begin(int bi) { return bi * TILE; }
__host__ __device__ inline int k_end(int bj, int N) { int e = (bj + 1) * TILE; return e < N ? e : N; }

__global__ void __launch_bounds__(THREADS) triu_matmul_kernel(const float* __restrict__ A,
	const float* __restrict__ B, float* __restrict__ C, int N, int T)
{
	__shared__ __align__(16) float As[BK * TILE];
	__shared__ __align__(16) float Bs[BK * TILE];
	tile t = tile_of(blockIdx.x, T);
	int tid = threadIdx.x, row0 = t.bi * TILE, col0 = t.bj * TILE;
	if (t.upper != 1) {
		if (t.upper == 0)
			zero_tile(tid, C, N, row0, col0);
		return;
	}
	float acc[TM][TN];
#pragma unroll
	for (int i = 0; i < TM; i++)
#pragma unroll
		for (int j = 0; j < TN; j++)
			acc[i][j] = 0.f;
	int end = k_end(t.bj, N);
	for (int k0 = k_begin(t.bi); k0 < end; k0 += BK) {
		load_tiles(tid, A, B, N, row0, col0, k0, As, Bs);
		__syncthreads();
		multiply_step(tid, As, Bs, acc);
		__syncthreads();
	}
	store_tile(tid, C, N, row0, col0, acc);
}

extern "C" int triu_matmul(const float* A, const float* B, float* C, long long N, cudaStream_t stream)
{
	if (N <= 0 || N > (1LL << 30) / TILE)
		return (int)cudaErrorInvalidValue;
	int T = (int)((N + TILE - 1) / TILE);
	triu_matmul_kernel<<<T * T, THREADS, 0, stream>>>(A, B, C, (int)N, T);
	return (int)cudaGetLastError();
}
