/* nn: see nn.h. Plain loops; the inner products use 8-lane vectors. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"

#include "nn.h"

/* The vector helpers are static inline, so the AVX-ABI note does not apply. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef float vec8 __attribute__((vector_size(32)));

static inline vec8 load8(const float *p)
{
	vec8 v;
	memcpy(&v, p, sizeof v);
	return v;
}

#define store8(p, v) do { vec8 store8_v = (v); memcpy((p), &store8_v, sizeof store8_v); } while (0)

static inline float hsum8_at(const vec8 *p)
{
	vec8 v = *p;
	return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

float ca_nn_dot(const float *a, const float *b, int n)
{
	vec8 acc0 = {0}, acc1 = {0};
	int i = 0;
	for (; i + 16 <= n; i += 16) {
		acc0 += load8(a + i) * load8(b + i);
		acc1 += load8(a + i + 8) * load8(b + i + 8);
	}
	for (; i + 8 <= n; i += 8)
		acc0 += load8(a + i) * load8(b + i);
	acc0 += acc1;
	float s = hsum8_at(&acc0);
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

void ca_nn_axpy(float *y, float a, const float *x, int n)
{
	vec8 av = {a, a, a, a, a, a, a, a};
	int i = 0;
	for (; i + 8 <= n; i += 8)
		store8(y + i, load8(y + i) + av * load8(x + i));
	for (; i < n; i++)
		y[i] += a * x[i];
}

/*
 * The one matrix product everything uses: out[M,N] (+)= a[M,K] b[N,K]^T,
 * both operands walked along contiguous rows. A 4x2 block of outputs
 * shares its loads; blocks of N keep b's rows in cache across the rows of
 * a. Compiled twice (AVX with FMA, and baseline) and picked at run time.
 */
enum { ROW_BLOCK = 4, COL_BLOCK = 64 };

__attribute__((target_clones("fma", "default"), optimize("fp-contract=fast")))
static void matmul_nt_columns(float *out, const float *a, const float *b, int M, int K, int N,
			      int accumulate, int n_begin, int n_end)
{
	/*
	 * Every output element goes through the same instructions whatever M
	 * and N are (ragged edges reuse a valid row and drop the result), so a
	 * token's numbers do not depend on how the batch was packed.
	 */
	for (int nb = n_begin; nb < n_end; nb += COL_BLOCK) {
		int ne = nb + COL_BLOCK < n_end ? nb + COL_BLOCK : n_end;
		for (int m = 0; m < M; m += ROW_BLOCK) {
			int rows = M - m < ROW_BLOCK ? M - m : ROW_BLOCK;
			const float *a0 = a + (size_t)m * K;
			const float *a1 = rows > 1 ? a0 + K : a0;
			const float *a2 = rows > 2 ? a0 + 2 * (size_t)K : a0;
			const float *a3 = rows > 3 ? a0 + 3 * (size_t)K : a0;
			for (int n = nb; n < ne; n += 2) {
				int cols = ne - n < 2 ? 1 : 2;
				const float *b0 = b + (size_t)n * K, *b1 = cols > 1 ? b0 + K : b0;
				if (rows == 1) {
					/* One token (sampling): the same arithmetic as row 0 below, without the copies. */
					vec8 t0 = {0}, t1 = {0};
					int k = 0;
					for (; k + 8 <= K; k += 8) {
						vec8 x0 = load8(a0 + k);
						t0 += x0 * load8(b0 + k);
						t1 += x0 * load8(b1 + k);
					}
					float r0 = hsum8_at(&t0), r1 = hsum8_at(&t1);
					for (; k < K; k++) {
						r0 += a0[k] * b0[k];
						r1 += a0[k] * b1[k];
					}
					float *o0 = out + (size_t)m * N + n;
					o0[0] = (accumulate ? o0[0] : 0.0f) + r0;
					if (cols > 1)
						o0[1] = (accumulate ? o0[1] : 0.0f) + r1;
					continue;
				}
				vec8 s00 = {0}, s10 = {0}, s20 = {0}, s30 = {0};
				vec8 s01 = {0}, s11 = {0}, s21 = {0}, s31 = {0};
				int k = 0;
				for (; k + 8 <= K; k += 8) {
					vec8 w0 = load8(b0 + k), w1 = load8(b1 + k);
					vec8 x0 = load8(a0 + k), x1 = load8(a1 + k), x2 = load8(a2 + k), x3 = load8(a3 + k);
					s00 += x0 * w0; s10 += x1 * w0; s20 += x2 * w0; s30 += x3 * w0;
					s01 += x0 * w1; s11 += x1 * w1; s21 += x2 * w1; s31 += x3 * w1;
				}
				float r[8] = {hsum8_at(&s00), hsum8_at(&s10), hsum8_at(&s20), hsum8_at(&s30),
					      hsum8_at(&s01), hsum8_at(&s11), hsum8_at(&s21), hsum8_at(&s31)};
				for (; k < K; k++) {
					r[0] += a0[k] * b0[k]; r[1] += a1[k] * b0[k];
					r[2] += a2[k] * b0[k]; r[3] += a3[k] * b0[k];
					r[4] += a0[k] * b1[k]; r[5] += a1[k] * b1[k];
					r[6] += a2[k] * b1[k]; r[7] += a3[k] * b1[k];
				}
				for (int i = 0; i < rows; i++)
					for (int j = 0; j < cols; j++) {
						float *o0 = out + (size_t)(m + i) * N + n + j;
						*o0 = (accumulate ? *o0 : 0.0f) + r[4 * j + i];
					}
			}
		}
	}
}

