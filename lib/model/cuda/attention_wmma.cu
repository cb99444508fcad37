// attention_wmma: the flash-style attention of attention_cuda.cu on tensor
// cores (WMMA, bf16 inputs, fp32 accumulation): the same algorithm and
// interface, tiles of 64 queries by 64 keys, four warps of 16 rows each.
// Scores, probabilities and accumulators of a tile live in shared memory,
// never in global memory. Selected with CA_CUDA_ATTENTION=wmma; checked
// against the CPU like every kernel (tests/gpu/t0510).
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>

#include "cuda/nn_cuda.h"

using namespace nvcuda;

#define WT 128   // threads: four warps
#define TILE 64  // queries or keys per tile

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_frag;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b_col;

template <int D>
struct geometry {
	static constexpr int LDB = D + 8;       // bf16 [64][D] tiles
	static constexpr int LDS = TILE + 4;    // fp32 [64][64] scores
	static constexpr int LDP = TILE + 8;    // bf16 [64][64] probabilities
	static constexpr int LDO = D + 4;       // fp32 [64][D] accumulators
	static constexpr int BT = TILE * LDB * 2, ST = TILE * LDS * 4, PT = TILE * LDP * 2, OT = TILE * LDO * 4;
};

// rows [row0, row0 + n) of a [rows, stride] fp32 matrix at column col, D wide, as bf16 (zeros past n).
template <int D>
__device__ static void load_tile(bf16 *dst, const float *src, int row0, int n, size_t stride, size_t col)
{
	constexpr int LDB = geometry<D>::LDB;
	for (int i = threadIdx.x; i < TILE * D; i += WT) {
		int r = i / D, d = i % D;
		dst[r * LDB + d] = __float2bfloat16(r < n ? src[(size_t)(row0 + r) * stride + col + d] : 0.0f);
	}
}

// The same rows of head col / D of two [rows, stride] matrices (keys and values, or queries and
// their output gradients) into two tiles.
template <int D>
__device__ __forceinline__ static void load_tiles(bf16 *dst_a, bf16 *dst_b, const float *a, const float *b, int row0,
						int n, size_t stride, size_t col)
{
	load_tile<D>(dst_a, a, row0, n, stride, col);
	load_tile<D>(dst_b, b, row0, n, stride, col);
}

// acc += A[16 x 16] B[16 x 16]: a row-major bf16 (lda), b bf16 as BFrag lays it out (ldb).
template <typename BFrag>
__device__ __forceinline__ static void mma_16x16(acc_frag &acc, const bf16 *a, int lda, const bf16 *b, int ldb)
{
	a_row fa;
	BFrag fb;
	wmma::load_matrix_sync(fa, a, lda);
	wmma::load_matrix_sync(fb, b, ldb);
	wmma::mma_sync(acc, fa, fb, acc);
}

// C[16 x 64] (fp32 in shared, ld ldc) = A[16 x K] B^T, A row-major bf16 (lda), B [64 x K] row-major
// bf16 (ldb): the scores of 16 rows against a tile (B^T is B read as a column-major fragment).
template <int K>
__device__ static void mm_16x64(float *c, int ldc, const bf16 *a, int lda, const bf16 *b, int ldb)
{
	for (int j = 0; j < TILE / 16; j++) {
		acc_frag acc;
		wmma::fill_fragment(acc, 0.0f);
		for (int kk = 0; kk < K / 16; kk++)
			mma_16x16<b_col>(acc, a + kk * 16, lda, b + (size_t)j * 16 * ldb + kk * 16, ldb);
		wmma::store_matrix_sync(c + j * 16, acc, ldc, wmma::mem_row_major);
	}
}

// Cacc[16 x D] (fp32 in shared, ld ldc) += A[16 x 64] (bf16, row-major, lda) B[64 x D] (bf16 row-major, ldb).
template <int D>
__device__ static void mm_acc_16xD(float *c, int ldc, const bf16 *a, int lda, const bf16 *b, int ldb)
{
	for (int j = 0; j < D / 16; j++) {
		acc_frag acc;
		wmma::load_matrix_sync(acc, c + j * 16, ldc, wmma::mem_row_major);
		for (int kk = 0; kk < TILE / 16; kk++)
			mma_16x16<b_row>(acc, a + kk * 16, lda, b + (size_t)kk * 16 * ldb + j * 16, ldb);
		wmma::store_matrix_sync(c + j * 16, acc, ldc, wmma::mem_row_major);
	}
}

