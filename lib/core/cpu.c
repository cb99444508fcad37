/* cpu: the CPUs ranked by their speed now (cpu.h). */
#include <math.h>
#include <sched.h>
#include <stdlib.h>

#include "cpu.h"
#include "proc.h"

#define ROUNDS 3

/* A chain of dependent multiplies: what one CPU core does alone, in seconds. */
static double work_once(void)
{
	unsigned h = 2166136261u;
	double t0 = ca_proc_now();
	for (unsigned i = 0; i < 200000; i++)
		h = (h ^ i) * 16777619u;
	__asm__ volatile("" : : "r"(h));  /* the chain is used: not optimised away */
	return ca_proc_now() - t0;
}

int ca_cpu_allowed(int *cpus, int max)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (sched_getaffinity(0, sizeof set, &set) != 0)
		return 0;
	int n = 0;
	for (int c = 0; c < CPU_SETSIZE && n < max; c++)
		if (CPU_ISSET(c, &set))
			cpus[n++] = c;
	return n;
}

void ca_cpu_rank(int *cpus, int n)
{
	cpu_set_t was;
	CPU_ZERO(&was);
	if (n < 2 || sched_getaffinity(0, sizeof was, &was) != 0)
		return;
	double *best = calloc((size_t)n, sizeof *best);
	if (!best)
		return;
	for (int i = 0; i < n; i++)
		best[i] = INFINITY;
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < n; i++) {
			cpu_set_t one;
			CPU_ZERO(&one);
			if (cpus[i] < 0 || cpus[i] >= CPU_SETSIZE)
				continue;
			CPU_SET(cpus[i], &one);
			if (sched_setaffinity(0, sizeof one, &one) == 0) {
				double t = work_once();
				best[i] = t < best[i] ? t : best[i];
			}
		}
	sched_setaffinity(0, sizeof was, &was);
	for (int i = 1; i < n; i++)  /* fastest first, ties as they came */
		for (int k = i; k > 0 && best[k] < best[k - 1]; k--) {
			double t = best[k];
			best[k] = best[k - 1];
			best[k - 1] = t;
			int c = cpus[k];
			cpus[k] = cpus[k - 1];
			cpus[k - 1] = c;
		}
	free(best);
}
