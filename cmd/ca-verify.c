/*
 * ca-verify: decide whether candidate kernels compute what their task's
 * reference computes, adding "verify" to each record.
 *
 * The reference and the candidate run in separate processes (the candidate
 * inside ca-sandbox); each draws the inputs under a recorded seed, outputs
 * come back as tensor files and are compared here, in C. The command line
 * and the engine are lib/evaluate; see ca-verify(1).
 */
#include "evaluate.h"

int main(int argc, char **argv)
{
	return ca_eval_main(CA_EVAL_VERIFY, argc, argv);
}
