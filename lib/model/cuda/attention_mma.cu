// attention_mma: the flash attention of attention_cuda.cu on tensor cores
// the FlashAttention-2 way: mma.sync m16n8k16 (bf16 inputs, fp32
// accumulation) with operands loaded by ldmatrix from shared memory, tiles
// of keys and values (or queries and output gradients) double-buffered by
// cp.async, scores and probabilities kept in registers (an m16n8
// accumulator pair is an m16k16 operand, so P and dS go from one product
// into the next without touching memory). Four warps, 16 rows each.
//
// Forward: block (64 queries, head), online softmax over the key tiles.
// Backward in two passes, neither with atomics nor [T, T] storage:
//   dq:  block (64 queries, head): S = Q K^T, dP = dO V^T, dS = P (dP - delta), dQ += dS K;
//   dkv: block (64 keys, key/value head) over every query head of its group
//        and every query tile that can see its keys: S^T = K Q^T, dP^T = V dO^T,
//        dV += P^T dO, dK += dS^T Q; dK and dV are written once, summed over the group.
// Variants for measuring: CA_CUDA_ATTENTION_DQ=atomic folds the dq pass into the dkv pass
// (FlashAttention-2's atomics); CA_CUDA_ATTENTION_FWD=128 and CA_CUDA_ATTENTION_DQ=128 give each
// warp of the forward or of the dq pass 32 rows.
// Inputs are bf16 [T, heads * D] (the caller converts), dq/dk/dv fp32.
// order, when not NULL, holds 2 * ceil(T / 64) tile numbers: the query tiles,
// then the key tiles, in the order their blocks should start (most work
// first: a causal tile's work depends on where it sits in its sequence, and
// the heaviest blocks started last would leave the GPU idle at the end).
// The default attention for head_dim 16, 32, 64 and 128; checked against the
// CPU like every kernel (test-train-cuda, tests/gpu/t0510).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/nn_cuda.h"

#define MMA_THREADS 128
#define MMA_ROWS 64  // the block's own rows: queries (forward, dq) or keys (dkv)
#define LOG2E 1.4426950408889634f

// The warp-level primitives; emulate-attention.cpp replaces them to run the kernels on the host.
#ifndef ATTENTION_MMA_EMULATE
__device__ __forceinline__ static unsigned smem_u32(const void *p)
{
	return (unsigned)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared without registers; zeros when !ok (src is then not read).
__device__ __forceinline__ static void cp_async16(void *dst, const void *src, bool ok)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
		     "r"(ok ? 16 : 0));
}

__device__ __forceinline__ static void cp_async_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
__device__ __forceinline__ static void cp_async_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ static void ldsm_x4(unsigned r[4], const bf16 *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p)));
}

__device__ __forceinline__ static void ldsm_x4_trans(unsigned r[4], const bf16 *p)
{
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(smem_u32(p)));
}

// c[16 x 8] += a[16 x 16] b[16 x 8]. Lane l (g = l / 4, j = l % 4) holds c[g][2j..2j+1] in c[0..1],
// c[g + 8][2j..2j+1] in c[2..3]; a[g][2j..], a[g + 8][2j..], a[g][2j + 8..], a[g + 8][2j + 8..];
// b[2j..2j+1][g], b[2j + 8..2j + 9][g].
__device__ __forceinline__ static void mma16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ static unsigned pack_bf16(float lo, float hi)
{
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(unsigned *)&v;
}

#endif

// The a operand rows [row0, row0 + 16) x cols [k0, k0 + 16) of a row-major tile.
__device__ __forceinline__ static void load_a(unsigned a[4], const bf16 *s, int ld, int row0, int k0, int lane)
{
	ldsm_x4(a, s + (row0 + (lane & 15)) * ld + k0 + (lane >> 4) * 8);
}

// b operands of two n-tiles n0, n0 + 8 at k0 from a tile stored n-major (row n holds b[., n]: keys
// for Q K^T): b[0], b[1] for n0, b[2], b[3] for n0 + 8.
__device__ __forceinline__ static void load_b_nmajor(unsigned b[4], const bf16 *s, int ld, int n0, int k0, int lane)
{
	ldsm_x4(b, s + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}

// The same from a tile stored k-major (row k holds b[k, .]: values for P V).
__device__ __forceinline__ static void load_b_kmajor(unsigned b[4], const bf16 *s, int ld, int k0, int n0, int lane)
{
	ldsm_x4_trans(b, s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}

// rows [row0, row0 + n) of a [., stride] bf16 matrix (D columns from src) into a [rows][D + 8] tile,
// zeros past n: cp.async, the caller commits.
template <int D>
__device__ __forceinline__ static void load_rows(bf16 *dst, const bf16 *src, size_t stride, int row0, int n, int rows)
{
	constexpr int CH = D / 8, LD = D + 8;
	for (int i = threadIdx.x; i < rows * CH; i += MMA_THREADS) {
		int r = i / CH, c = i % CH;
		bool ok = r < n;
		cp_async16(dst + r * LD + c * 8, src + (size_t)(row0 + (ok ? r : 0)) * stride + c * 8, ok);
	}
}

// s[16 x 8 NT] = a-tile rows (row0..) times b-tile (n-major, NT * 8 rows), inner dimension D.
template <int D, int NT>
__device__ __forceinline__ static void warp_scores(float s[NT][4], const bf16 *a, int row0, const bf16 *b, int lane)
{
	constexpr int LD = D + 8;
	for (int n = 0; n < NT; n++)
		s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++) {
		unsigned af[4];
		load_a(af, a, LD, row0, kk * 16, lane);
#pragma unroll
		for (int n = 0; n < NT / 2; n++) {
			unsigned bf[4];
			load_b_nmajor(bf, b, LD, n * 16, kk * 16, lane);
			mma16816(s[2 * n], af, bf[0], bf[1]);
			mma16816(s[2 * n + 1], af, bf[2], bf[3]);
		}
	}
}

// The same with the a operand already in registers (a[kk] for columns kk * 16..).
template <int D, int NT>
__device__ __forceinline__ static void warp_scores_held(float s[NT][4], const unsigned a[D / 16][4], const bf16 *b,
							int lane)
{
	constexpr int LD = D + 8;
	for (int n = 0; n < NT; n++)
		s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
		for (int n = 0; n < NT / 2; n++) {
			unsigned bf[4];
			load_b_nmajor(bf, b, LD, n * 16, kk * 16, lane);
			mma16816(s[2 * n], a[kk], bf[0], bf[1]);
			mma16816(s[2 * n + 1], a[kk], bf[2], bf[3]);
		}
	}
}

