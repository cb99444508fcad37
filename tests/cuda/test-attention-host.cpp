/*
 * test-attention-host: the tensor-core attention of attention_mma.cu run on
 * the CPU, without a GPU, against a float64 reference (forward out and lse,
 * backward dq, dk, dv, with dq by its own pass and by atomics; the
 * 128-row variants) on packed sequences, for head_dim 16, 32, 64, 128.
 *
 *   g++ -std=c++17 -O2 -Wno-unknown-pragmas -I$CUDA_HOME/include -Ilib/core -Ilib/model -o test-attention-host \
 *       tests/cuda/test-attention-host.cpp
 *   ./test-attention-host [16|32|64|128]
 *
 * Each of a block's 128 threads is a ucontext coroutine; the warp-level
 * primitives the kernels use (ldmatrix, mma.sync m16n8k16, shuffles,
 * cp.async, __syncthreads) are replaced by versions that meet at a barrier
 * and exchange operands as PTX documents their layout, so tile indexing,
 * fragment layouts, masks and pipelining are all exercised. A barrier not
 * reached by every thread is reported as a deadlock. Exit 1 when a relative
 * error exceeds 0.02 (bf16 operands give about 2e-3).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;  // as cuda_util.h, which attention_mma.cu includes below, after the emulation

#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

using std::max;
using std::min;

static inline float rsqrtf(float x)
{
	return 1.0f / sqrtf(x);
}

// ---- threads as coroutines ----

enum { THREADS = 128, STACK = 1 << 17 };
struct fiber {
	ucontext_t ctx;
	uint3 tid;
	int done;
	char *stack;
};
static fiber fibers[THREADS], *cur;
static ucontext_t scheduler;
static uint3 blockIdx;
static dim3 gridDim, blockDim(THREADS);
static long events;  // barriers passed and threads finished: no change over a round is a deadlock
#define threadIdx (cur->tid)
#define LANE ((int)cur->tid.x & 31)
#define WARP ((int)cur->tid.x >> 5)

struct barrier {
	int arrived, generation;
};
static barrier warp_barrier[THREADS / 32], block_barrier;

static void wait_at(barrier &b, int size)
{
	int g = b.generation;
	if (++b.arrived == size) {
		b.arrived = 0;
		b.generation++;
		events++;
		return;
	}
	while (b.generation == g)
		swapcontext(&cur->ctx, &scheduler);
}

static void warp_sync(void)
{
	wait_at(warp_barrier[WARP], 32);
}

static void __syncthreads(void)
{
	wait_at(block_barrier, THREADS);
}

// What the lanes of a warp show each other.
struct exchange {
	const void *addr[32];
	unsigned a[32][4], b[32][2];
	float v[32];
};
static exchange board[THREADS / 32];

static float __shfl_xor_sync(unsigned, float v, int o)
{
	exchange &W = board[WARP];
	W.v[LANE] = v;
	warp_sync();
	float r = W.v[LANE ^ o];
	warp_sync();
	return r;
}

alignas(128) unsigned char smem[1 << 18];

// ---- the primitives of attention_mma.cu ----

static unsigned bits(bf16 x)
{
	unsigned short u;
	memcpy(&u, &x, 2);
	return u;
}

static unsigned pair(bf16 lo, bf16 hi)
{
	return bits(lo) | bits(hi) << 16;
}

static float low(unsigned u)
{
	unsigned v = u << 16;
	float f;
	memcpy(&f, &v, 4);
	return f;
}

static float high(unsigned u)
{
	unsigned v = u & 0xffff0000u;
	float f;
	memcpy(&f, &v, 4);
	return f;
}

// cp.async as a plain copy: the kernels' waits are then not tested, only their copies.
static void cp_async16(void *dst, const void *src, bool ok)
{
	if (ok)
		memcpy(dst, src, 16);
	else
		memset(dst, 0, 16);
}

static void cp_async_commit(void)
{
}

template <int N>
static void cp_async_wait(void)
{
}

// ldmatrix .x4: matrix i's rows at the addresses of lanes 8i..8i+7; lane l gets row l/4, columns 2(l%4), +1.
static void ldsm_x4(unsigned r[4], const bf16 *p)
{
	exchange &W = board[WARP];
	W.addr[LANE] = p;
	warp_sync();
	int g = LANE / 4, t = LANE % 4;
	for (int i = 0; i < 4; i++) {
		const bf16 *row = (const bf16 *)W.addr[8 * i + g];
		r[i] = pair(row[2 * t], row[2 * t + 1]);
	}
	warp_sync();
}

// .trans: lane l gets column l/4, rows 2(l%4), +1.
static void ldsm_x4_trans(unsigned r[4], const bf16 *p)
{
	exchange &W = board[WARP];
	W.addr[LANE] = p;
	warp_sync();
	int g = LANE / 4, t = LANE % 4;
	for (int i = 0; i < 4; i++)
		r[i] = pair(((const bf16 *)W.addr[8 * i + 2 * t])[g], ((const bf16 *)W.addr[8 * i + 2 * t + 1])[g]);
	warp_sync();
}

// mma.sync.m16n8k16.row.col bf16 -> fp32 with the fragment layouts of the PTX ISA.
static void mma16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1)
{
	exchange &W = board[WARP];
	memcpy(W.a[LANE], a, sizeof W.a[LANE]);
	W.b[LANE][0] = b0;
	W.b[LANE][1] = b1;
	warp_sync();
	float A[16][16], B[16][8];
	for (int l = 0; l < 32; l++) {
		int g = l / 4, t = l % 4;
		const unsigned *x = W.a[l];
		A[g][2 * t] = low(x[0]), A[g][2 * t + 1] = high(x[0]);
		A[g + 8][2 * t] = low(x[1]), A[g + 8][2 * t + 1] = high(x[1]);
		A[g][2 * t + 8] = low(x[2]), A[g][2 * t + 9] = high(x[2]);
		A[g + 8][2 * t + 8] = low(x[3]), A[g + 8][2 * t + 9] = high(x[3]);
		B[2 * t][g] = low(W.b[l][0]), B[2 * t + 1][g] = high(W.b[l][0]);
		B[2 * t + 8][g] = low(W.b[l][1]), B[2 * t + 9][g] = high(W.b[l][1]);
	}
	warp_sync();
	int g = LANE / 4, t = LANE % 4;
	for (int e = 0; e < 4; e++) {
		int r = g + (e >> 1) * 8, col = 2 * t + (e & 1);
		float s = 0;
		for (int k = 0; k < 16; k++)
			s += A[r][k] * B[k][col];
		c[e] += s;
	}
}

// Threads never interleave inside a call here, so a plain add is atomic.
static float atomicAdd(float *p, float x)
{
	float old = *p;
	*p = old + x;
	return old;
}

static unsigned pack_bf16(float lo, float hi)
{
	return pair(__float2bfloat16(lo), __float2bfloat16(hi));
}

#define ATTENTION_MMA_EMULATE
#include "cuda/attention_mma.cu"

// ---- launching a grid, one block at a time ----

static std::function<void()> body;

static void run_thread(void)
{
	body();
	cur->done = 1;
	events++;
}

static void launch(dim3 grid, std::function<void()> kernel)
{
	gridDim = grid;
	for (unsigned by = 0; by < grid.y; by++)
		for (unsigned bx = 0; bx < grid.x; bx++) {
			blockIdx = make_uint3(bx, by, 0);
			memset(warp_barrier, 0, sizeof warp_barrier);
			memset(&block_barrier, 0, sizeof block_barrier);
			memset(smem, 0xff, sizeof smem);  // NaNs: a read of shared memory nobody wrote shows
			body = kernel;
			for (int i = 0; i < THREADS; i++) {
				fiber &f = fibers[i];
				if (!f.stack && !(f.stack = (char *)malloc(STACK)))
					abort();
				f.tid = make_uint3(i, 0, 0);
				f.done = 0;
				getcontext(&f.ctx);
				f.ctx.uc_stack.ss_sp = f.stack;
				f.ctx.uc_stack.ss_size = STACK;
				f.ctx.uc_link = &scheduler;
				makecontext(&f.ctx, run_thread, 0);
			}
			for (;;) {
				long before = events;
				int alive = 0;
				for (int i = 0; i < THREADS; i++)
					if (!fibers[i].done) {
						alive++;
						cur = &fibers[i];
						swapcontext(&scheduler, &cur->ctx);
					}
				if (!alive)
					break;
				if (events == before) {
					fprintf(stderr, "test-attention-host: deadlock in block (%u, %u)\n", bx, by);
					exit(1);
				}
			}
		}
}

// ---- the check ----

static float round_bf16(float x)
{
	return __bfloat162float(__float2bfloat16(x));
}

static double uniform(unsigned long long &s)
{
	s = s * 6364136223846793005ull + 1442695040888963407ull;
	return (double)(s >> 11) / 9007199254740992.0;
}

static double report(const char *name, const std::vector<double> &ref, const std::function<double(size_t)> &got)
{
	double d = 0, r = 0, worst = 0;
	for (size_t i = 0; i < ref.size(); i++) {
		double x = got(i);
		if (x != x)
			d = INFINITY;
		d += (x - ref[i]) * (x - ref[i]);
		r += ref[i] * ref[i];
		worst = max(worst, fabs(x - ref[i]));
	}
	double e = sqrt(d) / sqrt(r);
	printf("  %-4s rel. err %.3g, max abs err %.3g\n", name, e, worst);
	return e;
}

template <int D, int B>
static int check(int NH, int NKV, std::vector<int> lens, bool ordered)
{
	int T = 0;
	for (int n : lens)
		T += n;
	int QD = NH * D, KD = NKV * D, group = NH / NKV;
	std::vector<int> start(T), end(T);
	for (int s = 0, t = 0; s < (int)lens.size(); s++)
		for (int j = 0; j < lens[s]; j++, t++) {
			start[t] = t - j;
			end[t] = t - j + lens[s];
		}
	unsigned long long seed = 1234 + D;
	std::vector<float> q(T * QD), k(T * KD), v(T * KD), dout(T * QD);
	for (float &x : q)
		x = round_bf16((float)(uniform(seed) * 4 - 2));
	for (float &x : k)
		x = round_bf16((float)(uniform(seed) * 4 - 2));
	for (float &x : v)
		x = round_bf16((float)(uniform(seed) * 2 - 1));
	for (float &x : dout)
		x = round_bf16((float)(uniform(seed) * 2 - 1));
	std::vector<bf16> qb(T * QD), kb(T * KD), vb(T * KD), db(T * QD);
	for (size_t i = 0; i < q.size(); i++) {
		qb[i] = __float2bfloat16(q[i]);
		db[i] = __float2bfloat16(dout[i]);
	}
	for (size_t i = 0; i < k.size(); i++) {
		kb[i] = __float2bfloat16(k[i]);
		vb[i] = __float2bfloat16(v[i]);
	}
	// The reference, in double; delta from the bf16 output as nn_cuda_attention_backward computes it.
	double scale = 1 / sqrt((double)D);
	std::vector<double> out_ref(T * QD), lse_ref(T * NH), dq_ref(T * QD, 0), dk_ref(T * KD, 0), dv_ref(T * KD, 0);
	std::vector<float> delta(T * NH);
	std::vector<double> sc(T);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < NH; h++) {
			int g = h / group;
			double mx = -1e300, l = 0;
			for (int s = start[t]; s <= t; s++) {
				double d = 0;
				for (int i = 0; i < D; i++)
					d += q[t * QD + h * D + i] * k[s * KD + g * D + i];
				sc[s] = d * scale;
				mx = max(mx, sc[s]);
			}
			for (int s = start[t]; s <= t; s++)
				l += exp(sc[s] - mx);
			double L = lse_ref[t * NH + h] = mx + log(l), dl = 0;
			for (int i = 0; i < D; i++) {
				double o = 0;
				for (int s = start[t]; s <= t; s++)
					o += exp(sc[s] - L) * v[s * KD + g * D + i];
				out_ref[t * QD + h * D + i] = o;
				dl += dout[t * QD + h * D + i] * round_bf16((float)o);
			}
			delta[t * NH + h] = (float)dl;
			for (int s = start[t]; s <= t; s++) {
				double p = exp(sc[s] - L), dp = 0;
				for (int i = 0; i < D; i++)
					dp += dout[t * QD + h * D + i] * v[s * KD + g * D + i];
				double ds = p * (dp - dl);
				for (int i = 0; i < D; i++) {
					dv_ref[s * KD + g * D + i] += p * dout[t * QD + h * D + i];
					dq_ref[t * QD + h * D + i] += ds * k[s * KD + g * D + i] * scale;
					dk_ref[s * KD + g * D + i] += ds * q[t * QD + h * D + i] * scale;
				}
			}
		}
	// The tile order model_cuda.cu's tile_order_fill makes: most work first.
	unsigned tiles = (T + 63) / 64;
	std::vector<int> order(2 * tiles);
	std::vector<std::pair<long, int>> work(tiles);
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned j = 0; j < tiles; j++) {
			int first = 64 * j, last = min(T, first + 64) - 1;
			work[j] = {-(pass == 0 ? (long)last - start[first] + 1 : (long)end[last] - first), (int)j};
		}
		std::sort(work.begin(), work.end());
		for (unsigned j = 0; j < tiles; j++)
			order[pass * tiles + j] = work[j].second;
	}
	const int *ord = ordered ? order.data() : NULL;
	std::vector<bf16> out(T * QD);
	std::vector<float> lse(T * NH, NAN), dq(T * QD, NAN), dk(T * KD, NAN), dv(T * KD, NAN);
	launch(dim3(tiles, NH), [&] {
		mma_forward_kernel<D, 64>(out.data(), lse.data(), qb.data(), kb.data(), vb.data(), start.data(), ord, T, NH,
					  NKV);
	});
	launch(dim3(tiles, NH), [&] {
		mma_dq_kernel<D, B>(dq.data(), db.data(), delta.data(), lse.data(), qb.data(), kb.data(), vb.data(),
				    start.data(), ord, T, NH, NKV);
	});
	launch(dim3(tiles, NKV), [&] {
		mma_dkv_kernel<D, B, false>(dk.data(), dv.data(), NULL, db.data(), delta.data(), lse.data(), qb.data(),
					    kb.data(), vb.data(), start.data(), end.data(), ord, T, NH, NKV);
	});
	// dQ by atomics inside the dk/dv pass (CA_CUDA_ATTENTION_DQ=atomic).
	std::vector<float> dq2(T * QD, 0.0f), dk2(T * KD, NAN), dv2(T * KD, NAN);
	launch(dim3(tiles, NKV), [&] {
		mma_dkv_kernel<D, B, true>(dk2.data(), dv2.data(), dq2.data(), db.data(), delta.data(), lse.data(),
					   qb.data(), kb.data(), vb.data(), start.data(), end.data(), ord, T, NH, NKV);
	});
	printf("head_dim %d, inner tile %d, %d heads, %d key/value heads, %d tokens in %zu sequences%s\n", D, B, NH, NKV, T,
	       lens.size(), ordered ? ", tiles most work first" : "");
	double e = report("out", out_ref, [&](size_t i) { return (double)__bfloat162float(out[i]); });
	e = max(e, report("lse", lse_ref, [&](size_t i) { return (double)lse[i]; }));
	e = max(e, report("dq", dq_ref, [&](size_t i) { return (double)dq[i]; }));
	e = max(e, report("dk", dk_ref, [&](size_t i) { return (double)dk[i]; }));
	e = max(e, report("dv", dv_ref, [&](size_t i) { return (double)dv[i]; }));
	printf(" with dQ by atomics in the dk/dv pass:\n");
	e = max(e, report("dq", dq_ref, [&](size_t i) { return (double)dq2[i]; }));
	e = max(e, report("dk", dk_ref, [&](size_t i) { return (double)dk2[i]; }));
	e = max(e, report("dv", dv_ref, [&](size_t i) { return (double)dv2[i]; }));
	if constexpr (D <= 64) {  // the forward with 128 queries per block (CA_CUDA_ATTENTION_FWD=128)
		std::vector<bf16> out2(T * QD);
		std::vector<float> lse2(T * NH, NAN);
		launch(dim3((T + 127) / 128, NH), [&] {
			mma_forward2_kernel<D, 64>(out2.data(), lse2.data(), qb.data(), kb.data(), vb.data(), start.data(), T,
						   NH, NKV);
		});
		printf(" forward with 128 queries per block:\n");
		e = max(e, report("out", out_ref, [&](size_t i) { return (double)__bfloat162float(out2[i]); }));
		e = max(e, report("lse", lse_ref, [&](size_t i) { return (double)lse2[i]; }));
		std::vector<float> dq3(T * QD, NAN);  // the dq pass with 128 queries per block (CA_CUDA_ATTENTION_DQ=128)
		launch(dim3((T + 127) / 128, NH), [&] {
			mma_dq2_kernel<D, 32>(dq3.data(), db.data(), delta.data(), lse.data(), qb.data(), kb.data(),
					      vb.data(), start.data(), T, NH, NKV);
		});
		printf(" dq pass with 128 queries per block:\n");
		e = max(e, report("dq", dq_ref, [&](size_t i) { return (double)dq3[i]; }));
	}
	return e < 0.02 ? 0 : 1;
}

int main(int argc, char **argv)
{
	int only = argc > 1 ? atoi(argv[1]) : 0, bad = 0;
	if (!only || only == 16) {
		bad |= check<16, 64>(4, 4, {5, 200, 33}, true);
		bad |= check<16, 64>(4, 4, {5, 200, 33}, false);
	}
	if (!only || only == 32)
		bad |= check<32, 64>(2, 1, {129, 64, 3}, true);
	// Sequences long enough for tiles with nothing masked, and one starting mid-tile.
	if (!only || only == 64)
		bad |= check<64, 64>(4, 2, {1, 7, 64, 70, 130, 300}, true);
	if (!only || only == 128)
		bad |= check<128, 32>(2, 1, {100, 170, 1}, true);
	printf(bad ? "FAIL\n" : "PASS\n");
	return bad;
}
