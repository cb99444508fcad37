/*
 * lib/synth, task synthesis; this header is the folder's face (see
 * core/core.h for the folders). Beside the composer here: pylex.h, the
 * Python tokenizer and the similarity measure ca-filter uses. synth knows
 * lib/core and nothing else.
 */
/*
 * synth: the built-in task composer behind ca-compose (owner: synthesis,
 * engineer C).
 *
 * A table of torch operators, each with the input ranks it accepts, how it
 * changes the shape, what it costs and the code it needs. ca_synth_compose
 * stacks K of them so that shapes flow (inserting the flatten, pooling or
 * unsqueeze an author would, and recording it), sizes the batch so the
 * estimated eager time on a GPU lands near a target, and writes the task in
 * KernelBench form. Everything is driven by a caller-owned random stream,
 * so a seed gives the same tasks on every machine.
 */
#ifndef CA_SYNTH_H
#define CA_SYNTH_H

#include <stdint.h>
#include <jv.h>

/* xoshiro256** seeded through splitmix64. */
struct ca_synth_rng {
	uint64_t s[4];
};
void ca_synth_rng_seed(struct ca_synth_rng *r, uint64_t seed);
uint64_t ca_synth_rng_next(struct ca_synth_rng *r);
/* Uniform in [0, n). */
uint64_t ca_synth_rng_below(struct ca_synth_rng *r, uint64_t n);
/* Uniform in [0, 1). */
double ca_synth_rng_unit(struct ca_synth_rng *r);

/* The operator table. */
size_t ca_synth_op_count(void);
/* Name as written in task code and in a task's "ops" ("nn.Conv2d", "torch.relu", "F.gelu"). */
const char *ca_synth_op_name(size_t i);
/* Fully qualified name, as ca-crawl's seed.name ("torch.nn.Conv2d", "torch.nn.functional.gelu"). */
const char *ca_synth_op_qualified(size_t i);

struct ca_synth_config {
	const unsigned char *enabled;  /* per op, 1 = may be sampled; NULL: all */
	double target_ms;              /* estimated eager time on the GPU to size the batch for;
	                                  under 0.1 ms every size shrinks too (quick CPU runs) */
	double max_tensor_mb;          /* no tensor larger than this */
};

/*
 * Compose one task of nops operators. Returns an object
 *   {"ops": [...], "adapters": [{"after": op index, "op": name, "why": text}],
 *    "input_shape": [...], "output_shape": [...], "est_ms": x, "code": text}
 * or jv_invalid_with_msg when no chain could be built (rare; try again).
 */
jv ca_synth_compose(const struct ca_synth_config *cfg, int nops, struct ca_synth_rng *rng);

#endif
