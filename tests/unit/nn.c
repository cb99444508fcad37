/*
 * Finite-difference gradient checks of every CPU layer in lib/nn, plus the
 * whole model (lib/model) on a tiny random configuration.
 *
 * For a layer y = f(x, w) and a fixed random R, the scalar L = sum(y * R)
 * has dL/dx = backward(dout = R). Each analytic entry is compared with the
 * central difference (L(x + h) - L(x - h)) / 2h, computed in double from
 * float forward passes; every element of every input is checked.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "model.h"
#include "nn.h"

static int failures;
static double worst;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float randn(void)
{
	double u = 0;
	for (int i = 0; i < 12; i++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		u += (double)(rng >> 11) / 9007199254740992.0;
	}
	return (float)(u - 6.0);
}

static float *random_array(size_t n, float scale)
{
	float *a = ca_xmalloc(sizeof(float) * n);
	for (size_t i = 0; i < n; i++)
		a[i] = scale * randn();
	return a;
}

static float *zeros(size_t n)
{
	return ca_xcalloc(n, sizeof(float));
}

/* The scalar loss of the layer under test at the current inputs. */
typedef double (*loss_fn)(void *ctx);

static void check(const char *what, loss_fn f, void *ctx, float *x, const float *grad, size_t n)
{
	const float h = 1e-2f;
	double max_err = 0;
	for (size_t i = 0; i < n; i++) {
		float saved = x[i];
		x[i] = saved + h;
		double lp = f(ctx);
		x[i] = saved - h;
		double lm = f(ctx);
		x[i] = saved;
		double numeric = (lp - lm) / (2.0 * h);
		double err = fabs(numeric - grad[i]) / (fabs(numeric) + fabs(grad[i]) + 1e-2);
		if (err > max_err)
			max_err = err;
	}
	if (max_err > worst)
		worst = max_err;
	printf("%-28s %6zu entries, max relative error %.2e\n", what, n, max_err);
	if (max_err > 2e-2) {
		fprintf(stderr, "%s: gradient check failed (%.3g)\n", what, max_err);
		failures++;
	}
}

static double dot_double(const float *a, const float *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += (double)a[i] * b[i];
	return s;
}

/* ---- linear ---- */
struct linear_case { int T, I, O; float *x, *w, *b, *y, *R; };
static double linear_loss(void *p)
{
	struct linear_case *c = p;
	ca_nn_linear_forward(c->y, c->x, c->w, c->b, c->T, c->I, c->O);
	return dot_double(c->y, c->R, (size_t)c->T * c->O);
}
static void test_linear(void)
{
	struct linear_case c = {.T = 6, .I = 19, .O = 13};
	size_t TI = (size_t)c.T * c.I, OI = (size_t)c.O * c.I, TO = (size_t)c.T * c.O;
	c.x = random_array(TI, 1); c.w = random_array(OI, 0.5f); c.b = random_array((size_t)c.O, 0.5f);
	c.y = zeros(TO); c.R = random_array(TO, 1);
	float *dx = zeros(TI), *dw = zeros(OI), *db = zeros((size_t)c.O);
	ca_nn_linear_backward(dx, dw, db, c.R, c.x, c.w, c.T, c.I, c.O);
	check("linear input", linear_loss, &c, c.x, dx, TI);
	check("linear weight", linear_loss, &c, c.w, dw, OI);
	check("linear bias", linear_loss, &c, c.b, db, (size_t)c.O);
	free(c.x); free(c.w); free(c.b); free(c.y); free(c.R); free(dx); free(dw); free(db);
}

