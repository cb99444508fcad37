// attention_cuda: causal grouped-query attention over packed sequences,
// flash-style (ca_nn_attention_forward / ca_nn_attention_backward are the
// references). Blocks of 256 threads; a query (or key) is served by D/16
// neighbouring lanes that hold 16 dims each, so a block covers 256/(D/16)
// queries of one head while tiles of keys and values (or of queries and
// their gradients) pass through shared memory. Scores live only in
// registers: nothing of size [T, T] is ever stored. fp32 arithmetic.
// nn_cuda_attention_forward/backward at the end choose between these and
// the tensor-core kernels (attention_mma.cu, attention_wmma.cu).
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/nn_cuda.h"

#define THREADS 256

template <int D>
__device__ static float group_sum(float x)
{
	for (int o = D / 32; o > 0; o >>= 1)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

// The dot product of a row's 16 dims held by this lane with b's, summed over the D / 16 lanes that
// hold the row.
template <int D>
__device__ __forceinline__ static float row_dot(const float *a, const float *b)
{
	float x = 0.0f;
	for (int i = 0; i < 16; i++)
		x += a[i] * b[i];
	return group_sum<D>(x);
}

// The query a thread of the forward's and dq's tiling works on: its head h (key/value head g), the
// block's first query q0, the 16 dims (part) and the row t it holds, whether t is a real row
// (the last one stands in for it where not: tc) and where tc's sequence starts.
struct query_slot {
	int h, g, q0, part, t;
	bool active;
	int tc, start;
};
template <int D>
__device__ __forceinline__ static query_slot query_of_thread(const int *seq_start, int T, int NH, int NKV)
{
	constexpr int NTQ = D / 16, BQ = THREADS / NTQ;
	query_slot s;
	s.h = blockIdx.y;
	s.g = s.h / (NH / NKV);
	s.q0 = blockIdx.x * BQ;
	s.part = threadIdx.x % NTQ;
	s.t = s.q0 + (int)threadIdx.x / NTQ;
	s.active = s.t < T;
	s.tc = s.active ? s.t : T - 1;
	s.start = seq_start[s.tc];
	return s;
}

// Rows [row0, row0 + n) of head `head` of two [rows, heads, D] tensors a and b into the shared
// tiles as and bs (n * D floats each), by the whole block.
template <int D>
__device__ __forceinline__ static void load_tiles(float *as, float *bs, const float *a, const float *b, int row0, int n,
						int heads, int head)
{
	for (int i = threadIdx.x; i < n * D; i += THREADS) {
		size_t src = ((size_t)(row0 + i / D) * heads + head) * D + i % D;
		as[i] = a[src];
		bs[i] = b[src];
	}
}

// The key tile from kt (BK keys at most, none past the query tile's last query qlast): keys and
// values of key/value head g into ks and vs, by the whole block. How many keys it holds.
template <int D>
__device__ __forceinline__ static int load_key_tile(float *ks, float *vs, const float *k, const float *v, int kt, int qlast,
						    int NKV, int g)
{
	constexpr int BK = 4096 / D;
	int nk = min(BK, qlast - kt + 1);
	__syncthreads();
	load_tiles<D>(ks, vs, k, v, kt, nk, NKV, g);
	__syncthreads();
	return nk;
}

// Block (tile of queries, head h): online softmax over the keys of each
// query's own sequence up to itself.
template <int D>
__global__ static void __launch_bounds__(THREADS)
attention_forward_kernel(bf16 *out, float *lse, const float *q, const float *k, const float *v,
			 const int *seq_start, int T, int NH, int NKV)
{
	constexpr int NTQ = D / 16, BQ = THREADS / NTQ, BK = 4096 / D;
	__shared__ __align__(16) float ks[BK * D];
	__shared__ __align__(16) float vs[BK * D];
	auto [h, g, q0, part, t, active, tc, start] = query_of_thread<D>(seq_start, T, NH, NKV);
	float scale = rsqrtf((float)D), qr[16], acc[16];
	const float *qp = q + ((size_t)tc * NH + h) * D + part * 16;
	for (int i = 0; i < 16; i++) {
		qr[i] = qp[i] * scale;
		acc[i] = 0.0f;
	}
	float mx = -INFINITY, l = 0.0f;
	int qlast = min(q0 + BQ, T) - 1;
	for (int kt = seq_start[q0]; kt <= qlast; kt += BK) {
		int nk = load_key_tile<D>(ks, vs, k, v, kt, qlast, NKV, g);
		for (int j = 0; j < nk; j++) {
			int s = kt + j;
			const float *kr = ks + j * D + part * 16;
			float dot = row_dot<D>(qr, kr);
			if (active && s >= start && s <= t) {
				if (dot > mx) {
					float corr = expf(mx - dot);
					l *= corr;
					for (int i = 0; i < 16; i++)
						acc[i] *= corr;
					mx = dot;
				}
				float p = expf(dot - mx);
				l += p;
				const float *vr = vs + j * D + part * 16;
				for (int i = 0; i < 16; i++)
					acc[i] += p * vr[i];
			}
		}
	}
	if (active) {
		bf16 *op = out + ((size_t)t * NH + h) * D + part * 16;
		for (int i = 0; i < 16; i++)
			op[i] = __float2bfloat16(acc[i] / l);
		if (part == 0)
			lse[(size_t)t * NH + h] = mx + logf(l);
	}
}

// delta[t, h] = dout[t, h] . out[t, h]: one warp per row.
template <typename TD>
__global__ static void attention_delta_kernel(float *delta, const TD *dout, const bf16 *out, int rows, int D)
{
	int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
	if (row >= rows)
		return;
	float s = 0.0f;
	for (int d = lane; d < D; d += 32)
		s += to_float(dout[(size_t)row * D + d]) * __bfloat162float(out[(size_t)row * D + d]);
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if (lane == 0)
		delta[row] = s;
}

// The same with bf16 dout and D a multiple of 8: a thread per row, 16-byte loads (a warp per row of 64
// spends more time starting than reading).
__global__ static void attention_delta_rows_kernel(float *delta, const bf16 *dout, const bf16 *out, int rows, int D)
{
	int row = blockIdx.x * blockDim.x + threadIdx.x;
	if (row >= rows)
		return;
	const uint4 *a = (const uint4 *)(dout + (size_t)row * D), *b = (const uint4 *)(out + (size_t)row * D);
	float s = 0.0f;
	for (int i = 0; i < D / 8; i++) {
		uint4 x = a[i], y = b[i];
		const __nv_bfloat162 *xp = (const __nv_bfloat162 *)&x, *yp = (const __nv_bfloat162 *)&y;
		for (int j = 0; j < 4; j++) {
			float2 u = __bfloat1622float2(xp[j]), v = __bfloat1622float2(yp[j]);
			s += u.x * v.x + u.y * v.y;
		}
	}
	delta[row] = s;
}

void nn_cuda_attention_delta_bf16(float *delta, const bf16 *dout, const bf16 *out, int rows, int D)
{
	if (D % 8 == 0)
		attention_delta_rows_kernel<<<(unsigned)((rows + 255) / 256), 256>>>(delta, dout, out, rows, D);
	else
		attention_delta_kernel<bf16><<<(unsigned)((rows + 7) / 8), 256>>>(delta, dout, out, rows, D);
}

// dq: the forward's tiling again, with p recomputed from lse.
template <int D>
__global__ static void __launch_bounds__(THREADS)
attention_dq_kernel(float *dq, const float *dout, const float *delta, const float *lse, const float *q,
		    const float *k, const float *v, const int *seq_start, int T, int NH, int NKV)
{
	constexpr int NTQ = D / 16, BQ = THREADS / NTQ, BK = 4096 / D;
	__shared__ __align__(16) float ks[BK * D];
	__shared__ __align__(16) float vs[BK * D];
	auto [h, g, q0, part, t, active, tc, start] = query_of_thread<D>(seq_start, T, NH, NKV);
	float scale = rsqrtf((float)D), qr[16], dor[16], acc[16];
	size_t off = ((size_t)tc * NH + h) * D + part * 16;
	for (int i = 0; i < 16; i++) {
		qr[i] = q[off + i] * scale;
		dor[i] = dout[off + i];
		acc[i] = 0.0f;
	}
	float L = lse[(size_t)tc * NH + h], Dt = delta[(size_t)tc * NH + h];
	int qlast = min(q0 + BQ, T) - 1;
	for (int kt = seq_start[q0]; kt <= qlast; kt += BK) {
		int nk = load_key_tile<D>(ks, vs, k, v, kt, qlast, NKV, g);
		for (int j = 0; j < nk; j++) {
			int s = kt + j;
			const float *kr = ks + j * D + part * 16, *vr = vs + j * D + part * 16;
			float dot = row_dot<D>(qr, kr), dp = row_dot<D>(dor, vr);
			if (active && s >= start && s <= t) {
				float ds = expf(dot - L) * (dp - Dt);
				for (int i = 0; i < 16; i++)
					acc[i] += ds * kr[i];
			}
		}
	}
	if (active)
		for (int i = 0; i < 16; i++)
			dq[off + i] = acc[i] * scale;
}

// dk, dv: block (tile of keys, kv head g); the queries of every head of
// the group that can see a key of the tile pass through shared memory.
template <int D>
__global__ static void __launch_bounds__(THREADS)
attention_dkv_kernel(float *dk, float *dv, const float *dout, const float *delta, const float *lse,
		     const float *q, const float *k, const float *v, const int *seq_start, const int *seq_end,
		     int T, int NH, int NKV)
{
	constexpr int NTQ = D / 16, BKEY = THREADS / NTQ, BQ = 4096 / D;
	__shared__ __align__(16) float qs[BQ * D];
	__shared__ __align__(16) float dos[BQ * D];
	__shared__ float ls[BQ], dls[BQ];
	__shared__ int sts[BQ];
	int g = blockIdx.y, group = NH / NKV;
	int k0 = blockIdx.x * BKEY, part = threadIdx.x % NTQ;
	int s = k0 + (int)threadIdx.x / NTQ;
	bool active = s < T;
	int sc = active ? s : T - 1;
	float scale = rsqrtf((float)D), kr[16], vr[16], dka[16], dva[16];
	size_t off = ((size_t)sc * NKV + g) * D + part * 16;
	for (int i = 0; i < 16; i++) {
		kr[i] = k[off + i] * scale;
		vr[i] = v[off + i];
		dka[i] = 0.0f;
		dva[i] = 0.0f;
	}
	int qend = seq_end[min(k0 + BKEY, T) - 1];
	for (int hh = 0; hh < group; hh++) {
		int h = g * group + hh;
		for (int qt = k0; qt < qend; qt += BQ) {
			int nq = min(BQ, qend - qt);
			__syncthreads();
			load_tiles<D>(qs, dos, q, dout, qt, nq, NH, h);
			for (int i = threadIdx.x; i < nq; i += THREADS) {
				ls[i] = lse[(size_t)(qt + i) * NH + h];
				dls[i] = delta[(size_t)(qt + i) * NH + h];
				sts[i] = seq_start[qt + i];
			}
			__syncthreads();
			for (int j = 0; j < nq; j++) {
				int t = qt + j;
				const float *qrow = qs + j * D + part * 16, *drow = dos + j * D + part * 16;
				float dot = row_dot<D>(kr, qrow), dp = row_dot<D>(vr, drow);
				if (active && t >= s && sts[j] <= s) {
					float p = expf(dot - ls[j]), ds = p * (dp - dls[j]);
					for (int i = 0; i < 16; i++) {
						dva[i] += p * drow[i];
						dka[i] += ds * qrow[i];
					}
				}
			}
		}
	}
	if (active)
		for (int i = 0; i < 16; i++) {
			dk[off + i] = dka[i] * scale;
			dv[off + i] = dva[i];
		}
}

template <int D>
static void forward_d(bf16 *out, float *lse, const float *q, const float *k, const float *v, const int *seq_start,
		      int T, int NH, int NKV)
{
	constexpr int BQ = THREADS / (D / 16);
	dim3 grid((unsigned)((T + BQ - 1) / BQ), (unsigned)NH);
	attention_forward_kernel<D><<<grid, THREADS>>>(out, lse, q, k, v, seq_start, T, NH, NKV);
}

template <int D>
static void backward_d(float *dq, float *dk, float *dv, const float *delta, const float *dout, const float *lse,
		       const float *q, const float *k, const float *v, const int *seq_start, const int *seq_end,
		       int T, int NH, int NKV)
{
	constexpr int BQ = THREADS / (D / 16);
	dim3 gq((unsigned)((T + BQ - 1) / BQ), (unsigned)NH), gk((unsigned)((T + BQ - 1) / BQ), (unsigned)NKV);
	attention_dq_kernel<D><<<gq, THREADS>>>(dq, dout, delta, lse, q, k, v, seq_start, T, NH, NKV);
	attention_dkv_kernel<D><<<gk, THREADS>>>(dk, dv, dout, delta, lse, q, k, v, seq_start, seq_end, T, NH, NKV);
}

// Which kernels run: mma (attention_mma.cu, the default) for head_dim 16 to 128, wmma
// (attention_wmma.cu) with CA_CUDA_ATTENTION=wmma for 64 and 128, else the fp32 kernels here.
enum { KIND_FP32, KIND_WMMA, KIND_MMA };

static int kind_for(int D)
{
	static int asked = -1;
	if (asked < 0) {
		const char *e = getenv("CA_CUDA_ATTENTION");
		asked = e && strcmp(e, "fp32") == 0 ? KIND_FP32 : e && strcmp(e, "wmma") == 0 ? KIND_WMMA : KIND_MMA;
	}
	if (asked == KIND_MMA && (D == 16 || D == 32 || D == 64 || D == 128))
		return KIND_MMA;
	if (asked != KIND_FP32 && (D == 64 || D == 128))
		return KIND_WMMA;
	return KIND_FP32;
}

const char *nn_cuda_attention_kind(int D)
{
	static const char *const names[] = {"fp32", "wmma", "mma"};
	return names[kind_for(D)];
}

int nn_cuda_attention_forward(bf16 *out, float *lse, const float *q, const float *k, const float *v, bf16 *scratch,
			      const int *seq_start, const int *tile_order, int T, int NH, int NKV, int D)
{
	int kind = kind_for(D);
	if (kind == KIND_MMA) {
		size_t nq = (size_t)T * NH * D, nk = (size_t)T * NKV * D;
		bf16 *qb = scratch, *kb = qb + nq, *vb = kb + nk;
		nn_cuda_to_bf16(qb, q, nq);
		nn_cuda_to_bf16(kb, k, nk);
		nn_cuda_to_bf16(vb, v, nk);
		return nn_cuda_attention_forward_mma(out, lse, qb, kb, vb, seq_start, tile_order, T, NH, NKV, D);
	}
	if (kind == KIND_WMMA)
		return nn_cuda_attention_forward_wmma(out, lse, q, k, v, seq_start, T, NH, NKV, D);
	switch (D) {
	case 16: forward_d<16>(out, lse, q, k, v, seq_start, T, NH, NKV); return 0;
	case 32: forward_d<32>(out, lse, q, k, v, seq_start, T, NH, NKV); return 0;
	case 64: forward_d<64>(out, lse, q, k, v, seq_start, T, NH, NKV); return 0;
	case 128: forward_d<128>(out, lse, q, k, v, seq_start, T, NH, NKV); return 0;
	case 256: forward_d<256>(out, lse, q, k, v, seq_start, T, NH, NKV); return 0;
	default: return -1;
	}
}

int nn_cuda_attention_backward(float *dq, float *dk, float *dv, float *dkh, float *dvh, float *delta, bf16 *scratch,
			       const float *dout, const bf16 *out,
			       const float *lse, const float *q, const float *k, const float *v,
			       const int *seq_start, const int *seq_end, const int *tile_order, int T, int NH, int NKV,
			       int D)
{
	int rows = T * NH, kind = kind_for(D);
	attention_delta_kernel<float><<<(unsigned)((rows + 7) / 8), 256>>>(delta, dout, out, rows, D);
	if (kind == KIND_MMA) {
		size_t nq = (size_t)T * NH * D, nk = (size_t)T * NKV * D;
		bf16 *qb = scratch, *kb = qb + nq, *vb = kb + nk, *dob = vb + nk;
		nn_cuda_to_bf16(qb, q, nq);
		nn_cuda_to_bf16(kb, k, nk);
		nn_cuda_to_bf16(vb, v, nk);
		nn_cuda_to_bf16(dob, dout, nq);
		return nn_cuda_attention_backward_mma(dq, dk, dv, delta, dob, lse, qb, kb, vb, seq_start, seq_end,
						      tile_order, T, NH, NKV, D);
	}
	if (kind == KIND_WMMA)
		return nn_cuda_attention_backward_wmma(dq, dk, dv, dkh, dvh, delta, dout, lse, q, k, v, seq_start, seq_end,
						       T, NH, NKV, D);
	switch (D) {
	case 16: backward_d<16>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, T, NH, NKV); return 0;
	case 32: backward_d<32>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, T, NH, NKV); return 0;
	case 64: backward_d<64>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, T, NH, NKV); return 0;
	case 128: backward_d<128>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, T, NH, NKV); return 0;
	case 256: backward_d<256>(dq, dk, dv, delta, dout, lse, q, k, v, seq_start, seq_end, T, NH, NKV); return 0;
	default: return -1;
	}
}
