/*
 * ca-verify: decide whether candidate kernels compute what their task's
 * reference computes, adding "verify" to each record.
 *
 * The reference and the candidate run in separate processes (the candidate
 * inside ca-sandbox); each draws the inputs under a recorded seed, outputs
 * come back as tensor files and are compared here, in C. The options are
 * this command's; what they mean, and the engine, are lib/evaluate (shared
 * with ca-profile); see ca-verify(1).
 */
#include <getopt.h>
#include <stdio.h>

#include "err.h"
#include "evaluate.h"
#include "opt.h"

static const char usage_text[] =
	"usage: ca-verify [-Hhuv] [--allow-torch] [--arch sm_NN] [--atol X] [--build-cache DIR]\n"
	"                 [--checks N] [--device cuda|cpu] [--gpus LIST] [--no-sandbox] [--robust N] [--rtol X]\n"
	"                 [--sandbox-user UID] [--seed N] [--serve SOCKET] [--shapes N] [--timeout S]\n"
	"                 [--unordered] [file ... | DIR]\n";

int main(int argc, char **argv)
{
	/* The long options without a short one go to ca_eval_option by name; their vals only tell them apart. */
	static const struct option longopts[] = {
		{"allow-torch", no_argument, NULL, 'A'},
		{"arch", required_argument, NULL, 'a'},
		{"atol", required_argument, NULL, 't'},
		{"build-cache", required_argument, NULL, 'B'},
		{"checks", required_argument, NULL, 'c'},
		{"device", required_argument, NULL, 'd'},
		{"gpus", required_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'},
		{"no-sandbox", no_argument, NULL, 'S'},
		{"robust", required_argument, NULL, 'R'},
		{"rtol", required_argument, NULL, 'r'},
		{"sandbox-user", required_argument, NULL, 'Y'},
		{"seed", required_argument, NULL, 's'},
		{"serve", required_argument, NULL, 'E'},
		{"shapes", required_argument, NULL, 'z'},
		{"timeout", required_argument, NULL, 'T'},
		{"unbuffered", no_argument, NULL, 'u'},
		{"unordered", no_argument, NULL, 'U'},
		{"verbose", no_argument, NULL, 'v'},
		{NULL, 0, NULL, 0},
	};
	struct ca_eval_config cfg;
	ca_err_init(argv[0]);
	ca_eval_defaults(&cfg, CA_EVAL_VERIFY);
	ca_eval_options(&cfg, argc, argv, longopts, usage_text);
	return ca_eval_run(&cfg, argc - optind, argv + optind, usage_text);
}