// The query row a lane works on in a tile of nq queries from q0: its row r (two lanes a row), which
// half of the row's 64 columns it holds, its token t, whether the row is real (rv), where t's
// sequence starts, and the tile's last query.
struct lane_row {
	int r, half, t;
	bool rv;
	int tstart, qlast;
};
__device__ __forceinline__ static lane_row row_of_lane(int warp, int lane, int q0, int nq, const int *seq_start)
{
	lane_row x;
	x.r = warp * 16 + lane / 2;
	x.half = lane & 1;
	x.t = q0 + x.r;
	x.rv = x.r < nq;
	x.tstart = x.rv ? seq_start[x.t] : 0;
	x.qlast = q0 + nq - 1;
	return x;
}

// The key tile from kt (up to the query tile's last query qlast): its keys and values into Ks and Vs
// by the whole block, then this warp's scores against it, Sw = Qw K^T. How many keys it holds.
template <int D>
__device__ __forceinline__ static int key_tile_scores(float *Sw, const bf16 *Qw, bf16 *Ks, bf16 *Vs, const float *k,
						      const float *v, int kt, int qlast, int NKV, int g)
{
	typedef geometry<D> G;
	int nk = min(TILE, qlast - kt + 1);
	__syncthreads();
	load_tiles<D>(Ks, Vs, k, v, kt, nk, (size_t)NKV * D, (size_t)g * D);
	__syncthreads();
	mm_16x64<D>(Sw, G::LDS, Qw, G::LDB, Ks, G::LDB);
	return nk;
}