/* ---- rmsnorm ---- */
struct norm_case { int T, C; float *x, *w, *y, *rstd, *R; };
static double norm_loss(void *p)
{
	struct norm_case *c = p;
	ca_nn_rmsnorm_forward(c->y, c->rstd, c->x, c->w, 1e-6f, c->T, c->C);
	return dot_double(c->y, c->R, (size_t)c->T * c->C);
}
static void test_rmsnorm(void)
{
	struct norm_case c = {.T = 5, .C = 24};
	size_t TC = (size_t)c.T * c.C;
	c.x = random_array(TC, 1); c.w = random_array((size_t)c.C, 1); c.y = zeros(TC);
	c.rstd = zeros((size_t)c.T); c.R = random_array(TC, 1);
	float *dx = zeros(TC), *dw = zeros((size_t)c.C);
	norm_loss(&c);
	ca_nn_rmsnorm_backward(dx, dw, c.R, c.x, c.w, c.rstd, c.T, c.C);
	check("rmsnorm input", norm_loss, &c, c.x, dx, TC);
	check("rmsnorm weight", norm_loss, &c, c.w, dw, (size_t)c.C);
	free(c.x); free(c.w); free(c.y); free(c.rstd); free(c.R); free(dx); free(dw);
}

/* ---- rope ---- */
struct rope_case { int T, H, D; int *pos; float *cosv, *sinv, *x, *y, *R; };
static double rope_loss(void *p)
{
	struct rope_case *c = p;
	size_t n = (size_t)c->T * c->H * c->D;
	memcpy(c->y, c->x, sizeof(float) * n);
	ca_nn_rope_forward(c->y, c->pos, c->cosv, c->sinv, c->T, c->H, c->D);
	return dot_double(c->y, c->R, n);
}
static void test_rope(void)
{
	struct rope_case c = {.T = 7, .H = 3, .D = 8};
	int pos[7] = {0, 1, 2, 0, 1, 2, 3};
	c.pos = pos;
	c.cosv = zeros(16 * 4); c.sinv = zeros(16 * 4);
	ca_nn_rope_table(c.cosv, c.sinv, 16, c.D, 10000.0);
	size_t n = (size_t)c.T * c.H * c.D;
	c.x = random_array(n, 1); c.y = zeros(n); c.R = random_array(n, 1);
	float *dx = zeros(n);
	memcpy(dx, c.R, sizeof(float) * n);
	ca_nn_rope_backward(dx, c.pos, c.cosv, c.sinv, c.T, c.H, c.D);
	check("rope input", rope_loss, &c, c.x, dx, n);
	free(c.cosv); free(c.sinv); free(c.x); free(c.y); free(c.R); free(dx);
}

