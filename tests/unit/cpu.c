/* Unit tests for lib/core/cpu: the CPUs ranked are the CPUs allowed, and the thread's own are given back. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "test-cpu: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

static int has(const int *v, int n, int x)
{
	for (int i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

int main(void)
{
	int allowed[CPU_SETSIZE], ranked[CPU_SETSIZE];
	int n = ca_cpu_allowed(allowed, CPU_SETSIZE);
	CHECK(n >= 1);
	memcpy(ranked, allowed, (size_t)n * sizeof *ranked);
	cpu_set_t before, after;
	CPU_ZERO(&before);
	CPU_ZERO(&after);
	sched_getaffinity(0, sizeof before, &before);
	ca_cpu_rank(ranked, n);
	sched_getaffinity(0, sizeof after, &after);
	CHECK(CPU_EQUAL(&before, &after));
	for (int i = 0; i < n; i++) {
		CHECK(has(allowed, n, ranked[i]));
		CHECK(has(ranked, n, allowed[i]));
	}
	/* A CPU the thread cannot be moved to goes last. */
	if (n < CPU_SETSIZE - 1) {
		int with_bad[CPU_SETSIZE];
		with_bad[0] = CPU_SETSIZE - 1;
		memcpy(with_bad + 1, allowed, (size_t)n * sizeof *with_bad);
		if (!CPU_ISSET(CPU_SETSIZE - 1, &before)) {
			ca_cpu_rank(with_bad, n + 1);
			CHECK(with_bad[n] == CPU_SETSIZE - 1);
		}
	}
	/* At most max. */
	CHECK(ca_cpu_allowed(allowed, 1) == 1);
	if (failures)
		return 1;
	printf("test-cpu: ok (%d CPUs, fastest %d)\n", n, ranked[0]);
	return 0;
}