template <int D>
__global__ static void __launch_bounds__(WT)
wmma_forward_kernel(bf16 *out, float *lse, const float *q, const float *k, const float *v, const int *seq_start,
		    int T, int NH, int NKV)
{
	typedef geometry<D> G;
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *Qs = (bf16 *)smem, *Ks = (bf16 *)(smem + G::BT), *Vs = (bf16 *)(smem + 2 * G::BT);
	float *Ss = (float *)(smem + 3 * G::BT);
	bf16 *Ps = (bf16 *)(smem + 3 * G::BT + G::ST);
	float *Os = (float *)(smem + 3 * G::BT + G::ST + G::PT);
	float *Ms = (float *)(smem + 3 * G::BT + G::ST + G::PT + G::OT), *Ls = Ms + TILE;
	int h = blockIdx.y, g = h / (NH / NKV), q0 = blockIdx.x * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int nq = min(TILE, T - q0);
	load_tile<D>(Qs, q, q0, nq, (size_t)NH * D, (size_t)h * D);
	for (int i = threadIdx.x; i < TILE * G::LDO; i += WT)
		Os[i] = 0.0f;
	if (threadIdx.x < TILE) {
		Ms[threadIdx.x] = -INFINITY;
		Ls[threadIdx.x] = 0.0f;
	}
	float scale = rsqrtf((float)D);
	auto [r, half, t, rv, tstart, qlast] = row_of_lane(warp, lane, q0, nq, seq_start);
	const bf16 *Qw = Qs + warp * 16 * G::LDB;
	float *Sw = Ss + warp * 16 * G::LDS, *Ow = Os + warp * 16 * G::LDO;
	bf16 *Pw = Ps + warp * 16 * G::LDP;
	for (int kt = seq_start[q0]; kt <= qlast; kt += TILE) {
		int nk = key_tile_scores<D>(Sw, Qw, Ks, Vs, k, v, kt, qlast, NKV, g);
		__syncwarp();
		float mold = Ms[r], lold = Ls[r], sc[32], mx = -INFINITY;
		for (int c = 0; c < 32; c++) {
			int col = half * 32 + c, s = kt + col;
			bool ok = rv && col < nk && s >= tstart && s <= t;
			sc[c] = ok ? Ss[r * G::LDS + col] * scale : -INFINITY;
			mx = fmaxf(mx, sc[c]);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		float mnew = fmaxf(mold, mx);
		float corr = mnew == -INFINITY ? 1.0f : expf(mold - mnew), sum = 0.0f;
		for (int c = 0; c < 32; c++) {
			float p = sc[c] == -INFINITY ? 0.0f : expf(sc[c] - mnew);
			sum += p;
			Ps[r * G::LDP + half * 32 + c] = __float2bfloat16(p);
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		for (int d = half * (D / 2); d < (half + 1) * (D / 2); d++)
			Os[r * G::LDO + d] *= corr;
		__syncwarp();
		if (half == 0) {
			Ms[r] = mnew;
			Ls[r] = lold * corr + sum;
		}
		__syncwarp();
		mm_acc_16xD<D>(Ow, G::LDO, Pw, G::LDP, Vs, G::LDB);
	}
	__syncwarp();
	if (rv) {
		float inv = 1.0f / Ls[r];
		bf16 *op = out + ((size_t)t * NH + h) * D;
		for (int d = half * (D / 2); d < (half + 1) * (D / 2); d++)
			op[d] = __float2bfloat16(Os[r * G::LDO + d] * inv);
		if (half == 0)
			lse[(size_t)t * NH + h] = Ms[r] + logf(Ls[r]);
	}
}

// dq: block (query tile, head), warps by query rows; dS = P (dP - delta) never leaves shared memory and
// dQ stays in accumulator fragments. dq must have room for whole tiles (rows rounded up to 64).
template <int D>
__global__ static void __launch_bounds__(WT)
wmma_dq_kernel(float *dq, const float *dout, const float *delta, const float *lse, const float *q, const float *k,
	       const float *v, const int *seq_start, int T, int NH, int NKV)
{
	typedef geometry<D> G;
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *Qs = (bf16 *)smem, *dOs = (bf16 *)(smem + G::BT), *Ks = (bf16 *)(smem + 2 * G::BT);
	bf16 *Vs = (bf16 *)(smem + 3 * G::BT);
	float *Ss = (float *)(smem + 4 * G::BT), *DPs = (float *)(smem + 4 * G::BT + G::ST);
	bf16 *dSs = (bf16 *)(smem + 4 * G::BT + 2 * G::ST);
	int h = blockIdx.y, g = h / (NH / NKV), q0 = blockIdx.x * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int nq = min(TILE, T - q0);
	load_tiles<D>(Qs, dOs, q, dout, q0, nq, (size_t)NH * D, (size_t)h * D);
	acc_frag dQf[D / 16];
	for (int j = 0; j < D / 16; j++)
		wmma::fill_fragment(dQf[j], 0.0f);
	float scale = rsqrtf((float)D);
	auto [r, half, t, rv, tstart, qlast] = row_of_lane(warp, lane, q0, nq, seq_start);
	float L = rv ? lse[(size_t)t * NH + h] : 0.0f, Dt = rv ? delta[(size_t)t * NH + h] : 0.0f;
	const bf16 *Qw = Qs + warp * 16 * G::LDB, *dOw = dOs + warp * 16 * G::LDB;
	float *Sw = Ss + warp * 16 * G::LDS, *DPw = DPs + warp * 16 * G::LDS;
	bf16 *dSw = dSs + warp * 16 * G::LDP;
	for (int kt = seq_start[q0]; kt <= qlast; kt += TILE) {
		int nk = key_tile_scores<D>(Sw, Qw, Ks, Vs, k, v, kt, qlast, NKV, g);
		mm_16x64<D>(DPw, G::LDS, dOw, G::LDB, Vs, G::LDB);
		__syncwarp();
		for (int c = 0; c < 32; c++) {
			int col = half * 32 + c, s = kt + col;
			bool ok = rv && col < nk && s >= tstart && s <= t;
			float ds = 0.0f;
			if (ok) {
				float p = expf(Ss[r * G::LDS + col] * scale - L);
				ds = p * (DPs[r * G::LDS + col] - Dt);
			}
			dSs[r * G::LDP + col] = __float2bfloat16(ds);
		}
		__syncwarp();
		for (int j = 0; j < D / 16; j++)
			for (int kk = 0; kk < TILE / 16; kk++)
				mma_16x16<b_row>(dQf[j], dSw + kk * 16, G::LDP, Ks + (size_t)kk * 16 * G::LDB + j * 16, G::LDB);
	}
	float *out = dq + ((size_t)(q0 + warp * 16) * NH + h) * D;
	for (int j = 0; j < D / 16; j++) {
		for (int i = 0; i < dQf[j].num_elements; i++)
			dQf[j].x[i] *= scale;
		wmma::store_matrix_sync(out + j * 16, dQf[j], (unsigned)(NH * D), wmma::mem_row_major);
	}
}

// dk, dv of one query head: block (key tile, head), warps by key rows, accumulators in fragments;
// every query tile that can see the keys passes through shared memory. Written per head into
// dkh, dvh [rows rounded up to 64, NH, D]; attention_group_sum adds the heads of a group.
template <int D>
__global__ static void __launch_bounds__(WT)
wmma_dkv_kernel(float *dkh, float *dvh, const float *dout, const float *delta, const float *lse, const float *q,
		const float *k, const float *v, const int *seq_start, const int *seq_end, int T, int NH, int NKV)
{
	typedef geometry<D> G;
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *Ks = (bf16 *)smem, *Vs = (bf16 *)(smem + G::BT), *Qs = (bf16 *)(smem + 2 * G::BT);
	bf16 *dOs = (bf16 *)(smem + 3 * G::BT);
	float *STs = (float *)(smem + 4 * G::BT), *DPTs = (float *)(smem + 4 * G::BT + G::ST);
	bf16 *PTs = (bf16 *)(smem + 4 * G::BT + 2 * G::ST), *dSTs = (bf16 *)(smem + 4 * G::BT + 2 * G::ST + G::PT);
	float *Lq = (float *)(smem + 4 * G::BT + 2 * G::ST + 2 * G::PT), *Dq = Lq + TILE;
	int *Sq = (int *)(Dq + TILE);
	int h = blockIdx.y, g = h / (NH / NKV), k0 = blockIdx.x * TILE;
	int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	int nk = min(TILE, T - k0);
	load_tiles<D>(Ks, Vs, k, v, k0, nk, (size_t)NKV * D, (size_t)g * D);
	acc_frag dKf[D / 16], dVf[D / 16];
	for (int j = 0; j < D / 16; j++) {
		wmma::fill_fragment(dKf[j], 0.0f);
		wmma::fill_fragment(dVf[j], 0.0f);
	}
	float scale = rsqrtf((float)D);
	int r = warp * 16 + lane / 2, half = lane & 1, s = k0 + r;
	bool rv = r < nk;
	int qend = seq_end[k0 + nk - 1];
	const bf16 *Kw = Ks + warp * 16 * G::LDB, *Vw = Vs + warp * 16 * G::LDB;
	float *STw = STs + warp * 16 * G::LDS, *DPTw = DPTs + warp * 16 * G::LDS;
	bf16 *PTw = PTs + warp * 16 * G::LDP, *dSTw = dSTs + warp * 16 * G::LDP;
	for (int qt = k0; qt < qend; qt += TILE) {
		int nq = min(TILE, qend - qt);
		__syncthreads();
		load_tiles<D>(Qs, dOs, q, dout, qt, nq, (size_t)NH * D, (size_t)h * D);
		for (int i = threadIdx.x; i < TILE; i += WT) {
			bool ok = i < nq;
			Lq[i] = ok ? lse[(size_t)(qt + i) * NH + h] : 0.0f;
			Dq[i] = ok ? delta[(size_t)(qt + i) * NH + h] : 0.0f;
			Sq[i] = ok ? seq_start[qt + i] : T;
		}
		__syncthreads();
		mm_16x64<D>(STw, G::LDS, Kw, G::LDB, Qs, G::LDB);
		mm_16x64<D>(DPTw, G::LDS, Vw, G::LDB, dOs, G::LDB);
		__syncwarp();
		for (int c = 0; c < 32; c++) {
			int col = half * 32 + c, t = qt + col;
			bool ok = rv && col < nq && t >= s && Sq[col] <= s;
			float p = 0.0f, ds = 0.0f;
			if (ok) {
				p = expf(STs[r * G::LDS + col] * scale - Lq[col]);
				ds = p * (DPTs[r * G::LDS + col] - Dq[col]);
			}
			PTs[r * G::LDP + col] = __float2bfloat16(p);
			dSTs[r * G::LDP + col] = __float2bfloat16(ds);
		}
		__syncwarp();
		for (int j = 0; j < D / 16; j++)
			for (int kk = 0; kk < TILE / 16; kk++) {
				mma_16x16<b_row>(dVf[j], PTw + kk * 16, G::LDP, dOs + (size_t)kk * 16 * G::LDB + j * 16, G::LDB);
				mma_16x16<b_row>(dKf[j], dSTw + kk * 16, G::LDP, Qs + (size_t)kk * 16 * G::LDB + j * 16, G::LDB);
			}
	}
	size_t off = ((size_t)(k0 + warp * 16) * NH + h) * D;
	for (int j = 0; j < D / 16; j++) {
		for (int i = 0; i < dKf[j].num_elements; i++)
			dKf[j].x[i] *= scale;
		wmma::store_matrix_sync(dkh + off + j * 16, dKf[j], (unsigned)(NH * D), wmma::mem_row_major);
		wmma::store_matrix_sync(dvh + off + j * 16, dVf[j], (unsigned)(NH * D), wmma::mem_row_major);
	}
}

// dk[t, g] = sum of dkh[t, h] over the heads h of group g (and dv alike).
__global__ static void attention_group_sum(float *dk, float *dv, const float *dkh, const float *dvh, int T, int NH,
					   int NKV, int D)
{
	size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, n = (size_t)T * NKV * D;
	if (i >= n)
		return;
	int d = (int)(i % D), g = (int)(i / D % NKV), group = NH / NKV;
	size_t t = i / ((size_t)D * NKV), base = (t * NH + (size_t)g * group) * D + d;
	float a = 0.0f, b = 0.0f;
	for (int hh = 0; hh < group; hh++) {
		a += dkh[base + (size_t)hh * D];
		b += dvh[base + (size_t)hh * D];
	}
	dk[i] = a;
	dv[i] = b;
}

template <int D>
static size_t forward_smem()
{
	typedef geometry<D> G;
	return 3 * G::BT + G::ST + G::PT + G::OT + 2 * TILE * 4;
}

template <int D>
static size_t dq_smem()
{
	typedef geometry<D> G;
	return 4 * G::BT + 2 * G::ST + G::PT;
}

template <int D>
static size_t dkv_smem()
{
	typedef geometry<D> G;
	return 4 * G::BT + 2 * G::ST + 2 * G::PT + 3 * TILE * 4;
}

template <int D>
static int wmma_forward(bf16 *out, float *lse, const float *q, const float *k, const float *v, const int *seq_start,
			int T, int NH, int NKV)
{
	size_t bytes = forward_smem<D>();
	if (cudaFuncSetAttribute(wmma_forward_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) !=
	    cudaSuccess)
		return -1;
	dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)NH);
	wmma_forward_kernel<D><<<grid, WT, bytes>>>(out, lse, q, k, v, seq_start, T, NH, NKV);
	return 0;
}

