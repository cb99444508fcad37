/*
 * ca-profile: time a candidate against its task's reference in eager mode
 * and under torch.compile, by one method, adding "profile" to each record.
 *
 * Baselines are cached per (task, GPU, torch version, method); the
 * candidate runs in a fresh sandboxed process; outputs of timed calls are
 * spot-checked and the candidate's own clock is checked against ours.
 * The engine is lib/evaluate; see ca-profile(1).
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
	"usage: ca-profile [-Hhu] [--allow-torch] [--arch sm_NN] [--atol X] [--build-cache DIR]\n"
	"                  [--compile-mode MODE] [--device cuda|cpu] [--gpus LIST] [--iters N]\n"
	"                  [--keep N] [--no-cache] [--no-compile] [--no-sandbox] [--rtol X]\n"
	"                  [--sandbox-user UID] [--seed N] [--sets N] [--timeout S] [--top N]\n"
	"                  [--unordered] [--warmup N] [file ... | DIR]\n";

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
		{"compile-mode", required_argument, NULL, 'm'},
		{"device", required_argument, NULL, 'd'},
		{"gpus", required_argument, NULL, 'g'},
		{"help", no_argument, NULL, 'h'},
		{"iters", required_argument, NULL, 'i'},
		{"keep", required_argument, NULL, 'k'},
		{"no-cache", no_argument, NULL, 'C'},
		{"no-compile", no_argument, NULL, 'N'},
		{"no-sandbox", no_argument, NULL, 'S'},
		{"rtol", required_argument, NULL, 'r'},
		{"sandbox-user", required_argument, NULL, 'Y'},
		{"seed", required_argument, NULL, 's'},
		{"sets", required_argument, NULL, 'e'},
		{"timeout", required_argument, NULL, 'T'},
		{"top", required_argument, NULL, 'o'},
		{"unbuffered", no_argument, NULL, 'u'},
		{"unordered", no_argument, NULL, 'U'},
		{"warmup", required_argument, NULL, 'w'},
		{NULL, 0, NULL, 0},
	};
	struct ca_eval_config cfg;
	int c;
	ca_err_init(argv[0]);
	ca_eval_defaults(&cfg, CA_EVAL_PROFILE);
	while ((c = getopt_long(argc, argv, "Hhu", longopts, NULL)) != -1) {
		switch (c) {
		case 'A': cfg.allow_torch = 1; break;
		case 'a': cfg.arch = optarg; break;
		case 't': cfg.tol.atol = ca_opt_double("--atol", optarg, 0, 1e9); break;
		case 'B': cfg.build_cache = optarg; break;
		case 'm': cfg.compile_mode = optarg; break;
		case 'i': cfg.iters = (int)ca_opt_long("--iters", optarg, 1, 100000); break;
		case 'k': cfg.keep = (int)ca_opt_long("--keep", optarg, 0, 1000); break;
		case 'C': cfg.no_cache = 1; break;
		case 'N': cfg.no_compile = 1; break;
		case 'e': cfg.sets = (int)ca_opt_long("--sets", optarg, 1, 100); break;
		case 'o': cfg.top = (int)ca_opt_long("--top", optarg, 0, 1000); break;
		case 'w': cfg.warmup = (int)ca_opt_long("--warmup", optarg, 0, 100000); break;
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
