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
	/* The long options without a short one go to ca_eval_option by name; their vals only tell them apart. */
	static const struct option longopts[] = {
		{"allow-torch", no_argument, NULL, 'A'},
		{"arch", required_argument, NULL, 'a'},
		{"atol", required_argument, NULL, 't'},
		{"build-cache", required_argument, NULL, 'B'},
		{"compile-mode", required_argument, NULL, 'm'},
		{"device", required_argument, NULL, 'd'},
		{"gpus", required_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'},
		{"iters", required_argument, NULL, 'i'},
		{"keep", required_argument, NULL, 'k'},
		{"no-cache", no_argument, NULL, 'C'},
		{"no-compile", no_argument, NULL, 'N'},
		{"no-sandbox", no_argument, NULL, 'S'},
		{"robust", required_argument, NULL, 'R'},
		{"rtol", required_argument, NULL, 'r'},
		{"sandbox-user", required_argument, NULL, 'Y'},
		{"seed", required_argument, NULL, 's'},
		{"serve", required_argument, NULL, 'E'},
		{"sets", required_argument, NULL, 'e'},
		{"shapes", required_argument, NULL, 'z'},
		{"timeout", required_argument, NULL, 'T'},
		{"top", required_argument, NULL, 'o'},
		{"unbuffered", no_argument, NULL, 'u'},
		{"unordered", no_argument, NULL, 'U'},
		{"verbose", no_argument, NULL, 'v'},
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