template <int D>
static int wmma_backward(float *dq, float *dk, float *dv, float *dkh, float *dvh, const float *delta,
			 const float *dout, const float *lse, const float *q, const float *k, const float *v,
			 const int *seq_start, const int *seq_end, int T, int NH, int NKV)
{
	size_t b1 = dq_smem<D>(), b2 = dkv_smem<D>();
	if (cudaFuncSetAttribute(wmma_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)b1) !=
		    cudaSuccess ||
	    cudaFuncSetAttribute(wmma_dkv_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)b2) !=
		    cudaSuccess)
		return -1;
	unsigned tiles = (unsigned)((T + TILE - 1) / TILE);
	wmma_dq_kernel<D><<<dim3(tiles, (unsigned)NH), WT, b1>>>(dq, dout, delta, lse, q, k, v, seq_start, T, NH, NKV);
	wmma_dkv_kernel<D><<<dim3(tiles, (unsigned)NH), WT, b2>>>(dkh, dvh, dout, delta, lse, q, k, v, seq_start, seq_end,
								 T, NH, NKV);
	size_t n = (size_t)T * NKV * D;
	attention_group_sum<<<(unsigned)((n + 255) / 256), 256>>>(dk, dv, dkh, dvh, T, NH, NKV, D);
	return 0;
}

int nn_cuda_attention_forward_wmma(bf16 *out, float *lse, const float *q, const float *k, const float *v,
				   const int *seq_start, int T, int NH, int NKV, int D)
{
	switch (D) {
	case 64: return wmma_forward<64>(out, lse, q, k, v, seq_start, T, NH, NKV);
	case 128: return wmma_forward<128>(out, lse, q, k, v, seq_start, T, NH, NKV);
	default: return -1;
	}
}

int nn_cuda_attention_backward_wmma(float *dq, float *dk, float *dv, float *dkh, float *dvh, const float *delta,
				    const float *dout, const float *lse, const float *q, const float *k, const float *v,
				    const int *seq_start, const int *seq_end, int T, int NH, int NKV, int D)
{
	switch (D) {
	case 64:
		return wmma_backward<64>(dq, dk, dv, dkh, dvh, delta, dout, lse, q, k, v, seq_start, seq_end, T, NH, NKV);
	case 128:
		return wmma_backward<128>(dq, dk, dv, dkh, dvh, delta, dout, lse, q, k, v, seq_start, seq_end, T, NH, NKV);
	default: return -1;
	}
}
