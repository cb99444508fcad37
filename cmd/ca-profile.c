/*
 * ca-profile: time a candidate against its task's reference in eager mode
 * and under torch.compile, by one method, adding "profile" to each record.
 *
 * Baselines are cached per (task, GPU, torch version, method); the
 * candidate runs in a fresh sandboxed process; outputs of timed calls are
 * spot-checked and the candidate's own clock is checked against ours.
 * The command line and the engine are lib/evaluate; see ca-profile(1).
 */
#include "evaluate.h"

int main(int argc, char **argv)
{
	return ca_eval_main(CA_EVAL_PROFILE, argc, argv);
}
