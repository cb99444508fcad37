/*
 * splitmix: splitmix64, the small seedable generator ca draws from where
 * the same seed must give the same numbers everywhere: sampling on the CPU
 * and on the GPU (lib/model/model_sample.c and lib/model/cuda/model_cuda_sample.cu
 * must draw alike), the critic head's initialisation, ca-toy, and the
 * seeding of the synthesis generator. Header-only, so that CUDA host code
 * includes it too.
 */
#ifndef CA_SPLITMIX_H
#define CA_SPLITMIX_H

#include <stdint.h>

static inline uint64_t ca_splitmix_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1): the top 53 bits. */
static inline double ca_splitmix_unit(uint64_t *state)
{
	return (double)(ca_splitmix_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