// acc[16 x D] += p[16 x 8 NT] (registers, as scores) times b-tile (k-major, NT * 8 rows by D).
template <int D, int NT>
__device__ __forceinline__ static void warp_accumulate(float acc[D / 8][4], const float p[NT][4], const bf16 *b, int lane)
{
	constexpr int LD = D + 8;
#pragma unroll
	for (int kk = 0; kk < NT / 2; kk++) {
		unsigned af[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]), pack_bf16(p[2 * kk][2], p[2 * kk][3]),
				  pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
		for (int n = 0; n < D / 16; n++) {
			unsigned bf[4];
			load_b_kmajor(bf, b, LD, kk * 16, n * 16, lane);
			mma16816(acc[2 * n], af, bf[0], bf[1]);
			mma16816(acc[2 * n + 1], af, bf[2], bf[3]);
		}
	}
}

template <int D, int BK>
__global__ static void __launch_bounds__(MMA_THREADS)
mma_forward_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *seq_start,
		   const int *order, int T, int NH, int NKV)
{
	constexpr int LD = D + 8, NT = BK / 8;
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *Qs = (bf16 *)smem, *Ks = Qs + MMA_ROWS * LD, *Vs = Ks + 2 * BK * LD;
	int h = blockIdx.y, g = h / (NH / NKV);
	int q0 = (order ? order[blockIdx.x] : gridDim.x - 1 - blockIdx.x) * MMA_ROWS;  // the longest rows first
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int nq = min(MMA_ROWS, T - q0), qlast = q0 + nq - 1;
	size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
	const bf16 *kg = k + (size_t)g * D, *vg = v + (size_t)g * D;
	int kbegin = seq_start[q0], first_of_last = seq_start[qlast];
	load_rows<D>(Qs, q + (size_t)h * D, qs, q0, nq, MMA_ROWS);
	load_rows<D>(Ks, kg, ks, kbegin, min(BK, qlast - kbegin + 1), BK);
	load_rows<D>(Vs, vg, ks, kbegin, min(BK, qlast - kbegin + 1), BK);
	cp_async_commit();
	int row[2], tq[2], tstart[2];
	bool valid[2];
	for (int i = 0; i < 2; i++) {
		row[i] = warp * 16 + (lane >> 2) + 8 * i;
		tq[i] = q0 + row[i];
		valid[i] = row[i] < nq;
		tstart[i] = valid[i] ? seq_start[tq[i]] : T;
	}
	float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
	for (int n = 0; n < D / 8; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	const float sl2 = rsqrtf((float)D) * LOG2E;
	int buf = 0;
	for (int kt = kbegin; kt <= qlast; kt += BK, buf ^= 1) {
		int nk = min(BK, qlast - kt + 1), kn = kt + BK;
		if (kn <= qlast) {
			load_rows<D>(Ks + (buf ^ 1) * BK * LD, kg, ks, kn, min(BK, qlast - kn + 1), BK);
			load_rows<D>(Vs + (buf ^ 1) * BK * LD, vg, ks, kn, min(BK, qlast - kn + 1), BK);
		}
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads();
		const bf16 *Kb = Ks + buf * BK * LD, *Vb = Vs + buf * BK * LD;
		float s[NT][4];
		warp_scores<D, NT>(s, Qs, warp * 16, Kb, lane);
		// Every key of the tile before every query, all in the last query's sequence: nothing masked.
		bool full = nk == BK && kt + BK - 1 <= q0 && kt >= first_of_last;
		if (!full)
#pragma unroll
			for (int n = 0; n < NT; n++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int i = e >> 1, col = n * 8 + 2 * (lane & 3) + (e & 1), key = kt + col;
					if (!(valid[i] && col < nk && key >= tstart[i] && key <= tq[i]))
						s[n][e] = -INFINITY;
				}
		for (int i = 0; i < 2; i++) {
			float mx = -INFINITY;
			for (int n = 0; n < NT; n++)
				mx = fmaxf(mx, fmaxf(s[n][2 * i], s[n][2 * i + 1]));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
			float mnew = fmaxf(m[i], mx);
			float base = mnew == -INFINITY ? 0.0f : mnew * sl2;
			float corr = exp2f(m[i] * sl2 - base), sum = 0.0f;
			m[i] = mnew;
			for (int n = 0; n < NT; n++)
				for (int j = 0; j < 2; j++) {
					float p = exp2f(s[n][2 * i + j] * sl2 - base);
					s[n][2 * i + j] = p;
					sum += p;
				}
			l[i] = l[i] * corr + sum;  // this lane's part of the row; the quad adds up at the end
			for (int n = 0; n < D / 8; n++) {
				o[n][2 * i] *= corr;
				o[n][2 * i + 1] *= corr;
			}
		}
		warp_accumulate<D, NT>(o, s, Vb, lane);
		__syncthreads();
	}
	cp_async_wait<0>();
	float scale = rsqrtf((float)D);
	for (int i = 0; i < 2; i++) {
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
		if (!valid[i])
			continue;
		float inv = 1.0f / l[i];
		bf16 *op = out + ((size_t)tq[i] * NH + h) * D + 2 * (lane & 3);
		for (int n = 0; n < D / 8; n++)
			*(__nv_bfloat162 *)(op + n * 8) = __floats2bfloat162_rn(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
		if ((lane & 3) == 0)
			lse[(size_t)tq[i] * NH + h] = m[i] * scale + logf(l[i]);
	}
}

// The forward with two m-tiles per warp (128 queries per block): every K and V operand loaded
// from shared memory feeds two products. CA_CUDA_ATTENTION_FWD=128 selects it.
template <int D, int NT>
__device__ __forceinline__ static void warp_scores2(float s[2][NT][4], const bf16 *a, int row0, const bf16 *b, int lane)
{
	constexpr int LD = D + 8;
	for (int mt = 0; mt < 2; mt++)
		for (int n = 0; n < NT; n++)
			s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
	for (int kk = 0; kk < D / 16; kk++) {
		unsigned af[2][4];
		load_a(af[0], a, LD, row0, kk * 16, lane);
		load_a(af[1], a, LD, row0 + 16, kk * 16, lane);
#pragma unroll
		for (int n = 0; n < NT / 2; n++) {
			unsigned bf[4];
			load_b_nmajor(bf, b, LD, n * 16, kk * 16, lane);
#pragma unroll
			for (int mt = 0; mt < 2; mt++) {
				mma16816(s[mt][2 * n], af[mt], bf[0], bf[1]);
				mma16816(s[mt][2 * n + 1], af[mt], bf[2], bf[3]);
			}
		}
	}
}

template <int D, int NT>
__device__ __forceinline__ static void warp_accumulate2(float acc[2][D / 8][4], const float p[2][NT][4], const bf16 *b,
							int lane)
{
	constexpr int LD = D + 8;
#pragma unroll
	for (int kk = 0; kk < NT / 2; kk++) {
		unsigned af[2][4];
#pragma unroll
		for (int mt = 0; mt < 2; mt++) {
			af[mt][0] = pack_bf16(p[mt][2 * kk][0], p[mt][2 * kk][1]);
			af[mt][1] = pack_bf16(p[mt][2 * kk][2], p[mt][2 * kk][3]);
			af[mt][2] = pack_bf16(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
			af[mt][3] = pack_bf16(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
		}
#pragma unroll
		for (int n = 0; n < D / 16; n++) {
			unsigned bf[4];
			load_b_kmajor(bf, b, LD, kk * 16, n * 16, lane);
#pragma unroll
			for (int mt = 0; mt < 2; mt++) {
				mma16816(acc[mt][2 * n], af[mt], bf[0], bf[1]);
				mma16816(acc[mt][2 * n + 1], af[mt], bf[2], bf[3]);
			}
		}
	}
}

template <int D, int BK>
__global__ static void __launch_bounds__(MMA_THREADS)
mma_forward2_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *seq_start, int T,
		    int NH, int NKV)
{
	constexpr int LD = D + 8, NT = BK / 8, ROWS = 2 * MMA_ROWS;
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *Qs = (bf16 *)smem, *Ks = Qs + ROWS * LD, *Vs = Ks + 2 * BK * LD;
	int h = blockIdx.y, g = h / (NH / NKV);
	int q0 = (gridDim.x - 1 - blockIdx.x) * ROWS;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int nq = min(ROWS, T - q0), qlast = q0 + nq - 1;
	size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
	const bf16 *kg = k + (size_t)g * D, *vg = v + (size_t)g * D;
	int kbegin = seq_start[q0], first_of_last = seq_start[qlast];
	load_rows<D>(Qs, q + (size_t)h * D, qs, q0, nq, ROWS);
	load_rows<D>(Ks, kg, ks, kbegin, min(BK, qlast - kbegin + 1), BK);
	load_rows<D>(Vs, vg, ks, kbegin, min(BK, qlast - kbegin + 1), BK);
	cp_async_commit();
	// Warp w holds rows w * 32 + mt * 16 + lane / 4 (+ 8): index [mt][i].
	int tq[2][2], tstart[2][2];
	bool valid[2][2];
	for (int mt = 0; mt < 2; mt++)
		for (int i = 0; i < 2; i++) {
			int r = warp * 32 + mt * 16 + (lane >> 2) + 8 * i;
			tq[mt][i] = q0 + r;
			valid[mt][i] = r < nq;
			tstart[mt][i] = valid[mt][i] ? seq_start[tq[mt][i]] : T;
		}
	float o[2][D / 8][4], m[2][2], l[2][2];
	for (int mt = 0; mt < 2; mt++) {
		for (int n = 0; n < D / 8; n++)
			o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
		m[mt][0] = m[mt][1] = -INFINITY;
		l[mt][0] = l[mt][1] = 0.0f;
	}
	const float sl2 = rsqrtf((float)D) * LOG2E;
	int buf = 0;
	for (int kt = kbegin; kt <= qlast; kt += BK, buf ^= 1) {
		int nk = min(BK, qlast - kt + 1), kn = kt + BK;
		if (kn <= qlast) {
			load_rows<D>(Ks + (buf ^ 1) * BK * LD, kg, ks, kn, min(BK, qlast - kn + 1), BK);
			load_rows<D>(Vs + (buf ^ 1) * BK * LD, vg, ks, kn, min(BK, qlast - kn + 1), BK);
		}
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads();
		const bf16 *Kb = Ks + buf * BK * LD, *Vb = Vs + buf * BK * LD;
		float s[2][NT][4];
		warp_scores2<D, NT>(s, Qs, warp * 32, Kb, lane);
		bool full = nk == BK && kt + BK - 1 <= q0 && kt >= first_of_last;
		if (!full)
#pragma unroll
			for (int mt = 0; mt < 2; mt++)
#pragma unroll
				for (int n = 0; n < NT; n++)
#pragma unroll
					for (int e = 0; e < 4; e++) {
						int i = e >> 1, col = n * 8 + 2 * (lane & 3) + (e & 1), key = kt + col;
						if (!(valid[mt][i] && col < nk && key >= tstart[mt][i] && key <= tq[mt][i]))
							s[mt][n][e] = -INFINITY;
					}
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int i = 0; i < 2; i++) {
				float mx = -INFINITY;
				for (int n = 0; n < NT; n++)
					mx = fmaxf(mx, fmaxf(s[mt][n][2 * i], s[mt][n][2 * i + 1]));
				mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
				mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
				float mnew = fmaxf(m[mt][i], mx);
				float base = mnew == -INFINITY ? 0.0f : mnew * sl2;
				float corr = exp2f(m[mt][i] * sl2 - base), sum = 0.0f;
				m[mt][i] = mnew;
				for (int n = 0; n < NT; n++)
					for (int j = 0; j < 2; j++) {
						float p = exp2f(s[mt][n][2 * i + j] * sl2 - base);
						s[mt][n][2 * i + j] = p;
						sum += p;
					}
				l[mt][i] = l[mt][i] * corr + sum;
				for (int n = 0; n < D / 8; n++) {
					o[mt][n][2 * i] *= corr;
					o[mt][n][2 * i + 1] *= corr;
				}
			}
		warp_accumulate2<D, NT>(o, s, Vb, lane);
		__syncthreads();
	}
	cp_async_wait<0>();
	float scale = rsqrtf((float)D);
	for (int mt = 0; mt < 2; mt++)
		for (int i = 0; i < 2; i++) {
			float li = l[mt][i];
			li += __shfl_xor_sync(0xffffffffu, li, 1);
			li += __shfl_xor_sync(0xffffffffu, li, 2);
			if (!valid[mt][i])
				continue;
			float inv = 1.0f / li;
			bf16 *op = out + ((size_t)tq[mt][i] * NH + h) * D + 2 * (lane & 3);
			for (int n = 0; n < D / 8; n++)
				*(__nv_bfloat162 *)(op + n * 8) =
					__floats2bfloat162_rn(o[mt][n][2 * i] * inv, o[mt][n][2 * i + 1] * inv);
			if ((lane & 3) == 0)
				lse[(size_t)tq[mt][i] * NH + h] = m[mt][i] * scale + logf(li);
		}
}

template <int D, int BK>
__global__ static void __launch_bounds__(MMA_THREADS)
mma_dq_kernel(float *dq, const bf16 *dout, const float *delta, const float *lse, const bf16 *q, const bf16 *k,
	      const bf16 *v, const int *seq_start, const int *order, int T, int NH, int NKV)
{
	constexpr int LD = D + 8, NT = BK / 8;
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *Qs = (bf16 *)smem, *dOs = Qs + MMA_ROWS * LD, *Ks = dOs + MMA_ROWS * LD, *Vs = Ks + 2 * BK * LD;
	int h = blockIdx.y, g = h / (NH / NKV);
	int q0 = (order ? order[blockIdx.x] : gridDim.x - 1 - blockIdx.x) * MMA_ROWS;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int nq = min(MMA_ROWS, T - q0), qlast = q0 + nq - 1;
	size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
	const bf16 *kg = k + (size_t)g * D, *vg = v + (size_t)g * D;
	int kbegin = seq_start[q0], first_of_last = seq_start[qlast];
	load_rows<D>(Qs, q + (size_t)h * D, qs, q0, nq, MMA_ROWS);
	load_rows<D>(dOs, dout + (size_t)h * D, qs, q0, nq, MMA_ROWS);
	load_rows<D>(Ks, kg, ks, kbegin, min(BK, qlast - kbegin + 1), BK);
	load_rows<D>(Vs, vg, ks, kbegin, min(BK, qlast - kbegin + 1), BK);
	cp_async_commit();
	int tq[2], tstart[2];
	bool valid[2];
	float L2[2], Dt[2];
	for (int i = 0; i < 2; i++) {
		int r = warp * 16 + (lane >> 2) + 8 * i;
		tq[i] = q0 + r;
		valid[i] = r < nq;
		tstart[i] = valid[i] ? seq_start[tq[i]] : T;
		L2[i] = valid[i] ? lse[(size_t)tq[i] * NH + h] * LOG2E : 0.0f;
		Dt[i] = valid[i] ? delta[(size_t)tq[i] * NH + h] : 0.0f;
	}
	float acc[D / 8][4];
	for (int n = 0; n < D / 8; n++)
		acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
	const float sl2 = rsqrtf((float)D) * LOG2E;
	int buf = 0;
	for (int kt = kbegin; kt <= qlast; kt += BK, buf ^= 1) {
		int nk = min(BK, qlast - kt + 1), kn = kt + BK;
		if (kn <= qlast) {
			load_rows<D>(Ks + (buf ^ 1) * BK * LD, kg, ks, kn, min(BK, qlast - kn + 1), BK);
			load_rows<D>(Vs + (buf ^ 1) * BK * LD, vg, ks, kn, min(BK, qlast - kn + 1), BK);
		}
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads();
		const bf16 *Kb = Ks + buf * BK * LD, *Vb = Vs + buf * BK * LD;
		float s[NT][4], dp[NT][4];
		warp_scores<D, NT>(s, Qs, warp * 16, Kb, lane);
		warp_scores<D, NT>(dp, dOs, warp * 16, Vb, lane);
		bool full = nk == BK && kt + BK - 1 <= q0 && kt >= first_of_last;
#pragma unroll
		for (int n = 0; n < NT; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int i = e >> 1, col = n * 8 + 2 * (lane & 3) + (e & 1), key = kt + col;
				bool ok = full || (valid[i] && col < nk && key >= tstart[i] && key <= tq[i]);
				float p = ok ? exp2f(s[n][e] * sl2 - L2[i]) : 0.0f;
				s[n][e] = p * (dp[n][e] - Dt[i]);
			}
		warp_accumulate<D, NT>(acc, s, Kb, lane);
		__syncthreads();
	}
	cp_async_wait<0>();
	float scale = rsqrtf((float)D);
	for (int i = 0; i < 2; i++) {
		if (!valid[i])
			continue;
		float *op = dq + ((size_t)tq[i] * NH + h) * D + 2 * (lane & 3);
		for (int n = 0; n < D / 8; n++)
			*(float2 *)(op + n * 8) = make_float2(acc[n][2 * i] * scale, acc[n][2 * i + 1] * scale);
	}
}

// The dq pass with two m-tiles per warp (128 queries per block, keys 32 at a time): every K and
// V operand feeds two products. CA_CUDA_ATTENTION_DQ=128 selects it (head_dim up to 64).
template <int D, int BK>
__global__ static void __launch_bounds__(MMA_THREADS)
mma_dq2_kernel(float *dq, const bf16 *dout, const float *delta, const float *lse, const bf16 *q, const bf16 *k,
	       const bf16 *v, const int *seq_start, int T, int NH, int NKV)
{
	constexpr int LD = D + 8, NT = BK / 8, ROWS = 2 * MMA_ROWS;
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *Qs = (bf16 *)smem, *dOs = Qs + ROWS * LD, *Ks = dOs + ROWS * LD, *Vs = Ks + 2 * BK * LD;
	int h = blockIdx.y, g = h / (NH / NKV);
	int q0 = (gridDim.x - 1 - blockIdx.x) * ROWS;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int nq = min(ROWS, T - q0), qlast = q0 + nq - 1;
	size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
	const bf16 *kg = k + (size_t)g * D, *vg = v + (size_t)g * D;
	int kbegin = seq_start[q0], first_of_last = seq_start[qlast];
	load_rows<D>(Qs, q + (size_t)h * D, qs, q0, nq, ROWS);
	load_rows<D>(dOs, dout + (size_t)h * D, qs, q0, nq, ROWS);
	load_rows<D>(Ks, kg, ks, kbegin, min(BK, qlast - kbegin + 1), BK);
	load_rows<D>(Vs, vg, ks, kbegin, min(BK, qlast - kbegin + 1), BK);
	cp_async_commit();
	// Warp w holds rows w * 32 + mt * 16 + lane / 4 (+ 8): index [mt][i].
	int tq[2][2], tstart[2][2];
	bool valid[2][2];
	float L2[2][2], Dt[2][2];
	for (int mt = 0; mt < 2; mt++)
		for (int i = 0; i < 2; i++) {
			int r = warp * 32 + mt * 16 + (lane >> 2) + 8 * i;
			tq[mt][i] = q0 + r;
			valid[mt][i] = r < nq;
			tstart[mt][i] = valid[mt][i] ? seq_start[tq[mt][i]] : T;
			L2[mt][i] = valid[mt][i] ? lse[(size_t)tq[mt][i] * NH + h] * LOG2E : 0.0f;
			Dt[mt][i] = valid[mt][i] ? delta[(size_t)tq[mt][i] * NH + h] : 0.0f;
		}
	float acc[2][D / 8][4];
	for (int mt = 0; mt < 2; mt++)
		for (int n = 0; n < D / 8; n++)
			acc[mt][n][0] = acc[mt][n][1] = acc[mt][n][2] = acc[mt][n][3] = 0.0f;
	const float sl2 = rsqrtf((float)D) * LOG2E;
	int buf = 0;
	for (int kt = kbegin; kt <= qlast; kt += BK, buf ^= 1) {
		int nk = min(BK, qlast - kt + 1), kn = kt + BK;
		if (kn <= qlast) {
			load_rows<D>(Ks + (buf ^ 1) * BK * LD, kg, ks, kn, min(BK, qlast - kn + 1), BK);
			load_rows<D>(Vs + (buf ^ 1) * BK * LD, vg, ks, kn, min(BK, qlast - kn + 1), BK);
		}
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads();
		const bf16 *Kb = Ks + buf * BK * LD, *Vb = Vs + buf * BK * LD;
		float s[2][NT][4], dp[2][NT][4];
		warp_scores2<D, NT>(s, Qs, warp * 32, Kb, lane);
		warp_scores2<D, NT>(dp, dOs, warp * 32, Vb, lane);
		bool full = nk == BK && kt + BK - 1 <= q0 && kt >= first_of_last;
#pragma unroll
		for (int mt = 0; mt < 2; mt++)
#pragma unroll
			for (int n = 0; n < NT; n++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int i = e >> 1, col = n * 8 + 2 * (lane & 3) + (e & 1), key = kt + col;
					bool ok = full || (valid[mt][i] && col < nk && key >= tstart[mt][i] && key <= tq[mt][i]);
					float p = ok ? exp2f(s[mt][n][e] * sl2 - L2[mt][i]) : 0.0f;
					s[mt][n][e] = p * (dp[mt][n][e] - Dt[mt][i]);
				}
		warp_accumulate2<D, NT>(acc, s, Kb, lane);
		__syncthreads();
	}
	cp_async_wait<0>();
	float scale = rsqrtf((float)D);
	for (int mt = 0; mt < 2; mt++)
		for (int i = 0; i < 2; i++) {
			if (!valid[mt][i])
				continue;
			float *op = dq + ((size_t)tq[mt][i] * NH + h) * D + 2 * (lane & 3);
			for (int n = 0; n < D / 8; n++)
				*(float2 *)(op + n * 8) = make_float2(acc[mt][n][2 * i] * scale, acc[mt][n][2 * i + 1] * scale);
		}
}

// With DQ_ATOMIC also dQ, the FlashAttention-2 way: dS^T goes through shared memory and each
// query tile's dS K is added to dq (zeroed before) with atomics; no separate dq pass then.
template <int D, int BQ, bool DQ_ATOMIC>
__global__ static void __launch_bounds__(MMA_THREADS)
mma_dkv_kernel(float *dk, float *dv, float *dq, const bf16 *dout, const float *delta, const float *lse, const bf16 *q,
	       const bf16 *k, const bf16 *v, const int *seq_start, const int *seq_end, const int *order, int T, int NH,
	       int NKV)
{
	constexpr int LD = D + 8, NT = BQ / 8, LDS = BQ + 8;
	extern __shared__ __align__(128) unsigned char smem[];
	bf16 *Ks = (bf16 *)smem, *Vs = Ks + MMA_ROWS * LD, *Qs = Vs + MMA_ROWS * LD, *dOs = Qs + 2 * BQ * LD;
	float *L2s = (float *)(dOs + 2 * BQ * LD), *Ds = L2s + 2 * BQ;
	int *Ss = (int *)(Ds + 2 * BQ);
	bf16 *dSs = (bf16 *)(Ss + 2 * BQ);  // [64 keys][LDS]: dS^T, DQ_ATOMIC only
	int g = blockIdx.y, group = NH / NKV;
	int k0 = (order ? order[gridDim.x + blockIdx.x] : blockIdx.x) * MMA_ROWS;  // the longest columns first
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	int nk = min(MMA_ROWS, T - k0), qend = seq_end[k0 + nk - 1];
	size_t qs = (size_t)NH * D, ks = (size_t)NKV * D;
	load_rows<D>(Ks, k + (size_t)g * D, ks, k0, nk, MMA_ROWS);
	load_rows<D>(Vs, v + (size_t)g * D, ks, k0, nk, MMA_ROWS);
	int ntiles = (qend - k0 + BQ - 1) / BQ, total = ntiles * group;
	// Iteration it: query head g * group + it / ntiles, query tile k0 + (it % ntiles) * BQ.
	auto stage = [&](int it, int b) {
		int h = g * group + it / ntiles, qt = k0 + (it % ntiles) * BQ, n = min(BQ, qend - qt);
		load_rows<D>(Qs + b * BQ * LD, q + (size_t)h * D, qs, qt, n, BQ);
		load_rows<D>(dOs + b * BQ * LD, dout + (size_t)h * D, qs, qt, n, BQ);
		for (int i = threadIdx.x; i < BQ; i += MMA_THREADS) {
			bool ok = i < n;
			L2s[b * BQ + i] = ok ? lse[(size_t)(qt + i) * NH + h] * LOG2E : 0.0f;
			Ds[b * BQ + i] = ok ? delta[(size_t)(qt + i) * NH + h] : 0.0f;
			Ss[b * BQ + i] = ok ? seq_start[qt + i] : T;
		}
	};
	stage(0, 0);
	cp_async_commit();
	int row[2], skey[2];
	bool valid[2];
	for (int i = 0; i < 2; i++) {
		row[i] = warp * 16 + (lane >> 2) + 8 * i;
		skey[i] = k0 + row[i];
		valid[i] = row[i] < nk;
	}
	float dka[D / 8][4], dva[D / 8][4];
	for (int n = 0; n < D / 8; n++)
		for (int e = 0; e < 4; e++)
			dka[n][e] = dva[n][e] = 0.0f;
	const float sl2 = rsqrtf((float)D) * LOG2E;
	// Heads of up to 64 keep the warp's K and V operands in registers (they fit beside the accumulators).
	constexpr bool HOLD = D <= 64;
	unsigned kf[HOLD ? D / 16 : 1][4], vf[HOLD ? D / 16 : 1][4];
	int buf = 0;
	for (int it = 0; it < total; it++, buf ^= 1) {
		if (it + 1 < total)
			stage(it + 1, buf ^ 1);
		cp_async_commit();
		cp_async_wait<1>();
		__syncthreads();
		int qt = k0 + (it % ntiles) * BQ, nq = min(BQ, qend - qt);
		const bf16 *Qb = Qs + buf * BQ * LD, *dOb = dOs + buf * BQ * LD;
		const float *L2b = L2s + buf * BQ, *Db = Ds + buf * BQ;
		const int *Sb = Ss + buf * BQ;
		float s[NT][4], dp[NT][4];
		if constexpr (HOLD) {
			if (it == 0)  // the warp's keys and values as a operands, for every iteration
				for (int kk = 0; kk < D / 16; kk++) {
					load_a(kf[kk], Ks, LD, warp * 16, kk * 16, lane);
					load_a(vf[kk], Vs, LD, warp * 16, kk * 16, lane);
				}
			warp_scores_held<D, NT>(s, kf, Qb, lane);
			warp_scores_held<D, NT>(dp, vf, dOb, lane);
		} else {
			warp_scores<D, NT>(s, Ks, warp * 16, Qb, lane);
			warp_scores<D, NT>(dp, Vs, warp * 16, dOb, lane);
		}
		// Every query of the tile after every key, all in the first key's sequence: nothing masked.
		bool full = nq == BQ && nk == MMA_ROWS && qt >= k0 + MMA_ROWS - 1 && Sb[BQ - 1] <= k0;
#pragma unroll
		for (int n = 0; n < NT; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int i = e >> 1, col = n * 8 + 2 * (lane & 3) + (e & 1), t = qt + col;
				bool ok = full || (valid[i] && col < nq && t >= skey[i] && Sb[col] <= skey[i]);
				float p = ok ? exp2f(s[n][e] * sl2 - L2b[col]) : 0.0f;
				s[n][e] = p;
				dp[n][e] = p * (dp[n][e] - Db[col]);
			}
		warp_accumulate<D, NT>(dva, s, dOb, lane);
		warp_accumulate<D, NT>(dka, dp, Qb, lane);
		if (DQ_ATOMIC) {
			for (int n = 0; n < NT; n++) {
				int col = n * 8 + 2 * (lane & 3);
				*(unsigned *)(dSs + row[0] * LDS + col) = pack_bf16(dp[n][0], dp[n][1]);
				*(unsigned *)(dSs + row[1] * LDS + col) = pack_bf16(dp[n][2], dp[n][3]);
			}
			__syncthreads();
			// dQ[BQ x D] = dS K: warp w takes query rows (w % RG) * 16 and D / (4 / RG) of the columns.
			constexpr int RG = BQ / 16, DC = D / (4 / RG);
			int r0 = (warp % RG) * 16, c0 = (warp / RG) * DC;
			float acc[DC / 8][4];
			for (int n = 0; n < DC / 8; n++)
				acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
			for (int kk = 0; kk < MMA_ROWS / 16; kk++) {
				unsigned af[4];  // dS rows r0.. = dS^T read transposed
				ldsm_x4_trans(af, dSs + (kk * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * LDS + r0 +
							  ((lane >> 3) & 1) * 8);
#pragma unroll
				for (int n = 0; n < DC / 16; n++) {
					unsigned bf[4];
					load_b_kmajor(bf, Ks, LD, kk * 16, c0 + n * 16, lane);
					mma16816(acc[2 * n], af, bf[0], bf[1]);
					mma16816(acc[2 * n + 1], af, bf[2], bf[3]);
				}
			}
			int h = g * group + it / ntiles;
			float scale = rsqrtf((float)D);
			for (int i = 0; i < 2; i++) {
				int r = r0 + (lane >> 2) + 8 * i;
				if (r >= nq)
					continue;
				float *dst = dq + ((size_t)(qt + r) * NH + h) * D + c0 + 2 * (lane & 3);
				for (int n = 0; n < DC / 8; n++) {
					atomicAdd(dst + n * 8, acc[n][2 * i] * scale);
					atomicAdd(dst + n * 8 + 1, acc[n][2 * i + 1] * scale);
				}
			}
		}
		__syncthreads();
	}
	cp_async_wait<0>();
	float scale = rsqrtf((float)D);
	for (int i = 0; i < 2; i++) {
		if (!valid[i])
			continue;
		size_t off = ((size_t)skey[i] * NKV + g) * D + 2 * (lane & 3);
		for (int n = 0; n < D / 8; n++) {
			*(float2 *)(dk + off + n * 8) = make_float2(dka[n][2 * i] * scale, dka[n][2 * i + 1] * scale);
			*(float2 *)(dv + off + n * 8) = make_float2(dva[n][2 * i], dva[n][2 * i + 1]);
		}
	}
}

#ifndef ATTENTION_MMA_EMULATE
template <typename K>
static int allow_smem(K kernel, size_t bytes)
{
	return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) == cudaSuccess ? 0
														      : -1;
}

// CA_CUDA_ATTENTION_DQ=atomic: dQ added up inside the dk/dv pass (see mma_dkv_kernel) instead of its own
// pass; =128: the dq pass with 128 queries per block (mma_dq2_kernel).
enum { DQ_PASS, DQ_ATOMIC, DQ_PASS_128 };

static int dq_kind(void)
{
	static int chosen = -1;
	if (chosen < 0) {
		const char *e = getenv("CA_CUDA_ATTENTION_DQ");
		chosen = !e ? DQ_PASS : strcmp(e, "atomic") == 0 ? DQ_ATOMIC : strcmp(e, "128") == 0 ? DQ_PASS_128 : DQ_PASS;
	}
	return chosen;
}

// Key (or query) tile of the inner loop: 64, or 32 where D = 128 would need too many registers.
#define INNER(D) ((D) >= 128 ? 32 : 64)

// CA_CUDA_ATTENTION_FWD=128: the forward with 128 queries per block (mma_forward2_kernel).
static bool forward_128(void)
{
	static int chosen = -1;
	if (chosen < 0) {
		const char *e = getenv("CA_CUDA_ATTENTION_FWD");
		chosen = e && strcmp(e, "128") == 0;
	}
	return chosen;
}

template <int D>
static int forward_d(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *seq_start,
		     const int *order, int T, int NH, int NKV)
{
	constexpr int BK = 64;
	if constexpr (D <= 64) {
		if (forward_128()) {
			size_t bytes = (size_t)(2 * MMA_ROWS + 4 * BK) * (D + 8) * sizeof(bf16);
			if (allow_smem(mma_forward2_kernel<D, BK>, bytes) < 0)
				return -1;
			dim3 grid((unsigned)((T + 2 * MMA_ROWS - 1) / (2 * MMA_ROWS)), (unsigned)NH);
			mma_forward2_kernel<D, BK><<<grid, MMA_THREADS, bytes>>>(out, lse, q, k, v, seq_start, T, NH, NKV);
			return 0;
		}
	}
	size_t bytes = (size_t)(MMA_ROWS + 4 * BK) * (D + 8) * sizeof(bf16);
	if (allow_smem(mma_forward_kernel<D, BK>, bytes) < 0)
		return -1;
	dim3 grid((unsigned)((T + MMA_ROWS - 1) / MMA_ROWS), (unsigned)NH);
	mma_forward_kernel<D, BK><<<grid, MMA_THREADS, bytes>>>(out, lse, q, k, v, seq_start, order, T, NH, NKV);
	return 0;
}

template <int D>
static int backward_d(float *dq, float *dk, float *dv, const float *delta, const bf16 *dout, const float *lse,
		      const bf16 *q, const bf16 *k, const bf16 *v, const int *seq_start, const int *seq_end,
		      const int *order, int T, int NH, int NKV)
{
	constexpr int B = INNER(D);
	unsigned tiles = (unsigned)((T + MMA_ROWS - 1) / MMA_ROWS);
	size_t b2 = (size_t)(2 * MMA_ROWS + 4 * B) * (D + 8) * sizeof(bf16) + 6 * B * sizeof(float);
	if (dq_kind() == DQ_ATOMIC) {
		size_t b3 = b2 + (size_t)MMA_ROWS * (B + 8) * sizeof(bf16);
		if (allow_smem(mma_dkv_kernel<D, B, true>, b3) < 0 ||
		    cudaMemsetAsync(dq, 0, sizeof(float) * (size_t)T * NH * D) != cudaSuccess)
			return -1;
		mma_dkv_kernel<D, B, true><<<dim3(tiles, (unsigned)NKV), MMA_THREADS, b3>>>(
			dk, dv, dq, dout, delta, lse, q, k, v, seq_start, seq_end, order, T, NH, NKV);
		return 0;
	}
	if (allow_smem(mma_dkv_kernel<D, B, false>, b2) < 0)
		return -1;
	bool done = false;
	if constexpr (D <= 64) {
		if (dq_kind() == DQ_PASS_128) {
			size_t b4 = (size_t)(4 * MMA_ROWS + 4 * 32) * (D + 8) * sizeof(bf16);
			if (allow_smem(mma_dq2_kernel<D, 32>, b4) < 0)
				return -1;
			unsigned tiles2 = (unsigned)((T + 2 * MMA_ROWS - 1) / (2 * MMA_ROWS));
			mma_dq2_kernel<D, 32><<<dim3(tiles2, (unsigned)NH), MMA_THREADS, b4>>>(dq, dout, delta, lse, q, k, v,
											    seq_start, T, NH, NKV);
			done = true;
		}
	}
	if (!done) {
		size_t b1 = (size_t)(2 * MMA_ROWS + 4 * B) * (D + 8) * sizeof(bf16);
		if (allow_smem(mma_dq_kernel<D, B>, b1) < 0)
			return -1;
		mma_dq_kernel<D, B><<<dim3(tiles, (unsigned)NH), MMA_THREADS, b1>>>(dq, dout, delta, lse, q, k, v,
										   seq_start, order, T, NH, NKV);
	}
	mma_dkv_kernel<D, B, false><<<dim3(tiles, (unsigned)NKV), MMA_THREADS, b2>>>(
		dk, dv, NULL, dout, delta, lse, q, k, v, seq_start, seq_end, order, T, NH, NKV);
	return 0;
}

int nn_cuda_attention_forward_mma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
				  const int *seq_start, const int *order, int T, int NH, int NKV, int D)
{
	switch (D) {
	case 16: return forward_d<16>(out, lse, q, k, v, seq_start, order, T, NH, NKV);
	case 32: return forward_d<32>(out, lse, q, k, v, seq_start, order, T, NH, NKV);
	case 64: return forward_d<64>(out, lse, q, k, v, seq_start, order, T, NH, NKV);
	case 128: return forward_d<128>(out, lse, q, k, v, seq_start, order, T, NH, NKV);
	default: return -1;
	}
}

int nn_cuda_attention_backward_mma(float *dq, float *dk, float *dv, const float *delta, const bf16 *dout,
				   const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, const int *seq_start,
				   const int *seq_end, const int *order, int T, int NH, int NKV, int D)
{
	switch (D) {
	case 16: return backward_d<16>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, order, T, NH, NKV);
	case 32: return backward_d<32>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, order, T, NH, NKV);
	case 64: return backward_d<64>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, order, T, NH, NKV);
	case 128: return backward_d<128>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, order, T, NH, NKV);
	default: return -1;
	}
}
#endif
