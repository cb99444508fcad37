/*
 * compare: the trusted comparison of a candidate's outputs with the
 * reference's (owner: B2). Both come as tensor files (lib/tensor); the
 * candidate's is hostile and read with a size cap.
 *
 * The rules, documented in ca-verify(1):
 *   - the same entries (nesting of tuples, lists and dicts) in the same
 *     order; a tuple and a list of the same length count as the same;
 *   - per tensor the same dtype and the same shape;
 *   - no NaN or Inf anywhere in the candidate's output (or the reference's:
 *     such a task cannot be checked, which is reported as its own failure);
 *   - every element |c - r| <= atol + rtol * |r| (torch.allclose's rule);
 *     where the whole reference tensor is smaller than atol in magnitude,
 *     atol is scaled down by its largest magnitude so tiny outputs are
 *     still compared meaningfully;
 *   - an output that is all zeros where the reference's is not, or constant
 *     where the reference's is not, fails whatever the tolerance says.
 */
#ifndef CA_COMPARE_H
#define CA_COMPARE_H

#include <stdint.h>

#include "tensor.h"

struct ca_compare_options {
	double atol;  /* default 1e-2 */
	double rtol;  /* default 1e-2 */
};

struct ca_compare_result {
	int ok;
	char message[512];      /* why it failed, "" when ok */
	double max_abs_err;     /* over all compared elements */
	double max_rel_err;     /* |c - r| / |r| over elements with r != 0 */
	uint64_t elements;      /* elements compared */
	int mismatches_shown;   /* private */
};

void ca_compare_defaults(struct ca_compare_options *o);

/* Compare two loaded files; fills r. Returns r->ok. */
int ca_compare_tensors(const struct ca_tensor_file *ref, const struct ca_tensor_file *cand,
		const struct ca_compare_options *o, struct ca_compare_result *r);

/*
 * Compare files. Returns 1 equal, 0 different or the candidate's file
 * unreadable or malformed (r->message says why), -1 when the reference's
 * file cannot be read (a failure of ours, r->message says why).
 */
int ca_compare_files(const char *ref_path, const char *cand_path,
		const struct ca_compare_options *o, struct ca_compare_result *r);

#endif
