/*
 * ca-profile: time a candidate against its task's reference in eager mode
 * and under torch.compile, by one method, adding "profile" to each record.
 *
 * Baselines are cached per (task, GPU, torch version, method); the
 * candidate runs in a fresh sandboxed process; outputs of timed calls are
 * spot-checked and the candidate's own clock is checked against ours.
 * The options are this command's; what they mean, and the engine, are
 * lib/evaluate (shared with ca-verify); see ca-profile(1).
 */
#include <getopt.h>
#include <stdio.h>

#include "err.h"
#include "evaluate.h"
#include "opt.h"

static const char usage_text[] =
	"usage: ca-profile [-Hhuv] [--allow-torch] [--arch sm_NN] [--atol X] [--build-cache DIR]\n"
	"                  [--compile-mode MODE] [--device cuda|cpu] [--gpus LIST] [--iters N]\n"
	"                  [--keep N] [--no-cache] [--no-compile] [--no-sandbox] [--robust N] [--rtol X]\n"
	"                  [--sandbox-user UID] [--seed N] [--serve SOCKET] [--sets N] [--shapes N]\n"
	"                  [--timeout S] [--top N] [--unordered] [--verify] [--warmup N] [file ... | DIR]\n";

int main(int argc, char **argv)
{
	/* The options both evaluators take (evaluate.h), then this one's own. */
	static const struct option longopts[] = {
		CA_EVAL_LONGOPTS,
		{"compile-mode", required_argument, NULL, 'm'},
		{"iters", required_argument, NULL, 'i'},
		{"keep", required_argument, NULL, 'k'},
		{"no-cache", no_argument, NULL, 'C'},
		{"no-compile", no_argument, NULL, 'N'},
		{"sets", required_argument, NULL, 'e'},
		{"top", required_argument, NULL, 'o'},
		{"verify", no_argument, NULL, 'V'},
		{"warmup", required_argument, NULL, 'w'},
		{NULL, 0, NULL, 0},
	};
	struct ca_eval_config cfg;
	ca_err_init(argv[0]);
	ca_eval_defaults(&cfg, CA_EVAL_PROFILE);
	ca_eval_options(&cfg, argc, argv, longopts, usage_text);
	return ca_eval_run(&cfg, argc - optind, argv + optind, usage_text);
}
