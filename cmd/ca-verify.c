/*
 * ca-verify: decide whether candidate kernels compute what their task's
 * reference computes, adding "verify" to each record.
 *
 * The reference and the candidate run in separate processes (the candidate
 * inside ca-sandbox); inputs are drawn by the trusted side under a recorded
 * seed, outputs come back as tensor files and are compared here, in C.
 * The engine is lib/evaluate; see ca-verify(1).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "evaluate.h"
#include "ndjson.h"
#include "opt.h"

static const char usage_text[] =
	"usage: ca-verify [-Hhu] [--allow-torch] [--arch sm_NN] [--atol X] [--build-cache DIR]\n"
	"                 [--checks N] [--device cuda|cpu] [--gpus LIST] [--no-sandbox] [--rtol X]\n"
	"                 [--sandbox-user UID] [--seed N] [--timeout S] [--unordered] [file ... | DIR]\n";

/* "0,1,3" into cfg->gpus. */
static void parse_gpus(struct ca_eval_config *cfg, const char *text)
{
	char *copy = ca_xstrdup(text), *save = NULL;
	cfg->ngpus = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		cfg->gpus = ca_xrealloc(cfg->gpus, (size_t)(cfg->ngpus + 1) * sizeof *cfg->gpus);
		cfg->gpus[cfg->ngpus++] = (int)ca_opt_long("--gpus", tok, 0, 1023);
	}
	free(copy);
	if (cfg->ngpus == 0) {
		ca_err_warn("--gpus: empty list");
		ca_opt_bad_usage();
	}
}

int main(int argc, char **argv)
{
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
		{"rtol", required_argument, NULL, 'r'},
		{"sandbox-user", required_argument, NULL, 'Y'},
		{"seed", required_argument, NULL, 's'},
		{"timeout", required_argument, NULL, 'T'},
		{"unbuffered", no_argument, NULL, 'u'},
		{"unordered", no_argument, NULL, 'U'},
		{NULL, 0, NULL, 0},
	};
	struct ca_eval_config cfg;
	int c;
	ca_err_init(argv[0]);
	ca_eval_defaults(&cfg, CA_EVAL_VERIFY);
	while ((c = getopt_long(argc, argv, "Hhu", longopts, NULL)) != -1) {
		switch (c) {
		case 'A': cfg.allow_torch = 1; break;
		case 'a': cfg.arch = optarg; break;
		case 't': cfg.tol.atol = ca_opt_double("--atol", optarg, 0, 1e9); break;
		case 'B': cfg.build_cache = optarg; break;
		case 'c': cfg.checks = (int)ca_opt_long("--checks", optarg, 1, 1000); break;
		case 'd':
			if (strcmp(optarg, "cuda") && strcmp(optarg, "cpu")) {
				ca_err_warn("--device: expected cuda or cpu");
				ca_opt_bad_usage();
			}
			cfg.device = optarg;
			break;
		case 'g': parse_gpus(&cfg, optarg); break;
		case 'H': cfg.human = 1; break;
		case 'h': fputs(usage_text, stdout); return ca_err_finish(CA_EXIT_OK);
		case 'S': cfg.sandbox = 0; break;
		case 'r': cfg.tol.rtol = ca_opt_double("--rtol", optarg, 0, 1e9); break;
		case 's':
			cfg.seed = (unsigned long long)ca_opt_long("--seed", optarg, 0, (1LL << 48) - 1);
			cfg.seed_set = 1;
			break;
		case 'Y':
			ca_opt_long("--sandbox-user", optarg, 0, 4294967294LL);
			cfg.sandbox_user = optarg;
			break;
		case 'T': cfg.timeout_s = ca_opt_double("--timeout", optarg, 0.1, 86400); break;
		case 'u': ca_ndjson_set_unbuffered(1); break;
		case 'U': cfg.unordered = 1; break;
		default: fputs(usage_text, stderr); ca_opt_bad_usage();
		}
	}
	struct stat st;
	if (argc - optind >= 1 && stat(argv[optind], &st) == 0 && S_ISDIR(st.st_mode)) {
		if (argc - optind > 1) {
			ca_err_warn("a workspace directory must be the only argument");
			fputs(usage_text, stderr);
			ca_opt_bad_usage();
		}
		return ca_err_finish(ca_eval_directory(&cfg, argv[optind]));
	}
	return ca_eval_stream(&cfg, argc - optind, argv + optind);
}
