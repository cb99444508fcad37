/*
 * evaluate_clock: our own clock around a worker's timed loop (struct
 * loop_clock in evaluate_impl.h): the lines it notes, the spot checks it
 * chooses after the loop, the digests of outputs, and its verdict on the
 * time the worker reports (clock_verdict).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "err.h"
#include "evaluate_impl.h"
#include "json.h"
#include "proc.h"
#include "tensor.h"

/*
 * 64 bits from the kernel's random source (the clock and pid mixed when
 * getrandom fails): what nothing in a worker's process can predict.
 */
unsigned long long random_u64(void)
{
	unsigned long long v = 0;
	if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
		v = (unsigned long long)(ca_proc_now() * 1e9) * 1000003ULL ^ (unsigned long long)getpid();
	return v;
}

/* What a loop clock holds (its ticks, ready lines and digests). */
void loop_clock_free(struct loop_clock *c)
{
	free(c->ticks);
	free(c->readies);
	free(c->digests);
	c->ticks = c->readies = NULL;
	c->digests = NULL;
}

void loop_clock_reset(struct loop_clock *c)
{
	c->start = c->end = 0;
	c->nticks = 0;
	c->nreadies = 0;
	c->nasked = 0;
}

/*
 * Choose the calls to check after a timed loop: the last (work left
 * running shows there) and want - 1 others, drawn from the kernel's
 * random source, so that nothing in the worker's process could have
 * predicted them; into c->asked, as the JSON answer.
 */
jv loop_clock_choose(struct loop_clock *c)
{
	jv keep = jv_array();
	int iters = c->iters, want = c->want < iters ? c->want : iters;
	if (want > (int)(sizeof c->asked / sizeof c->asked[0]))
		want = (int)(sizeof c->asked / sizeof c->asked[0]);
	c->nasked = 0;
	if (want <= 0)
		return jv_object_set(jv_object(), jv_string("keep"), keep);
	c->asked[c->nasked++] = iters - 1;
	keep = jv_array_append(keep, jv_number(iters - 1));
	while (c->nasked < want) {
		int i = (int)(random_u64() % (unsigned long long)iters), seen = 0;
		for (int k = 0; k < c->nasked; k++)
			seen |= c->asked[k] == i;
		if (seen)
			continue;
		c->asked[c->nasked++] = i;
		keep = jv_array_append(keep, jv_number(i));
	}
	return jv_object_set(jv_object(), jv_string("keep"), keep);
}

/* A digest as the worker sends one (d borrowed), NAN where missing: see DIGEST_LEN. */
void digest_from(jv d, double out[DIGEST_LEN])
{
	int n = jv_get_kind(d) == JV_KIND_ARRAY ? jv_array_length(jv_copy(d)) : 0;
	for (int k = 0; k < DIGEST_LEN; k++) {
		jv x = k < n && n <= DIGEST_LEN ? jv_array_get(jv_copy(d), k) : jv_invalid();
		out[k] = jv_get_kind(x) == JV_KIND_NUMBER ? jv_number_value(x) : NAN;
		jv_free(x);
	}
}

void loop_clock_note(struct loop_clock *c, const char *what, jv line)
{
	double now = ca_proc_now();
	if (!strcmp(what, "start")) {
		loop_clock_reset(c);
		c->start = now;
	} else if (!strcmp(what, "end")) {
		c->end = now;
	} else if ((!strcmp(what, "tick") || !strcmp(what, "ready")) && c->nticks < 1000000) {
		if (c->nticks == c->cap) {
			c->cap = c->cap ? 2 * c->cap : 64;
			c->ticks = ca_xrealloc(c->ticks, (size_t)c->cap * sizeof *c->ticks);
			c->readies = ca_xrealloc(c->readies, (size_t)c->cap * sizeof *c->readies);
			c->digests = ca_xrealloc(c->digests, (size_t)c->cap * sizeof *c->digests);
		}
		if (!strcmp(what, "ready")) {
			if (c->nreadies == c->nticks)
				c->readies[c->nreadies++] = now;
			return;
		}
		c->ticks[c->nticks] = now;
		jv d = ca_json_get(line, "d");
		digest_from(d, c->digests[c->nticks]);
		jv_free(d);
		c->nticks++;
	}
}

/*
 * The digest of a tensor file as the worker computes one (sums over every
 * element of every entry, widened to double); 0, or -1 when it cannot be
 * read.
 */
