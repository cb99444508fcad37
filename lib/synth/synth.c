/* synth: see synth.h. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "splitmix.h"
#include "synth.h"

/* ---------------------------------------------------------------- random */

void ca_synth_rng_seed(struct ca_synth_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = ca_splitmix_next(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t ca_synth_rng_next(struct ca_synth_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return result;
}

uint64_t ca_synth_rng_below(struct ca_synth_rng *r, uint64_t n)
{
	return n ? ca_synth_rng_next(r) % n : 0;
}

double ca_synth_rng_unit(struct ca_synth_rng *r)
{
	return (double)(ca_synth_rng_next(r) >> 11) * 0x1.0p-53;
}

static long pick(struct ca_synth_rng *r, const long *v, size_t n)
{
	return v[ca_synth_rng_below(r, n)];
}
#define PICK(r, ...) pick((r), (const long[]){__VA_ARGS__}, sizeof((const long[]){__VA_ARGS__}) / sizeof(long))

/* ---------------------------------------------------------------- table */

enum kind {
	ELEMENTWISE,  /* x = NAME(x) */
	LEAKY, HARDTANH, CLAMP, SCALE, ADD_BIAS, ELU,
	SOFTMAX,      /* along dim 1 or the last dim */
	NORMALIZE, CUMSUM,
	LAYERNORM, BATCHNORM, GROUPNORM, INSTANCENORM,
	LINEAR, MATMUL, CONV, CONV_TRANSPOSE,
	POOL,         /* nn.MaxPoolNd / nn.AvgPoolNd with kernel 2 */
	ADAPTIVE_POOL,
	REDUCE,       /* torch.sum/mean/amax/amin/logsumexp over one dim */
};

struct opdef {
	const char *name, *qualified;
	enum kind kind;
	int min_rank, max_rank;
	const char *attr;  /* attribute base name for modules */
};

static const struct opdef table[] = {
	{"torch.relu", "torch.relu", ELEMENTWISE, 2, 5, NULL},
	{"torch.sigmoid", "torch.sigmoid", ELEMENTWISE, 2, 5, NULL},
	{"torch.tanh", "torch.tanh", ELEMENTWISE, 2, 5, NULL},
	{"torch.abs", "torch.abs", ELEMENTWISE, 2, 5, NULL},
	{"F.gelu", "torch.nn.functional.gelu", ELEMENTWISE, 2, 5, NULL},
	{"F.silu", "torch.nn.functional.silu", ELEMENTWISE, 2, 5, NULL},
	{"F.softplus", "torch.nn.functional.softplus", ELEMENTWISE, 2, 5, NULL},
	{"F.mish", "torch.nn.functional.mish", ELEMENTWISE, 2, 5, NULL},
	{"F.hardswish", "torch.nn.functional.hardswish", ELEMENTWISE, 2, 5, NULL},
	{"F.hardsigmoid", "torch.nn.functional.hardsigmoid", ELEMENTWISE, 2, 5, NULL},
	{"F.selu", "torch.nn.functional.selu", ELEMENTWISE, 2, 5, NULL},
	{"F.logsigmoid", "torch.nn.functional.logsigmoid", ELEMENTWISE, 2, 5, NULL},
	{"F.softsign", "torch.nn.functional.softsign", ELEMENTWISE, 2, 5, NULL},
	{"F.leaky_relu", "torch.nn.functional.leaky_relu", LEAKY, 2, 5, NULL},
	{"F.elu", "torch.nn.functional.elu", ELU, 2, 5, NULL},
	{"F.hardtanh", "torch.nn.functional.hardtanh", HARDTANH, 2, 5, NULL},
	{"torch.clamp", "torch.clamp", CLAMP, 2, 5, NULL},
	{"torch.mul", "torch.mul", SCALE, 2, 5, NULL},
	{"torch.add", "torch.add", ADD_BIAS, 2, 5, NULL},
	{"torch.softmax", "torch.softmax", SOFTMAX, 2, 5, NULL},
	{"torch.log_softmax", "torch.log_softmax", SOFTMAX, 2, 5, NULL},
	{"F.normalize", "torch.nn.functional.normalize", NORMALIZE, 2, 5, NULL},
	{"torch.cumsum", "torch.cumsum", CUMSUM, 2, 4, NULL},
	{"nn.LayerNorm", "torch.nn.LayerNorm", LAYERNORM, 2, 4, "norm"},
	{"nn.BatchNorm1d", "torch.nn.BatchNorm1d", BATCHNORM, 2, 3, "bn"},
	{"nn.BatchNorm2d", "torch.nn.BatchNorm2d", BATCHNORM, 4, 4, "bn"},
	{"nn.BatchNorm3d", "torch.nn.BatchNorm3d", BATCHNORM, 5, 5, "bn"},
	{"nn.GroupNorm", "torch.nn.GroupNorm", GROUPNORM, 3, 5, "gn"},
	{"nn.InstanceNorm2d", "torch.nn.InstanceNorm2d", INSTANCENORM, 4, 4, "inorm"},
	{"nn.Linear", "torch.nn.Linear", LINEAR, 2, 3, "linear"},
	{"torch.matmul", "torch.matmul", MATMUL, 2, 3, NULL},
	{"nn.Conv1d", "torch.nn.Conv1d", CONV, 3, 3, "conv"},
	{"nn.Conv2d", "torch.nn.Conv2d", CONV, 4, 4, "conv"},
	{"nn.Conv3d", "torch.nn.Conv3d", CONV, 5, 5, "conv"},
	{"nn.ConvTranspose1d", "torch.nn.ConvTranspose1d", CONV_TRANSPOSE, 3, 3, "deconv"},
	{"nn.ConvTranspose2d", "torch.nn.ConvTranspose2d", CONV_TRANSPOSE, 4, 4, "deconv"},
	{"nn.ConvTranspose3d", "torch.nn.ConvTranspose3d", CONV_TRANSPOSE, 5, 5, "deconv"},
	{"nn.MaxPool1d", "torch.nn.MaxPool1d", POOL, 3, 3, "pool"},
	{"nn.MaxPool2d", "torch.nn.MaxPool2d", POOL, 4, 4, "pool"},
	{"nn.MaxPool3d", "torch.nn.MaxPool3d", POOL, 5, 5, "pool"},
	{"nn.AvgPool1d", "torch.nn.AvgPool1d", POOL, 3, 3, "pool"},
	{"nn.AvgPool2d", "torch.nn.AvgPool2d", POOL, 4, 4, "pool"},
	{"nn.AvgPool3d", "torch.nn.AvgPool3d", POOL, 5, 5, "pool"},
	{"F.adaptive_avg_pool2d", "torch.nn.functional.adaptive_avg_pool2d", ADAPTIVE_POOL, 4, 4, NULL},
	{"F.adaptive_max_pool2d", "torch.nn.functional.adaptive_max_pool2d", ADAPTIVE_POOL, 4, 4, NULL},
	{"torch.sum", "torch.sum", REDUCE, 2, 5, NULL},
	{"torch.mean", "torch.mean", REDUCE, 2, 5, NULL},
	{"torch.amax", "torch.amax", REDUCE, 2, 5, NULL},
	{"torch.amin", "torch.amin", REDUCE, 2, 5, NULL},
	{"torch.logsumexp", "torch.logsumexp", REDUCE, 2, 5, NULL},
};
#define NOPS (sizeof table / sizeof table[0])

size_t ca_synth_op_count(void)
{
	return NOPS;
}

const char *ca_synth_op_name(size_t i)
{
	return i < NOPS ? table[i].name : NULL;
}

const char *ca_synth_op_qualified(size_t i)
{
	return i < NOPS ? table[i].qualified : NULL;
}

/* ---------------------------------------------------------------- generation */

/* Tiny mode (a target under 0.1 ms): every size an eighth, for quick CPU runs. */
static int tiny;

static long shrink(long v)
{
	return tiny && v > 4 ? (v / 8 < 4 ? 4 : v / 8) : v;
}

struct shape {
	int rank;
	long d[5];  /* d[0] is the batch; sizes are per sample elsewhere */
};

struct text {
	char *s;
	size_t n, cap;
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
		va_end(ap);
		if (t->s && (size_t)k < t->cap - t->n) {
			t->n += (size_t)k;
			return;
		}
		t->cap = (t->n + (size_t)k + 1) * 2;
		t->s = ca_xrealloc(t->s, t->cap);
	}
}

struct gen {
	struct text init, fwd;
	double flops, bytes;  /* per sample */
	double max_elems;     /* largest tensor, per sample */
	int attrs[16];        /* uses of each attribute base name */
	const char *attr_names[16];
	int nattr;
	jv adapters;
};

static double per_sample(const struct shape *s)
{
	double n = 1;
	for (int i = 1; i < s->rank; i++)
		n *= (double)s->d[i];
	return n;
}

static void track(struct gen *g, const struct shape *s)
{
	double n = per_sample(s);
	if (n > g->max_elems)
		g->max_elems = n;
}

/* "self.conv", "self.conv2", ... */
static void attr_name(struct gen *g, const char *base, char *out, size_t n)
{
	int k;
	for (k = 0; k < g->nattr; k++)
		if (!strcmp(g->attr_names[k], base))
			break;
	if (k == g->nattr) {
		if (g->nattr == 16) {
			snprintf(out, n, "%s_extra", base);
			return;
		}
		g->attr_names[g->nattr] = base;
		g->attrs[g->nattr++] = 0;
	}
	int use = ++g->attrs[k];
	if (use == 1)
		snprintf(out, n, "%s", base);
	else
		snprintf(out, n, "%s%d", base, use);
}

static void shape_text(const struct shape *s, int from, char *out, size_t n)
{
	size_t used = 0;
	out[0] = '\0';
	for (int i = from; i < s->rank; i++)
		used += (size_t)snprintf(out + used, n - used, "%s%ld", i > from ? ", " : "", s->d[i]);
}

static void elementwise_bytes(struct gen *g, const struct shape *s, double passes)
{
	g->bytes += passes * 8 * per_sample(s);
}

/* The number of groups for nn.GroupNorm over c channels: 8, 4 or 2 at random where they divide c. */
static long group_count(long c, struct ca_synth_rng *r)
{
	long groups = 0;
	for (long k = 8; k >= 2; k /= 2)
		if (c % k == 0 && c / k >= 1 && !groups && ca_synth_rng_below(r, 2))
			groups = k;
	if (!groups)
		groups = c % 2 == 0 ? 2 : 1;
	return groups;
}

/* nn.Linear or torch.matmul by a parameter: the last dim projected to a new size. */
static int apply_projection(const struct opdef *op, struct shape *s, struct ca_synth_rng *r, struct gen *g)
{
	char a[64];
	int rank = s->rank;
	long lastdim = s->d[rank - 1];
	long out = shrink(PICK(r, 256, 512, 1024, 2048, 4096));
	double rows = per_sample(s) / (double)lastdim;
	if (op->kind == LINEAR) {
		attr_name(g, op->attr, a, sizeof a);
		add(&g->init, "        self.%s = nn.Linear(%ld, %ld)\n", a, lastdim, out);
		add(&g->fwd, "        x = self.%s(x)\n", a);
	} else {
		attr_name(g, "weight", a, sizeof a);
		add(&g->init, "        self.%s = nn.Parameter(torch.randn(%ld, %ld) * %g)\n", a, lastdim, out,
		    1.0 / sqrt((double)lastdim) < 0.01 ? 0.01 : round(100.0 / sqrt((double)lastdim)) / 100.0);
		add(&g->fwd, "        x = torch.matmul(x, self.%s)\n", a);
	}
	g->flops += 2.0 * rows * (double)lastdim * (double)out;
	g->bytes += 4.0 * rows * (double)(lastdim + out);
	s->d[rank - 1] = out;
	return 0;
}

struct conv_geometry {
	long cout, k, stride, pad, outpad;
};

/* Output channels, kernel, stride and padding of a convolution of s; -1 when the kernel does not fit. */
static int conv_geometry(const struct opdef *op, const struct shape *s, struct ca_synth_rng *r, struct conv_geometry *cg)
{
	int rank = s->rank, nd = rank - 2;
	cg->cout = shrink(PICK(r, 16, 32, 64, 128));
	cg->stride = 1;
	cg->outpad = 0;
	long spatial_min = s->d[2];
	for (int i = 3; i < rank; i++)
		if (s->d[i] < spatial_min)
			spatial_min = s->d[i];
	if (op->kind == CONV) {
		cg->k = nd == 3 ? 3 : PICK(r, 1, 3, 3, 5);
		if (cg->k > spatial_min)
			return -1;
		if (spatial_min >= 16 && ca_synth_rng_below(r, 4) == 0)
			cg->stride = 2;
		cg->pad = ca_synth_rng_below(r, 3) ? cg->k / 2 : 0;
	} else {
		/* Upsampling by 2 unless the input is already large. */
		if (per_sample(s) * (double)cg->cout / (double)s->d[1] * (1 << nd) < 64e6 && ca_synth_rng_below(r, 2)) {
			cg->k = 4;
			cg->stride = 2;
			cg->pad = 1;
			if (nd == 3)
				cg->k = 3, cg->outpad = 1;
		} else {
			cg->k = 3;
			cg->pad = 1;
		}
	}
	return 0;
}

/* nn.ConvNd or nn.ConvTransposeNd: the module's text, then the new shape and the cost. */
static int apply_conv(const struct opdef *op, struct shape *s, struct ca_synth_rng *r, struct gen *g)
{
	char a[64];
	int rank = s->rank, nd = rank - 2;
	long c = s->d[1];
	struct conv_geometry cg;
	if (conv_geometry(op, s, r, &cg) != 0)
		return -1;
	attr_name(g, op->attr, a, sizeof a);
	struct text extra = {0};
	if (cg.stride != 1)
		add(&extra, ", stride=%ld", cg.stride);
	if (cg.pad)
		add(&extra, ", padding=%ld", cg.pad);
	if (cg.outpad)
		add(&extra, ", output_padding=%ld", cg.outpad);
	add(&g->init, "        self.%s = %s(%ld, %ld, kernel_size=%ld%s)\n", a, op->name, c, cg.cout, cg.k,
	    extra.s ? extra.s : "");
	free(extra.s);
	add(&g->fwd, "        x = self.%s(x)\n", a);
	double in_elems = per_sample(s);
	for (int i = 2; i < rank; i++) {
		if (op->kind == CONV)
			s->d[i] = (s->d[i] + 2 * cg.pad - cg.k) / cg.stride + 1;
		else
			s->d[i] = (s->d[i] - 1) * cg.stride - 2 * cg.pad + cg.k + cg.outpad;
		if (s->d[i] < 1)
			return -1;
	}
	s->d[1] = cg.cout;
	double out_elems = per_sample(s);
	double kvol = 1;
	for (int i = 0; i < nd; i++)
		kvol *= (double)cg.k;
	g->flops += 2.0 * (op->kind == CONV ? out_elems : in_elems) * (double)(op->kind == CONV ? c : cg.cout) * kvol;
	g->bytes += 4.0 * (in_elems + out_elems);
	return 0;
}

/* A reduction over one dim; never the batch, and rank 2 only as the last op (the output is then per sample). */
static int apply_reduce(const struct opdef *op, struct shape *s, struct ca_synth_rng *r, struct gen *g, int last)
{
	int rank = s->rank;
	int keep = rank == 2 ? 0 : (int)ca_synth_rng_below(r, 2);
	if (rank == 2 && !last)
		return -1;
	int dim = 1 + (int)ca_synth_rng_below(r, (uint64_t)(rank - 1));
	add(&g->fwd, "        x = %s(x, dim=%d%s)\n", op->name, dim, keep ? ", keepdim=True" : "");
	g->bytes += 4.0 * per_sample(s);
	if (keep) {
		s->d[dim] = 1;
	} else {
		for (int i = dim; i < rank - 1; i++)
			s->d[i] = s->d[i + 1];
		s->rank--;
	}
	return 0;
}

/* Apply op to x of shape s; -1 when it does not fit this shape. */
static int apply(const struct opdef *op, struct shape *s, struct ca_synth_rng *r, struct gen *g, int last)
{
	char a[64];
	int rank = s->rank;
	long c = s->d[1], lastdim = s->d[rank - 1];
	if (rank < op->min_rank || rank > op->max_rank)
		return -1;
	switch (op->kind) {
	case ELEMENTWISE:
		add(&g->fwd, "        x = %s(x)\n", op->name);
		elementwise_bytes(g, s, 1);
		return 0;
	case LEAKY:
		add(&g->fwd, "        x = F.leaky_relu(x, negative_slope=%s)\n",
		    (const char *[]){"0.01", "0.1", "0.2"}[ca_synth_rng_below(r, 3)]);
		elementwise_bytes(g, s, 1);
		return 0;
	case ELU:
		add(&g->fwd, "        x = F.elu(x, alpha=%s)\n", (const char *[]){"1.0", "0.5"}[ca_synth_rng_below(r, 2)]);
		elementwise_bytes(g, s, 1);
		return 0;
	case HARDTANH: {
		const char *b = (const char *[]){"0.5", "1.0", "2.0"}[ca_synth_rng_below(r, 3)];
		add(&g->fwd, "        x = F.hardtanh(x, min_val=-%s, max_val=%s)\n", b, b);
		elementwise_bytes(g, s, 1);
		return 0;
	}
	case CLAMP: {
		const char *b = (const char *[]){"0.5", "1.0", "2.0"}[ca_synth_rng_below(r, 3)];
		add(&g->fwd, "        x = torch.clamp(x, min=-%s, max=%s)\n", b, b);
		elementwise_bytes(g, s, 1);
		return 0;
	}
	case SCALE:
		add(&g->fwd, "        x = torch.mul(x, %s)\n", (const char *[]){"0.5", "2.0", "1.5", "0.1"}[ca_synth_rng_below(r, 4)]);
		elementwise_bytes(g, s, 1);
		return 0;
	case ADD_BIAS: {
		char shp[64];
		size_t used = (size_t)snprintf(shp, sizeof shp, "%ld", c);
		for (int i = 2; i < rank; i++)
			used += (size_t)snprintf(shp + used, sizeof shp - used, ", 1");
		attr_name(g, "bias", a, sizeof a);
		add(&g->init, "        self.%s = nn.Parameter(torch.randn(%s))\n", a, shp);
		add(&g->fwd, "        x = torch.add(x, self.%s)\n", a);
		elementwise_bytes(g, s, 1);
		return 0;
	}
	case SOFTMAX: {
		int dim = ca_synth_rng_below(r, 2) ? 1 : -1;
		add(&g->fwd, "        x = %s(x, dim=%d)\n", op->name, dim);
		elementwise_bytes(g, s, 2);
		return 0;
	}
	case NORMALIZE:
		add(&g->fwd, "        x = F.normalize(x, dim=%d)\n", ca_synth_rng_below(r, 2) ? 1 : -1);
		elementwise_bytes(g, s, 2);
		return 0;
	case CUMSUM:
		add(&g->fwd, "        x = torch.cumsum(x, dim=%d)\n", ca_synth_rng_below(r, 2) ? 1 : -1);
		elementwise_bytes(g, s, 1);
		return 0;
	case LAYERNORM:
		attr_name(g, op->attr, a, sizeof a);
		add(&g->init, "        self.%s = nn.LayerNorm(%ld)\n", a, lastdim);
		add(&g->fwd, "        x = self.%s(x)\n", a);
		elementwise_bytes(g, s, 2);
		return 0;
	case BATCHNORM:
		attr_name(g, op->attr, a, sizeof a);
		add(&g->init, "        self.%s = %s(%ld)\n", a, op->name, c);
		add(&g->fwd, "        x = self.%s(x)\n", a);
		elementwise_bytes(g, s, 2);
		return 0;
	case INSTANCENORM:
		if (s->d[2] * s->d[3] < 2)
			return -1;  /* instance statistics need more than one value */
		attr_name(g, op->attr, a, sizeof a);
		add(&g->init, "        self.%s = nn.InstanceNorm2d(%ld)\n", a, c);
		add(&g->fwd, "        x = self.%s(x)\n", a);
		elementwise_bytes(g, s, 2);
		return 0;
	case GROUPNORM: {
		long groups = group_count(c, r);
		attr_name(g, op->attr, a, sizeof a);
		add(&g->init, "        self.%s = nn.GroupNorm(%ld, %ld)\n", a, groups, c);
		add(&g->fwd, "        x = self.%s(x)\n", a);
		elementwise_bytes(g, s, 2);
		return 0;
	}
	case LINEAR:
	case MATMUL:
		return apply_projection(op, s, r, g);
	case CONV:
	case CONV_TRANSPOSE:
		return apply_conv(op, s, r, g);
	case POOL: {
		for (int i = 2; i < rank; i++)
			if (s->d[i] < 4)
				return -1;
		attr_name(g, op->attr, a, sizeof a);
		add(&g->init, "        self.%s = %s(kernel_size=2)\n", a, op->name);
		add(&g->fwd, "        x = self.%s(x)\n", a);
		double in = per_sample(s);
		for (int i = 2; i < rank; i++)
			s->d[i] /= 2;
		g->bytes += 4.0 * (in + per_sample(s));
		return 0;
	}
	case ADAPTIVE_POOL: {
		long o = PICK(r, 1, 4, 8);
		if (s->d[2] < 2 * o || s->d[3] < 2 * o)
			return -1;
		add(&g->fwd, "        x = %s(x, (%ld, %ld))\n", op->name, o, o);
		double in = per_sample(s);
		s->d[2] = s->d[3] = o;
		g->bytes += 4.0 * (in + per_sample(s));
		return 0;
	}
	case REDUCE:
		return apply_reduce(op, s, r, g, last);
	}
	return -1;
}

static void adapter(struct gen *g, int after, const char *op, const char *why)
{
	jv a = jv_object();
	a = jv_object_set(a, jv_string("after"), jv_number(after));
	a = jv_object_set(a, jv_string("op"), jv_string(op));
	a = jv_object_set(a, jv_string("why"), jv_string(why));
	g->adapters = jv_array_append(g->adapters, a);
}

/*
 * Bring x to a rank op accepts, the way an author would: global average
 * pooling or flattening to reach features, flattening spatial dimensions
 * into a sequence, or adding a channel. -1 when no sensible adapter exists.
 */
static int adapt(const struct opdef *op, struct shape *s, struct ca_synth_rng *r, struct gen *g, int index)
{
	char why[128];
	if (s->rank >= op->min_rank && s->rank <= op->max_rank)
		return 0;
	snprintf(why, sizeof why, "%s needs a rank-%d input", op->name,
	         s->rank > op->max_rank ? op->max_rank : op->min_rank);
	if (s->rank > op->max_rank && op->max_rank >= 2) {
		int want = op->max_rank;
		if (want == 2 && (per_sample(s) > 16384 || ca_synth_rng_below(r, 2))) {
			struct text dims = {0};
			for (int i = 2; i < s->rank; i++)
				add(&dims, "%s%d", i > 2 ? ", " : "", i);
			add(&g->fwd, "        x = torch.mean(x, dim=(%s))\n", dims.s);
			free(dims.s);
			g->bytes += 4.0 * per_sample(s);
			s->rank = 2;
			adapter(g, index, "torch.mean", why);
			return 0;
		}
		add(&g->fwd, "        x = torch.flatten(x, %d)\n", want - 1);
		long n = 1;
		for (int i = want - 1; i < s->rank; i++)
			n *= s->d[i];
		s->d[want - 1] = n;
		s->rank = want;
		adapter(g, index, "torch.flatten", why);
		return 0;
	}
	if (s->rank == 2 && op->min_rank == 3) {
		add(&g->fwd, "        x = torch.unsqueeze(x, 1)\n");
		s->d[2] = s->d[1];
		s->d[1] = 1;
		s->rank = 3;
		adapter(g, index, "torch.unsqueeze", why);
		return 0;
	}
	return -1;
}

static void initial_shape(int rank, struct shape *s, struct ca_synth_rng *r)
{
	s->rank = rank;
	s->d[0] = 1;
	switch (rank) {
	case 2:
		s->d[1] = PICK(r, 512, 1024, 2048, 4096, 8192);
		break;
	case 3:
		s->d[1] = PICK(r, 16, 32, 64, 128);
		s->d[2] = PICK(r, 256, 512, 1024, 2048, 4096);
		break;
	case 4:
		s->d[1] = PICK(r, 3, 8, 16, 32, 64);
		s->d[2] = PICK(r, 32, 64, 128, 256);
		s->d[3] = ca_synth_rng_below(r, 4) ? s->d[2] : PICK(r, 32, 64, 128, 256);
		break;
	default:
		s->d[1] = PICK(r, 3, 8, 16);
		s->d[2] = PICK(r, 8, 16, 32);
		s->d[3] = PICK(r, 32, 64);
		s->d[4] = s->d[3];
		break;
	}
	for (int i = 1; i < rank; i++)
		if (s->d[i] > 8)
			s->d[i] = shrink(s->d[i]);
}

static size_t sample_op(const struct ca_synth_config *cfg, struct ca_synth_rng *r)
{
	size_t n = 0;
	for (size_t i = 0; i < NOPS; i++)
		n += !cfg->enabled || cfg->enabled[i];
	if (n == 0)
		return NOPS;
	size_t k = ca_synth_rng_below(r, n);
	for (size_t i = 0; i < NOPS; i++)
		if (!cfg->enabled || cfg->enabled[i]) {
			if (k == 0)
				return i;
			k--;
		}
	return NOPS;
}

static jv shape_json(const struct shape *s, long batch)
{
	jv a = jv_array();
	for (int i = 0; i < s->rank; i++)
		a = jv_array_append(a, jv_number(i == 0 ? (double)batch : (double)s->d[i]));
	return a;
}

static void gen_free(struct gen *g)
{
	free(g->init.s);
	free(g->fwd.s);
	jv_free(g->adapters);
}

jv ca_synth_compose(const struct ca_synth_config *cfg, int nops, struct ca_synth_rng *r)
{
	tiny = cfg->target_ms < 0.1;
	for (int attempt = 0; attempt < 200; attempt++) {
		struct gen g = {0};
		g.adapters = jv_array();
		jv ops = jv_array();
		size_t first = sample_op(cfg, r);
		if (first == NOPS) {
			jv_free(ops);
			gen_free(&g);
			return jv_invalid_with_msg(jv_string("no operator is enabled"));
		}
		struct shape in, s;
		int rank = table[first].min_rank + (int)ca_synth_rng_below(r, (uint64_t)(table[first].max_rank - table[first].min_rank + 1));
		initial_shape(rank, &in, r);
		s = in;
		track(&g, &s);
		int ok = 1;
		for (int i = 0; i < nops && ok; i++) {
			int placed = 0;
			for (int tries = 0; tries < 30 && !placed; tries++) {
				size_t k = i == 0 ? first : sample_op(cfg, r);
				struct gen saved = g;
				struct shape ss = s;
				size_t init_n = g.init.n, fwd_n = g.fwd.n;
				int nadapt = jv_array_length(jv_copy(g.adapters));
				if (adapt(&table[k], &s, r, &g, i) == 0 && apply(&table[k], &s, r, &g, i == nops - 1) == 0) {
					ops = jv_array_append(ops, jv_string(table[k].name));
					track(&g, &s);
					placed = 1;
				} else {
					/* roll back text and cost of a failed placement */
					g.flops = saved.flops;
					g.bytes = saved.bytes;
					g.init.n = init_n;
					g.fwd.n = fwd_n;
					if (g.init.s)
						g.init.s[init_n] = '\0';
					if (g.fwd.s)
						g.fwd.s[fwd_n] = '\0';
					while (jv_array_length(jv_copy(g.adapters)) > nadapt)
						g.adapters = jv_array_slice(g.adapters, 0, nadapt);
					s = ss;
					if (i == 0)
						break;
				}
			}
			ok = placed;
		}
		/* Per-sample work must stay sane; 2^27 floats is 512 MB a sample. */
		if (!ok || g.max_elems > 134217728.0 || g.max_elems < 1) {
			jv_free(ops);
			gen_free(&g);
			continue;
		}
		/* Size the batch for the target eager time: a roofline guess for an
		 * H100/H200-class GPU, fp32, plus launch overhead per op. */
		double per_sample_ms = (g.flops / 25e12 + g.bytes / 2.5e12) * 1e3;
		double overhead_ms = 0.01 * nops;
		double want = (cfg->target_ms - overhead_ms) / (per_sample_ms > 0 ? per_sample_ms : 1e-9);
		/* At least 2: batch norm in training mode needs two values a channel. */
		long batch = 2;
		while (batch * 2 <= want)
			batch *= 2;
		double max_elems = cfg->max_tensor_mb * 1048576.0 / 4.0;
		while (batch > 2 && (double)batch * g.max_elems > max_elems)
			batch /= 2;
		if ((double)batch * g.max_elems > max_elems) {
			jv_free(ops);
			gen_free(&g);
			continue;
		}
		double est = (double)batch * per_sample_ms + overhead_ms;
		struct text code = {0};
		char dims[96];
		shape_text(&in, 1, dims, sizeof dims);
		add(&code, "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n");
		add(&code, "class Model(nn.Module):\n    \"\"\"");
		for (int i = 0; i < jv_array_length(jv_copy(ops)); i++) {
			jv name = jv_array_get(jv_copy(ops), i);
			add(&code, "%s%s", i ? " -> " : "", jv_string_value(name));
			jv_free(name);
		}
		add(&code, "\"\"\"\n\n    def __init__(self):\n        super().__init__()\n%s\n", g.init.s ? g.init.s : "");
		add(&code, "    def forward(self, x):\n%s        return x\n\n\n", g.fwd.s ? g.fwd.s : "");
		add(&code, "batch_size = %ld\n\n\ndef get_inputs():\n    return [torch.randn(batch_size, %s)]\n\n\n", batch, dims);
		add(&code, "def get_init_inputs():\n    return []\n");
		jv task = jv_object();
		task = jv_object_set(task, jv_string("ops"), ops);
		task = jv_object_set(task, jv_string("adapters"), jv_copy(g.adapters));
		task = jv_object_set(task, jv_string("input_shape"), shape_json(&in, batch));
		task = jv_object_set(task, jv_string("output_shape"), shape_json(&s, batch));
		task = jv_object_set(task, jv_string("est_ms"), jv_number(round(est * 1000) / 1000));
		task = jv_object_set(task, jv_string("code"), jv_string(code.s));
		free(code.s);
		gen_free(&g);
		return task;
	}
	return jv_invalid_with_msg(jv_string("could not build a chain whose shapes flow"));
}
