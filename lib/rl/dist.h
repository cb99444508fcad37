/*
 * dist: data-parallel ranks of one training step (issue 8).
 *
 * A step launched N times (by scripts/ca-launch on one host, or by srun)
 * learns its place from the environment: CA_RANK / CA_WORLD_SIZE /
 * CA_LOCAL_RANK, else SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; with
 * none of them set it is rank 0 of 1 and every call here is a no-op.
 * The ranks meet in the directory CA_DIST_DIR (shared by all of them: a
 * temporary directory on one host, a job directory on a shared file
 * system under Slurm).
 *
 * Host sums go through that directory: each rank writes its buffer to a
 * file and reads everyone's, and every rank adds them in rank order in
 * double precision, so all ranks get bit-identical sums. Device sums
 * (the CUDA engine's gradients) go through NCCL, opened at run time so
 * nothing here links against it; its unique id travels through the same
 * directory.
 */
#ifndef CA_DIST_H
#define CA_DIST_H

#include <stddef.h>

struct ca_dist {
	int rank, world, local_rank;
	char *dir;        /* CA_DIST_DIR; NULL when world == 1 */
	long seq;         /* collective operations so far */
	double timeout;   /* seconds to wait for the other ranks (CA_DIST_TIMEOUT, default 600) */
	void *nccl;       /* opened on the first device sum */
};

/* Read the environment; exits with a usage error when it is inconsistent. */
void ca_dist_init(struct ca_dist *d);

/* Sum buf[0..n) over all ranks, in place (identical result on every rank). */
void ca_dist_sum(struct ca_dist *d, double *buf, size_t n);

/* The same for floats (summed in double, rounded once). */
void ca_dist_sum_float(struct ca_dist *d, float *buf, size_t n);

/* Wait until every rank has arrived. */
void ca_dist_barrier(struct ca_dist *d);

/*
 * Sum n floats of device memory over all ranks through NCCL on the given
 * CUDA stream (NULL: the default stream). Returns 0, or -1 with why set.
 */
int ca_dist_sum_device(struct ca_dist *d, float *dev, size_t n, void *stream, char why[256]);

/*
 * Whether device sums go through NCCL: with several ranks, and also for a
 * lone rank given CA_DIST_DIR (ca-launch -n 1), which checks the NCCL
 * set-up on one GPU.
 */
int ca_dist_device_sums(const struct ca_dist *d);

/* The contiguous share of n items that this rank takes: [*first, *first + *count). */
void ca_dist_share(const struct ca_dist *d, int n, int *first, int *count);

void ca_dist_close(struct ca_dist *d);

#endif