int file_digest(const char *path, double out[3])
{
	struct ca_tensor_file f;
	char why[256];
	if (ca_tensor_read(path, 0, &f, why, sizeof why) != 0)
		return -1;
	out[0] = out[1] = out[2] = 0;
	for (int e = 0; e < f.count; e++)
		for (uint64_t i = 0; i < f.entries[e].numel; i++) {
			double v = ca_tensor_value(&f.entries[e], i);
			out[0] += v;
			out[1] += fabs(v);
			out[2] += v * v;
		}
	ca_tensor_free(&f);
	return 0;
}

/*
 * Whether a digest computed here matches the worker's: float64 sums taken
 * in another order (torch reduces pairwise, we add in sequence) differ by
 * at most the count times the double epsilon of the sum of magnitudes,
 * under 1e-8 of it for the 36M elements a kept output holds at most
 * (4 GiB over 30 calls), typically 1e-12; the tolerance is 1e-7 of it.
 * A missing (NaN) digest never matches.
 */
int digest_agrees(const double mine[3], const double theirs[3])
{
	double tol = 1e-7 * mine[1] + 1e-300, tol2 = 1e-7 * mine[2] + 1e-300;
	return fabs(mine[0] - theirs[0]) <= tol && fabs(mine[1] - theirs[1]) <= tol &&
		fabs(mine[2] - theirs[2]) <= tol2;
}

/*
 * How many times the root of the sum of the squared per-element
 * tolerances a signed sum may be off. For an honest output, whose errors
 * e are within tolerance and owe nothing to the signs, the signed sum is
 * off by sum(s e) with s random signs: more than SIGNED_K times
 * sqrt(sum e^2) with odds under 2 exp(-SIGNED_K^2 / 2), 1e-14.
 */
#define SIGNED_K 8.0

/*
 * Whether a candidate's output digest c is within tolerance of the
 * reference's (ref, over numel elements; see DIGEST_LEN), by the rule
 * of ca_compare: atol scaled to the reference's largest magnitude where
 * that is below atol.
 * - Sums: every element within atol + rtol * |ref| moves the sum and the
 *   sum of magnitudes by at most numel * atol + rtol * (ref's sum of
 *   magnitudes), and the sum of squares by the square of it expanded;
 *   plus rounding in float64. Sums alone do not tell one input's output
 *   from another's: two draws of a distribution give outputs whose sums
 *   differ by the root of their size, the bound by the size itself.
 * - Signed sums: within SIGNED_K times the root of the sum of the squared
 *   per-element tolerances, sqrt(numel atol^2 + 2 atol rtol sum|r| +
 *   rtol^2 sum r^2); another input's output is off by about its spread
 *   times the root of its size (relu of a normal draw with atol = rtol =
 *   1e-2: 5x the bound, each signed sum passing with odds about 1 in 8,
 *   all four 1 in 4000). Plus the rounding of the worker's float32
 *   products, about the float epsilon times the root of the rows summed
 *   (a row per 4096 elements) times the root of the sum of squares.
 *   A reference's signed sum that is not finite is not judged; a
 *   candidate's that is missing fails.
 */
int digest_within(const struct ca_compare_options *tol, const double ref[DIGEST_LEN], double numel,
	const double c[DIGEST_LEN])
{
	double a = isfinite(ref[3]) && ref[3] < tol->atol ? tol->atol * ref[3] : tol->atol;
	double t = tol->rtol, round = 1e-9 * (ref[1] + fabs(c[1]) + ref[2] + fabs(c[2])) + 1e-300;
	double b01 = numel * a + t * ref[1] + round;
	double b2 = (2 * a + 2 * a * t) * ref[1] + numel * a * a + (2 * t + t * t) * ref[2] + round;
	if (!(fabs(c[0] - ref[0]) <= b01 && fabs(c[1] - ref[1]) <= b01 && fabs(c[2] - ref[2]) <= b2))
		return 0;
	double spread = sqrt(numel * a * a + 2 * a * t * ref[1] + t * t * ref[2]);
	double rows = ceil(numel / 4096.0) + 1;
	double bs = SIGNED_K * spread + 1e-6 * sqrt(rows) * (sqrt(ref[2]) + sqrt(fabs(c[2]))) + round;
	for (int k = DIGEST_LEN - DIGEST_SIGNED; k < DIGEST_LEN; k++)
		if (isfinite(ref[k]) && !(fabs(c[k] - ref[k]) <= bs))
			return 0;
	return 1;
}