/*
 * Threads: the columns of a large product are split between CA_THREADS
 * threads (default: the online processors, at most 64). Every output
 * element is computed by one thread in the same order, so results do not
 * depend on the thread count.
 */
struct matmul_job {
	float *out;
	const float *a, *b;
	int M, K, N, accumulate, n_begin, n_end;
};

static void *matmul_thread(void *p)
{
	struct matmul_job *j = p;
	matmul_nt_columns(j->out, j->a, j->b, j->M, j->K, j->N, j->accumulate, j->n_begin, j->n_end);
	return NULL;
}

static int thread_count(void)
{
	static int n;
	if (n == 0) {
		const char *e = getenv("CA_THREADS");
		long v = e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
		n = v < 1 ? 1 : v > 64 ? 64 : (int)v;
	}
	return n;
}

static void matmul_nt(float *out, const float *a, const float *b, int M, int K, int N, int accumulate)
{
	int nt = thread_count();
	double work = (double)M * K * N;
	int blocks = (N + COL_BLOCK - 1) / COL_BLOCK;
	if (nt > blocks)
		nt = blocks;
	if (nt <= 1 || work < 4e6) {
		matmul_nt_columns(out, a, b, M, K, N, accumulate, 0, N);
		return;
	}
	struct matmul_job jobs[64];
	pthread_t tid[64];
	int started[64] = {0};
	for (int i = 0; i < nt; i++) {
		int b0 = blocks * i / nt, b1 = blocks * (i + 1) / nt;
		jobs[i] = (struct matmul_job){out, a, b, M, K, N, accumulate, b0 * COL_BLOCK,
					      b1 * COL_BLOCK < N ? b1 * COL_BLOCK : N};
		if (i > 0)
			started[i] = pthread_create(&tid[i], NULL, matmul_thread, &jobs[i]) == 0;
	}
	matmul_thread(&jobs[0]);
	for (int i = 1; i < nt; i++) {
		if (started[i])
			pthread_join(tid[i], NULL);
		else
			matmul_thread(&jobs[i]);  /* no thread to be had: do it here */
	}
}

static float *transpose(const float *x, int rows, int cols)
{
	float *t = ca_xmalloc(sizeof(float) * (size_t)rows * (size_t)cols + 1);
	enum { TILE = 32 };
	for (int rb = 0; rb < rows; rb += TILE)
		for (int cb = 0; cb < cols; cb += TILE)
			for (int r = rb; r < rows && r < rb + TILE; r++)
				for (int c = cb; c < cols && c < cb + TILE; c++)
					t[(size_t)c * rows + r] = x[(size_t)r * cols + c];
	return t;
}

void ca_nn_linear_forward(float *out, const float *in, const float *weight, const float *bias,
			  int T, int I, int O)
{
	matmul_nt(out, in, weight, T, I, O, 0);
	if (bias)
		for (int t = 0; t < T; t++)
			for (int o = 0; o < O; o++)
				out[(size_t)t * O + o] += bias[o];
}

void ca_nn_linear_backward(float *din, float *dweight, float *dbias, const float *dout,
			   const float *in, const float *weight, int T, int I, int O)
{
	if (din) {
		/* din[T,I] += dout[T,O] W[O,I] = dout (W^T)^T */
		float *wt = transpose(weight, O, I);
		matmul_nt(din, dout, wt, T, O, I, 1);
		free(wt);
	}
	if (dweight) {
		/* dW[O,I] += dout^T[O,T] in[T,I] */
		float *gt = transpose(dout, T, O), *xt = transpose(in, T, I);
		matmul_nt(dweight, gt, xt, O, T, I, 1);
		free(gt);
		free(xt);
	}
	if (dbias)
		for (int t = 0; t < T; t++)
			for (int o = 0; o < O; o++)
				dbias[o] += dout[(size_t)t * O + o];
}