/* ---- attention over two packed sequences, GQA ---- */
struct att_case { int T, NH, NKV, D; int *start; float *q, *k, *v, *y, *probs, *R; };
static double att_loss(void *p)
{
	struct att_case *c = p;
	ca_nn_attention_forward(c->y, c->probs, c->q, c->k, c->v, c->start, c->T, c->NH, c->NKV, c->D);
	return dot_double(c->y, c->R, (size_t)c->T * c->NH * c->D);
}
static void test_attention(void)
{
	struct att_case c = {.T = 7, .NH = 4, .NKV = 2, .D = 6};
	int start[7] = {0, 0, 0, 3, 3, 3, 3};
	c.start = start;
	size_t QN = (size_t)c.T * c.NH * c.D, KN = (size_t)c.T * c.NKV * c.D;
	c.q = random_array(QN, 1); c.k = random_array(KN, 1); c.v = random_array(KN, 1);
	c.y = zeros(QN); c.R = random_array(QN, 1);
	c.probs = zeros(ca_nn_attention_probs_size(start, c.T, c.NH));
	float *dq = zeros(QN), *dk = zeros(KN), *dv = zeros(KN);
	att_loss(&c);
	ca_nn_attention_backward(dq, dk, dv, c.R, c.probs, c.q, c.k, c.v, start, c.T, c.NH, c.NKV, c.D);
	check("attention q", att_loss, &c, c.q, dq, QN);
	check("attention k", att_loss, &c, c.k, dk, KN);
	check("attention v", att_loss, &c, c.v, dv, KN);
	/* Without stored probabilities both directions give the same numbers, bit for bit. */
	{
		size_t QN2 = QN, KN2 = KN;
		float *y2 = zeros(QN2), *dq2 = zeros(QN2), *dk2 = zeros(KN2), *dv2 = zeros(KN2);
		att_loss(&c);
		ca_nn_attention_forward(y2, NULL, c.q, c.k, c.v, start, c.T, c.NH, c.NKV, c.D);
		memset(dq, 0, sizeof(float) * QN); memset(dk, 0, sizeof(float) * KN); memset(dv, 0, sizeof(float) * KN);
		ca_nn_attention_backward(dq, dk, dv, c.R, c.probs, c.q, c.k, c.v, start, c.T, c.NH, c.NKV, c.D);
		ca_nn_attention_backward(dq2, dk2, dv2, c.R, NULL, c.q, c.k, c.v, start, c.T, c.NH, c.NKV, c.D);
		if (memcmp(y2, c.y, sizeof(float) * QN) || memcmp(dq, dq2, sizeof(float) * QN) ||
		    memcmp(dk, dk2, sizeof(float) * KN) || memcmp(dv, dv2, sizeof(float) * KN)) {
			fprintf(stderr, "attention without stored probabilities differs\n");
			failures++;
		} else {
			printf("%-28s identical without stored probabilities\n", "attention");
		}
		free(y2); free(dq2); free(dk2); free(dv2);
	}
	/* No attention across sequences: changing sequence 2 leaves sequence 1's outputs alone. */
	att_loss(&c);
	float before = c.y[2 * c.NH * c.D];
	c.k[4 * c.NKV * c.D] += 1.0f;
	c.v[4 * c.NKV * c.D] += 1.0f;
	att_loss(&c);
	if (c.y[2 * c.NH * c.D] != before) {
		fprintf(stderr, "attention crossed a sequence boundary\n");
		failures++;
	}
	free(c.q); free(c.k); free(c.v); free(c.y); free(c.R); free(c.probs); free(dq); free(dk); free(dv);
}

/* ---- swiglu ---- */
struct swiglu_case { int N; float *g, *u, *y, *R; };
static double swiglu_loss(void *p)
{
	struct swiglu_case *c = p;
	ca_nn_swiglu_forward(c->y, c->g, c->u, c->N);
	return dot_double(c->y, c->R, (size_t)c->N);
}
static void test_swiglu(void)
{
	struct swiglu_case c = {.N = 40};
	c.g = random_array(40, 2); c.u = random_array(40, 1); c.y = zeros(40); c.R = random_array(40, 1);
	float *dg = zeros(40), *du = zeros(40);
	ca_nn_swiglu_backward(dg, du, c.R, c.g, c.u, c.N);
	check("swiglu gate", swiglu_loss, &c, c.g, dg, 40);
	check("swiglu up", swiglu_loss, &c, c.u, du, 40);
	free(c.g); free(c.u); free(c.y); free(c.R); free(dg); free(du);
}

/* ---- log-prob and entropy of one row ---- */
struct lp_case { int V, target; float a, b; float *z; };
static double lp_loss(void *p)
{
	struct lp_case *c = p;
	float H;
	float lp = ca_nn_logprob_row(c->z, c->V, c->target, &H);
	return (double)c->a * lp + (double)c->b * H;
}
static void test_logprob(void)
{
	struct lp_case c = {.V = 30, .target = 7, .a = 0.7f, .b = -1.3f};
	c.z = random_array(30, 2);
	float *dz = zeros(30);
	ca_nn_logprob_row_backward(dz, c.z, c.V, c.target, c.a, c.b);
	check("logprob+entropy logits", lp_loss, &c, c.z, dz, 30);
	free(c.z); free(dz);
}

int main(void)
{
	test_linear();
	test_rmsnorm();
	test_rope();
	test_attention();
	test_swiglu();
	test_logprob();
	printf("worst relative error %.2e\n", worst);
	if (failures)
		fprintf(stderr, "%d gradient checks failed\n", failures);
	return failures ? 1 : 0;
}
