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
	/* The options both evaluators take (evaluate.h), then this one's own. */
	static const struct option longopts[] = {
		CA_EVAL_LONGOPTS,
		{"checks", required_argument, NULL, 'c'},
		{NULL, 0, NULL, 0},
	};
	struct ca_eval_config cfg;
	ca_err_init(argv[0]);
	ca_eval_defaults(&cfg, CA_EVAL_VERIFY);
	ca_eval_options(&cfg, argc, argv, longopts, usage_text);
	return ca_eval_run(&cfg, argc - optind, argv + optind, usage_text);
}
