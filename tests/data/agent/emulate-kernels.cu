// emulate-kernels: run the GPU test's kernels on the CPU (their steps are
// __host__ __device__) against a double-precision reference, so their
// indexing is checked where there is no GPU. Built with nvcc as host code,
// -I examples/kernelbench/solutions (the shipped solutions are the kernels).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "L1-14-v1/kernels/triu_matmul.cu"
#include "L1-14-v2/kernels/triu_blocked.cu"
#undef THREADS
#include "L2-18/kernels/linear_sum.cu"

static int check_triu(int N)
{
	std::vector<float> A(N * N), B(N * N), C(N * N, NAN);
	srand(N);
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			A[i * N + j] = j >= i ? rand() / (float)RAND_MAX : 0.f;
			B[i * N + j] = j >= i ? rand() / (float)RAND_MAX : 0.f;
		}
	int T = (N + TILE - 1) / TILE;
	static float acc[256][TM][TN];
	static float As[BK * TILE], Bs[BK * TILE];
	for (int b = 0; b < T * T; b++) {
		tile t = tile_of(b, T);
		int row0 = t.bi * TILE, col0 = t.bj * TILE;
		if (t.upper == 0) {
			for (int tid = 0; tid < 256; tid++)
				zero_tile(tid, C.data(), N, row0, col0);
			continue;
		}
		for (int tid = 0; tid < 256; tid++)
			for (int i = 0; i < TM; i++)
				for (int j = 0; j < TN; j++)
					acc[tid][i][j] = 0.f;
		for (int k0 = k_begin(t.bi); k0 < k_end(t.bj, N); k0 += BK) {
			for (int tid = 0; tid < 256; tid++)
				load_tiles(tid, A.data(), B.data(), N, row0, col0, k0, As, Bs);
			for (int tid = 0; tid < 256; tid++)
				multiply_step(tid, As, Bs, acc[tid]);
		}
		for (int tid = 0; tid < 256; tid++)
			store_tile(tid, C.data(), N, row0, col0, acc[tid]);
	}
	double worst = 0;
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			double ref = 0;
			if (j >= i)
				for (int k = 0; k < N; k++)
					ref += (double)A[i * N + k] * B[k * N + j];
			double e = fabs(ref - C[i * N + j]);
			if (!(e <= worst))
				worst = e;
		}
	printf("triu_matmul N=%d max_abs_err=%g\n", N, worst);
	return worst < 1e-3 * N ? 0 : 1;
}

/* The cuBLAS plan of triu_blocked.cu, run through a CPU column-major GEMM. */
static int check_blocked(int N)
{
	std::vector<float> A((size_t)N * N), B((size_t)N * N), C((size_t)N * N, NAN);
	srand(N + 1);
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			A[(size_t)i * N + j] = j >= i ? rand() / (float)RAND_MAX : 0.f;
			B[(size_t)i * N + j] = j >= i ? rand() / (float)RAND_MAX : 0.f;
		}
	for (int d = 0; d < N / BLOCK; d++) {
		diagonal_gemm g = plan_diagonal(d, N);
		for (int q = 0; q < g.batch; q++) {
			const float *X = B.data() + g.offset_b + q * g.stride, *Y = A.data() + g.offset_a + q * g.stride;
			float *Z = C.data() + g.offset_c + q * g.stride;
			for (int c = 0; c < g.n; c++) {
				float *z = Z + (size_t)c * N;
				for (int r = 0; r < g.m; r++)
					z[r] = 0.f;
				for (int p = 0; p < g.k; p++) {
					float y = Y[p + (size_t)c * N];
					const float *x = X + (size_t)p * N;
					for (int r = 0; r < g.m; r++)
						z[r] += x[r] * y;
				}
			}
		}
	}
	for (int i = 0; i < N; i++)
		for (int j = 0; j < zero_end(i); j++)
			C[(size_t)i * N + j] = 0.f;
	double worst = 0;
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++) {
			double ref = 0;
			for (int k = i; k <= j; k++)
				ref += (double)A[(size_t)i * N + k] * B[(size_t)k * N + j];
			double e = fabs(ref - C[(size_t)i * N + j]);
			if (!(e <= worst))
				worst = e;
		}
	printf("triu_blocked N=%d max_abs_err=%g\n", N, worst);
	return worst < 1e-3 * N ? 0 : 1;
}

static int check_linear_sum(int batch, int in, int out, int chunks)
{
	std::vector<float> x(batch * in), W(out * in), b(out), partial(chunks * in), wsum(in), y(batch);
	srand(batch + in + out);
	for (auto &v : x) v = rand() / (float)RAND_MAX;
	for (auto &v : W) v = rand() / (float)RAND_MAX - 0.5f;
	for (auto &v : b) v = rand() / (float)RAND_MAX - 0.5f;
	long long rows_per_chunk = (out + chunks - 1) / chunks;
	for (int c = 0; c < chunks; c++)
		for (int k = 0; k < in; k++)
			colsum_one(W.data(), partial.data(), out, in, rows_per_chunk, c, k);
	float bsum = 0;
	for (int j = 0; j < out; j++)
		bsum += b[j];
	for (int k = 0; k < in; k++)
		wsum[k] = sum_chunks(partial.data(), chunks, in, k);
	double worst = 0;
	for (int i = 0; i < batch; i++) {
		float acc = 0;
		for (int k = 0; k < in; k++)
			acc += x[i * in + k] * wsum[k];
		double ref = 0;
		for (int j = 0; j < out; j++) {
			double yj = b[j];
			for (int k = 0; k < in; k++)
				yj += (double)x[i * in + k] * W[j * in + k];
			ref += yj;
		}
		double e = fabs(ref - (acc + bsum));
		if (!(e <= worst))
			worst = e;
	}
	printf("linear_sum batch=%d in=%d out=%d chunks=%d max_abs_err=%g\n", batch, in, out, chunks, worst);
	return worst < 1e-2 ? 0 : 1;
}

int main(void)
{
	int bad = 0;
	for (int T = 1; T <= 40; T++) {
		std::vector<int> seen(T * T, 0);
		for (int b = 0; b < T * T; b++) {
			tile t = tile_of(b, T);
			if (t.upper < 0 || (t.bi <= t.bj) != (t.upper == 1))
				bad = 1;
			else
				seen[t.bi * T + t.bj]++;
		}
		for (int i = 0; i < T * T; i++)
			if (seen[i] != 1)
				bad = 1;
	}
	if (bad)
		printf("tile_of does not cover every tile exactly once\n");
	bad |= check_triu(1) | check_triu(7) | check_triu(129) | check_triu(300);
	bad |= check_blocked(1024);
	bad |= check_linear_sum(3, 300, 257, 64) | check_linear_sum(5, 64, 1000, 7);
	return bad;
}