/* A digest for a message: "sum S, sum of magnitudes M, sum of squares Q, largest magnitude X, signed sums A B C D". */
void digest_text(const double d[DIGEST_LEN], char *buf, size_t size)
{
	int n = snprintf(buf, size, "sum %.9g, sum of magnitudes %.9g, sum of squares %.9g, largest magnitude %.9g, "
		"signed sums", d[0], d[1], d[2], d[3]);
	for (int k = DIGEST_LEN - DIGEST_SIGNED; k < DIGEST_LEN && n > 0 && (size_t)n < size; k++)
		n += snprintf(buf + n, size - (size_t)n, " %.9g", d[k]);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median_of(double *v, int n)
{
	if (n <= 0)
		return NAN;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The q-quantile (0..1) of v[0..n), sorting v; NAN when n is 0. */
double quantile_of(double *v, int n, double q)
{
	if (n <= 0)
		return NAN;
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return v[(int)(q * (n - 1))];
}

/*
 * The seconds each of the first n timed calls took on our clock (from the
 * previous tick, the first from the start) into out; how many there were.
 */
int loop_clock_calls(const struct loop_clock *c, double *out, int n)
{
	if (!(c->start > 0))
		return 0;
	int m = c->nticks < n ? c->nticks : n;
	for (int i = 0; i < m; i++)
		out[i] = c->ticks[i] - (i ? c->ticks[i - 1] : c->start);
	return m;
}

/*
 * The two phases of each of the first n timed calls on our clock, in
 * seconds: from the previous tick (the first from the start) to its ready
 * line into inputs[], from there to its tick into call[]. n when every
 * call had both lines, else 0.
 */
int loop_clock_phases(const struct loop_clock *c, double *inputs, double *call, int n)
{
	if (!(c->start > 0) || c->nticks < n || c->nreadies < n)
		return 0;
	for (int i = 0; i < n; i++) {
		inputs[i] = c->readies[i] - (i ? c->ticks[i - 1] : c->start);
		call[i] = c->ticks[i] - c->readies[i];
	}
	return n;
}

/*
 * How much quieter the machine is now than when the reference's overhead
 * was measured, judged by the one piece of work both loops do alike: the
 * draws of the inputs (the candidate's fastest tenth against the
 * reference's, inputs[0..n) borrowed). At most 1: the reference's
 * overhead is only ever scaled down, so a candidate that slows its own
 * draws gains nothing, and one that speeds them up holds itself to less
 * overhead. On a loaded 2-core machine the reference's call-phase
 * overhead came out at 34-42 ms against calls of 22-30 ms, and
 * cheat/timer_patch (10x) passed three runs of three against it.
 */
static double quieter_by(const double *inputs, int n, double ref_inputs)
{
	double *v = ca_xcalloc((size_t)n + 1, sizeof *v);
	memcpy(v, inputs, (size_t)n * sizeof *v);
	double fast = quantile_of(v, n, 0.1);
	free(v);
	return fast > 0 && ref_inputs > 0 && fast < ref_inputs ? fast / ref_inputs : 1;
}

/*
 * Our own clock's verdict on a candidate's timed loop (reply borrowed):
 * the per-call time the whole batch implies, less the reference's
 * overhead per batch, into *wall_per_call; the median call between the
 * worker's ticks, less the reference's overhead per call (its fastest
 * tenth), into *call_us; the least self-reported median that passes
 * the call-by-call bound into *bound_us (NAN without it). Returns 0 when
 * the self-reported median is plausible, else -1 with the reason in msg.
 *
 * The bound is taken from the fastest tenth of the calls between ticks,
 * not their median: the loop's own work around a call (input draw, L2
 * flush, digests, the ticks) runs on a CPU that a busy evaluation pool
 * shares with a dozen starting workers, and the reference's overhead per
 * call comes from a baseline that may have been timed at a quiet moment.
 * Slow moments only lengthen calls; a patched clock cannot make our clock
 * faster. On two H200s under a 200-record pool the median and the batch
 * bound failed 10 of 160 honest candidates (a 649 us call "implied"
 * 1339 us). The whole-batch bound is used only when the worker sent no
 * ticks to time calls by.
 *
 * When every call had its ready line, the bound is, call by call, the
 * call phase less the reference's, plus whatever that call's inputs'
 * phase took beyond the reference's (one and a half times it on the CPU;
 * never less than nothing), and then the fastest tenth: a draw of the inputs can cost more than the call (on the
 * CPU, 30 ms against 5), and a reference whose draws were slowed by a
 * busy moment would otherwise hide a patched clock; work moved before
 * the ready line still counts (on the CPU beyond half a draw).
 *
 * The slack is 5 us, and on the CPU (on_cpu: the device we were told,
 * not what the worker says) also a quarter of the reference's call-phase
 * overhead (a tenth of its whole overhead per call without ready lines):
 * there the loop's own work is milliseconds of Python and torch on a
 * shared CPU, whose noise grows with it (a busy moment doubles it); on
 * the CPU the reference's overheads are first scaled down when the
 * candidate's draws show a quieter machine than the reference's did
 * (quieter_by). On a
 * GPU the 5 us stay, as measured on the H200 before the draws came into
 * the loop: a wider slack there would let a patched clock on a 20 us
 * call pass.
 */
int clock_verdict(const struct loop_clock *ours, jv reply, int iters, const struct loop_overhead *ref,
		int on_cpu, double *wall_per_call, double *call_us, double *bound_us, char *msg, size_t size)
{
	double median = 0;
	ca_json_number(reply, "median_us", &median);
	*wall_per_call = *call_us = NAN;
	if (ours->start > 0 && ours->end > ours->start && iters > 0)
		*wall_per_call = ((ours->end - ours->start) - ref->batch) / iters * 1e6;
	double *calls = ca_xcalloc((size_t)iters + 1, sizeof *calls);
	double *inputs = ca_xcalloc((size_t)iters + 1, sizeof *inputs);
	double *call_phase = ca_xcalloc((size_t)iters + 1, sizeof *call_phase);
	int ncalls = loop_clock_calls(ours, calls, iters);
	double fast_us = NAN, slack_us = 5;
	if (ncalls == iters && ours->nticks == iters && isfinite(ref->call)) {
		*call_us = (median_of(calls, ncalls) - ref->call) * 1e6;
		fast_us = (quantile_of(calls, ncalls, 0.1) - ref->call) * 1e6;
		if (on_cpu)
			slack_us += 0.1 * ref->call * 1e6;
		if (isfinite(ref->ready) && isfinite(ref->inputs) && loop_clock_phases(ours, inputs, call_phase, iters) == iters) {
			/*
			 * Call by call: its call phase less the reference's, plus
			 * what its own inputs' phase took beyond the reference's;
			 * then the fastest tenth. Taken phase by phase (the fastest
			 * tenth of each, then added) a ready line we read late moves
			 * time from one call's call phase to its inputs' phase, and
			 * the two tenths pick different calls, so the time vanished:
			 * on the H200, with three slots on the GPU,
			 * cheat/timer_patch (40 us reported for 268 us of kernels,
			 * our whole-call median 606 us) passed the first loop.
			 */
			double quiet = on_cpu ? quieter_by(inputs, iters, ref->inputs) : 1;
			for (int i = 0; i < iters; i++) {
				double extra = inputs[i] - (on_cpu ? 1.5 : 1.0) * quiet * ref->inputs;
				call_phase[i] = call_phase[i] - quiet * ref->ready + (extra > 0 ? extra : 0);
			}
			fast_us = quantile_of(call_phase, iters, 0.1) * 1e6;
			slack_us = 5 + (on_cpu ? 0.25 * quiet * ref->ready * 1e6 : 0);
		}
	}
	*bound_us = isfinite(fast_us) ? 0.5 * fast_us - slack_us : NAN;
	free(calls);
	free(inputs);
	free(call_phase);
	if (!isfinite(*wall_per_call)) {
		snprintf(msg, size, "the candidate worker did not mark the end of its timed calls");
		return -1;
	}
	if (!isfinite(ref->call) && median < 0.5 * *wall_per_call - 20) {
		snprintf(msg, size, "self-reported %.1f us per call, but our clock around the timed calls "
			"implies at least %.1f us: the timer was tampered with", median, *wall_per_call);
		return -1;
	}
	if (isfinite(ref->call) && !isfinite(*call_us)) {
		snprintf(msg, size, "the candidate worker marked %d of its %d timed calls", ours->nticks, iters);
		return -1;
	}
	if (isfinite(fast_us) && median < 0.5 * fast_us - slack_us) {
		snprintf(msg, size, "self-reported %.1f us per call, but our clock, call by call, "
			"implies at least %.1f us (its fastest tenth): the timer was tampered with", median, fast_us);
		return -1;
	}
	return 0;
}
