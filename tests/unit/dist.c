/*
 * Unit tests of lib/dist: ranks forked here meet in a temporary directory;
 * sums agree bit for bit on every rank, shares cover the items once, and a
 * rank that never arrives is reported instead of waited on for ever.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist.h"

static int failures;
#define CHECK(c) do { if (!(c)) { fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #c); failures++; } } while (0)

static void set_rank(int rank, int world, const char *dir)
{
	char r[16], w[16];
	snprintf(r, sizeof(r), "%d", rank);
	snprintf(w, sizeof(w), "%d", world);
	setenv("CA_RANK", r, 1);
	setenv("CA_WORLD_SIZE", w, 1);
	setenv("CA_LOCAL_RANK", r, 1);
	setenv("CA_DIST_DIR", dir, 1);
}

/* One rank: three sums of different sizes, a float sum, a barrier; exit 0 when all are right. */
static int rank_main(int rank, int world, const char *dir)
{
	set_rank(rank, world, dir);
	struct ca_dist d;
	ca_dist_init(&d);
	int bad = d.rank != rank || d.world != world;
	for (int round = 0; round < 3; round++) {
		size_t n = (size_t)(1 + round * 1000);
		double *x = malloc(n * sizeof(double));
		for (size_t i = 0; i < n; i++)
			x[i] = (rank + 1) * 0.1 + (double)i;  /* sum over ranks: 0.1 * w(w+1)/2 + w*i */
		ca_dist_sum(&d, x, n);
		for (size_t i = 0; i < n; i++) {
			double want = 0;
			for (int r = 0; r < world; r++)
				want += (r + 1) * 0.1 + (double)i;
			bad |= fabs(x[i] - want) > 1e-9;
		}
		free(x);
	}
	float f[3] = {1.5f, -2.0f, (float)rank};
	ca_dist_sum_float(&d, f, 3);
	bad |= f[0] != 1.5f * world || f[1] != -2.0f * world || f[2] != (float)(world * (world - 1) / 2);
	ca_dist_barrier(&d);
	ca_dist_close(&d);
	return bad;
}

static int run_world(int world, const char *dir)
{
	pid_t pid[8];
	for (int r = 0; r < world; r++) {
		pid[r] = fork();
		if (pid[r] == 0)
			_exit(rank_main(r, world, dir));
	}
	int ok = 1;
	for (int r = 0; r < world; r++) {
		int st;
		waitpid(pid[r], &st, 0);
		ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	return ok;
}

int main(void)
{
	char dir[] = "/tmp/ca-dist-XXXXXX";
	if (!mkdtemp(dir))
		return perror("mkdtemp"), 1;

	/* One rank without any environment: no-ops. */
	unsetenv("CA_RANK");
	unsetenv("CA_WORLD_SIZE");
	unsetenv("SLURM_PROCID");
	unsetenv("SLURM_NTASKS");
	struct ca_dist d;
	ca_dist_init(&d);
	CHECK(d.world == 1 && d.rank == 0);
	double x = 3;
	ca_dist_sum(&d, &x, 1);
	CHECK(x == 3);
	ca_dist_close(&d);

	/* A fresh directory for each launch, as scripts/ca-launch makes. */
	char sub[64];
	snprintf(sub, sizeof(sub), "%s/w2", dir);
	CHECK(mkdir(sub, 0700) == 0 && run_world(2, sub));
	snprintf(sub, sizeof(sub), "%s/w3", dir);
	CHECK(mkdir(sub, 0700) == 0 && run_world(3, sub));

	/* Shares: every item once, in order, sizes differ by at most one. */
	for (int world = 1; world <= 5; world++)
		for (int n = 0; n <= 11; n++) {
			int next = 0;
			for (int r = 0; r < world; r++) {
				struct ca_dist s = {.rank = r, .world = world};
				int first, count;
				ca_dist_share(&s, n, &first, &count);
				CHECK(first == next);
				CHECK(count == n / world || count == n / world + 1);
				next = first + count;
			}
			CHECK(next == n);
		}

	/* A rank alone in a world of two gives up after CA_DIST_TIMEOUT with a message. */
	pid_t p = fork();
	if (p == 0) {
		set_rank(0, 2, dir);
		setenv("CA_DIST_TIMEOUT", "0.2", 1);
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		struct ca_dist e;
		ca_dist_init(&e);
		double y = 1;
		ca_dist_sum(&e, &y, 1);
		_exit(0);  /* not reached */
	}
	int st;
	waitpid(p, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);

	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		failures++;
	if (failures)
		fprintf(stderr, "dist: %d failures\n", failures);
	return failures != 0;
}