void ca_nn_rmsnorm_forward(float *out, float *rstd, const float *in, const float *weight,
			   float eps, int T, int C)
{
	for (int t = 0; t < T; t++) {
		const float *x = in + (size_t)t * C;
		float *y = out + (size_t)t * C;
		float ss = ca_nn_dot(x, x, C);
		float r = 1.0f / sqrtf(ss / (float)C + eps);
		rstd[t] = r;
		for (int i = 0; i < C; i++)
			y[i] = weight[i] * (x[i] * r);
	}
}

void ca_nn_rmsnorm_backward(float *din, float *dweight, const float *dout, const float *in,
			    const float *weight, const float *rstd, int T, int C)
{
	for (int t = 0; t < T; t++) {
		const float *x = in + (size_t)t * C;
		const float *g = dout + (size_t)t * C;
		float *dx = din + (size_t)t * C;
		float r = rstd[t];
		/* y_i = w_i x_i r; dr/dx_j = -r^3 x_j / C */
		double dot = 0;
		for (int i = 0; i < C; i++) {
			dweight[i] += g[i] * x[i] * r;
			dot += (double)g[i] * weight[i] * x[i];
		}
		float k = (float)(dot * r * r * r / C);
		for (int i = 0; i < C; i++)
			dx[i] += g[i] * weight[i] * r - k * x[i];
	}
}

void ca_nn_rope_table(float *cos_table, float *sin_table, int maxpos, int D, double theta)
{
	int half = D / 2;
	for (int i = 0; i < half; i++) {
		/* As transformers: inv_freq in fp32, angle = fp32(pos) * inv_freq in fp32. */
		float inv_freq = (float)(1.0 / pow(theta, (double)(2 * i) / (double)D));
		for (int p = 0; p < maxpos; p++) {
			float angle = (float)p * inv_freq;
			cos_table[(size_t)p * half + i] = cosf(angle);
			sin_table[(size_t)p * half + i] = sinf(angle);
		}
	}
}

static void rope_rotate(float *x, const int *pos, const float *cos_table, const float *sin_table,
			int T, int H, int D, float sign)
{
	int half = D / 2;
	for (int t = 0; t < T; t++) {
		const float *c = cos_table + (size_t)pos[t] * half;
		const float *s = sin_table + (size_t)pos[t] * half;
		for (int h = 0; h < H; h++) {
			float *v = x + ((size_t)t * H + h) * D;
			for (int i = 0; i < half; i++) {
				float a = v[i], b = v[i + half];
				v[i] = a * c[i] - sign * b * s[i];
				v[i + half] = b * c[i] + sign * a * s[i];
			}
		}
	}
}

void ca_nn_rope_forward(float *x, const int *pos, const float *cos_table, const float *sin_table,
			int T, int H, int D)
{
	rope_rotate(x, pos, cos_table, sin_table, T, H, D, 1.0f);
}

void ca_nn_rope_backward(float *dx, const int *pos, const float *cos_table, const float *sin_table,
			 int T, int H, int D)
{
	rope_rotate(dx, pos, cos_table, sin_table, T, H, D, -1.0f);
}

size_t ca_nn_attention_probs_size(const int *seq_start, int T, int NH)
{
	size_t n = 0;
	for (int t = 0; t < T; t++)
		n += (size_t)(t - seq_start[t] + 1);
	return n * (size_t)NH;
}

/* Softmax row of query qt over keys s..s+n-1 of kv head g, into p[0..n). */
static void attention_row(float *p, const float *qt, const float *k, int s, int n, int g, int NKV, int D,
			  float scale)
{
	float mx = -INFINITY;
	for (int j = 0; j < n; j++) {
		p[j] = ca_nn_dot(qt, k + ((size_t)(s + j) * NKV + g) * D, D) * scale;
		if (p[j] > mx)
			mx = p[j];
	}
	double sum = 0;
	for (int j = 0; j < n; j++) {
		p[j] = expf(p[j] - mx);
		sum += p[j];
	}
	float inv = (float)(1.0 / sum);
	for (int j = 0; j < n; j++)
		p[j] *= inv;
}

static int longest_row(const int *seq_start, int T)
{
	int cap = 1;
	for (int t = 0; t < T; t++)
		if (t - seq_start[t] + 1 > cap)
			cap = t - seq_start[t] + 1;
	return cap;
}

void ca_nn_attention_forward(float *out, float *probs, const float *q, const float *k,
			     const float *v, const int *seq_start, int T, int NH, int NKV, int D)
{
	int group = NH / NKV;
	float scale = 1.0f / sqrtf((float)D);
	float *scratch = probs ? NULL : ca_xmalloc(sizeof(float) * (size_t)longest_row(seq_start, T));
	size_t offset = 0;
	for (int t = 0; t < T; t++) {
		int s = seq_start[t], n = t - s + 1;
		for (int h = 0; h < NH; h++) {
			int g = h / group;
			float *p = probs ? probs + offset : scratch;
			offset += (size_t)n;
			attention_row(p, q + ((size_t)t * NH + h) * D, k, s, n, g, NKV, D, scale);
			float *o = out + ((size_t)t * NH + h) * D;
			memset(o, 0, sizeof *o * (size_t)D);
			for (int j = 0; j < n; j++)
				ca_nn_axpy(o, p[j], v + ((size_t)(s + j) * NKV + g) * D, D);
		}
	}
	free(scratch);
}

void ca_nn_attention_backward(float *dq, float *dk, float *dv, const float *dout,
			      const float *probs, const float *q, const float *k, const float *v,
			      const int *seq_start, int T, int NH, int NKV, int D)
{
	int group = NH / NKV;
	float scale = 1.0f / sqrtf((float)D);
	int cap = longest_row(seq_start, T);
	float *dp = ca_xmalloc(sizeof(float) * (size_t)cap);
	float *scratch = probs ? NULL : ca_xmalloc(sizeof(float) * (size_t)cap);
	size_t offset = 0;
	for (int t = 0; t < T; t++) {
		int s = seq_start[t], n = t - s + 1;
		for (int h = 0; h < NH; h++) {
			int g = h / group;
			const float *qt = q + ((size_t)t * NH + h) * D;
			const float *p = probs ? probs + offset : scratch;
			offset += (size_t)n;
			if (!probs)  /* the same arithmetic as the forward: the same numbers */
				attention_row(scratch, qt, k, s, n, g, NKV, D, scale);
			const float *go = dout + ((size_t)t * NH + h) * D;
			double pdp = 0;
			for (int j = 0; j < n; j++) {
				size_t kv = ((size_t)(s + j) * NKV + g) * D;
				dp[j] = ca_nn_dot(go, v + kv, D);
				pdp += (double)p[j] * dp[j];
				ca_nn_axpy(dv + kv, p[j], go, D);
			}
			float *dqt = dq + ((size_t)t * NH + h) * D;
			for (int j = 0; j < n; j++) {
				float ds = p[j] * (dp[j] - (float)pdp) * scale;
				size_t kv = ((size_t)(s + j) * NKV + g) * D;
				ca_nn_axpy(dqt, ds, k + kv, D);
				ca_nn_axpy(dk + kv, ds, qt, D);
			}
		}
	}
	free(dp);
	free(scratch);
}

void ca_nn_swiglu_forward(float *h, const float *gate, const float *up, int N)
{
	for (int i = 0; i < N; i++) {
		float g = gate[i];
		h[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

void ca_nn_swiglu_backward(float *dgate, float *dup, const float *dh, const float *gate,
			   const float *up, int N)
{
	for (int i = 0; i < N; i++) {
		float g = gate[i];
		float sig = 1.0f / (1.0f + expf(-g));
		float silu = g * sig;
		dup[i] += dh[i] * silu;
		dgate[i] += dh[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
	}
}

static float row_logsumexp(const float *z, int V)
{
	float mx = -INFINITY;
	for (int j = 0; j < V; j++)
		if (z[j] > mx)
			mx = z[j];
	double sum = 0;
	for (int j = 0; j < V; j++)
		sum += exp((double)(z[j] - mx));
	return mx + (float)log(sum);
}

float ca_nn_logprob_row(const float *logits, int V, int target, float *entropy)
{
	float lse = row_logsumexp(logits, V);
	if (entropy) {
		double pz = 0;
		for (int j = 0; j < V; j++)
			pz += exp((double)(logits[j] - lse)) * logits[j];
		*entropy = (float)(lse - pz);
	}
	return target >= 0 && target < V ? logits[target] - lse : 0.0f;
}

void ca_nn_logprob_row_backward(float *dlogits, const float *logits, int V, int target,
				float dlogp, float dentropy)
{
	float lse = row_logsumexp(logits, V);
	float H = 0;
	if (dentropy != 0.0f) {
		double pz = 0;
		for (int j = 0; j < V; j++)
			pz += exp((double)(logits[j] - lse)) * logits[j];
		H = (float)(lse - pz);
	}
	for (int j = 0; j < V; j++) {
		float logp = logits[j] - lse;
		float p = expf(logp);
		dlogits[j] = -dlogp * p + (dentropy != 0.0f ? -dentropy * p * (logp + H) : 0.0f);
	}
	if (target >= 0 && target < V)
		dlogits[target] += dlogp;
}
