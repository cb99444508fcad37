/*
 * evaluate_main: the command line shared by ca-verify and ca-profile (see
 * evaluate.h). One table of options; those of profile alone are refused
 * by verify as unknown, as getopt would.
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

static const char verify_usage[] =
	"usage: ca-verify [-Hhuv] [--allow-torch] [--arch sm_NN] [--atol X] [--build-cache DIR]\n"
	"                 [--checks N] [--device cuda|cpu] [--gpus LIST] [--no-sandbox] [--robust N] [--rtol X]\n"
	"                 [--sandbox-user UID] [--seed N] [--serve SOCKET] [--shapes N] [--timeout S]\n"
	"                 [--unordered] [file ... | DIR]\n";

static const char profile_usage[] =
	"usage: ca-profile [-Hhuv] [--allow-torch] [--arch sm_NN] [--atol X] [--build-cache DIR]\n"
	"                  [--compile-mode MODE] [--device cuda|cpu] [--gpus LIST] [--iters N]\n"
	"                  [--keep N] [--no-cache] [--no-compile] [--no-sandbox] [--robust N] [--rtol X]\n"
	"                  [--sandbox-user UID] [--seed N] [--serve SOCKET] [--sets N] [--shapes N]\n"
	"                  [--timeout S] [--top N] [--unordered] [--verify] [--warmup N] [file ... | DIR]\n";

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

/* Options of both commands first, then those of ca-profile alone (from PROFILE_FIRST on). */
#define COMMON_OPTIONS \
	{"allow-torch", no_argument, NULL, 'A'}, \
	{"arch", required_argument, NULL, 'a'}, \
	{"atol", required_argument, NULL, 't'}, \
	{"build-cache", required_argument, NULL, 'B'}, \
	{"device", required_argument, NULL, 'd'}, \
	{"gpus", required_argument, NULL, 'g'}, \
	{"help", no_argument, NULL, 'h'}, \
	{"no-sandbox", no_argument, NULL, 'S'}, \
	{"robust", required_argument, NULL, 'R'}, \
	{"rtol", required_argument, NULL, 'r'}, \
	{"sandbox-user", required_argument, NULL, 'Y'}, \
	{"seed", required_argument, NULL, 's'}, \
	{"serve", required_argument, NULL, 'E'}, \
	{"shapes", required_argument, NULL, 'z'}, \
	{"timeout", required_argument, NULL, 'T'}, \
	{"unbuffered", no_argument, NULL, 'u'}, \
	{"unordered", no_argument, NULL, 'U'}, \
	{"verbose", no_argument, NULL, 'v'}

static const char *serve_path;

int ca_eval_parse_args(struct ca_eval_config *cfg, enum ca_eval_mode mode, int argc, char **argv)
{
	static const struct option verify_opts[] = {
		COMMON_OPTIONS,
		{"checks", required_argument, NULL, 'c'},
		{NULL, 0, NULL, 0},
	};
	static const struct option profile_opts[] = {
		COMMON_OPTIONS,
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
	const char *usage = mode == CA_EVAL_VERIFY ? verify_usage : profile_usage;
	int c;
	ca_eval_defaults(cfg, mode);
	while ((c = getopt_long(argc, argv, "Hhuv", mode == CA_EVAL_VERIFY ? verify_opts : profile_opts, NULL)) != -1) {
		switch (c) {
		case 'A': cfg->allow_torch = 1; break;
		case 'a': cfg->arch = optarg; break;
		case 't': cfg->tol.atol = ca_opt_double("--atol", optarg, 0, 1e9); break;
		case 'B': cfg->build_cache = optarg; break;
		case 'c': cfg->checks = (int)ca_opt_long("--checks", optarg, 1, 1000); break;
		case 'm': cfg->compile_mode = optarg; break;
		case 'i': cfg->iters = (int)ca_opt_long("--iters", optarg, 1, 100000); break;
		case 'k': cfg->keep = (int)ca_opt_long("--keep", optarg, 0, 1000); break;
		case 'C': cfg->no_cache = 1; break;
		case 'N': cfg->no_compile = 1; break;
		case 'e': cfg->sets = (int)ca_opt_long("--sets", optarg, 1, 100); break;
		case 'o': cfg->top = (int)ca_opt_long("--top", optarg, 0, 1000); break;
		case 'w': cfg->warmup = (int)ca_opt_long("--warmup", optarg, 0, 100000); break;
		case 'd':
			if (strcmp(optarg, "cuda") && strcmp(optarg, "cpu")) {
				ca_err_warn("--device: expected cuda or cpu");
				ca_opt_bad_usage();
			}
			cfg->device = optarg;
			break;
		case 'g': parse_gpus(cfg, optarg); break;
		case 'H': cfg->human = 1; break;
		case 'h': fputs(usage, stdout); exit(ca_err_finish(CA_EXIT_OK));
		case 'S': cfg->sandbox = 0; break;
		case 'r': cfg->tol.rtol = ca_opt_double("--rtol", optarg, 0, 1e9); break;
		case 'R': cfg->robust = (int)ca_opt_long("--robust", optarg, 0, 1000); break;
		case 'z': cfg->shapes = (int)ca_opt_long("--shapes", optarg, 0, 2); break;
		case 's':
			cfg->seed = (unsigned long long)ca_opt_long("--seed", optarg, 0, (1LL << 48) - 1);
			cfg->seed_set = 1;
			break;
		case 'Y':
			ca_opt_long("--sandbox-user", optarg, 0, 4294967294LL);
			cfg->sandbox_user = optarg;
			break;
		case 'T': cfg->timeout_s = ca_opt_double("--timeout", optarg, 0.1, 86400); break;
		case 'u': ca_ndjson_set_unbuffered(1); break;
		case 'U': cfg->unordered = 1; break;
		case 'v': cfg->verbose = 1; break;
		case 'E': serve_path = optarg; break;
		case 'V': cfg->also_verify = 1; break;
		default: fputs(usage, stderr); ca_opt_bad_usage();
		}
	}
	return optind;
}

int ca_eval_main(enum ca_eval_mode mode, int argc, char **argv)
{
	struct ca_eval_config cfg;
	ca_err_init(argv[0]);
	int first = ca_eval_parse_args(&cfg, mode, argc, argv);
	if (serve_path) {
		if (argc - first > 0) {
			ca_err_warn("--serve takes no files: records come from the commands that connect");
			ca_opt_bad_usage();
		}
		const char *idle = getenv("CA_EVAL_SERVE_IDLE");
		int status = ca_eval_serve(&cfg, serve_path, idle && *idle ? atof(idle) : 1800);
		free(cfg.gpus);
		return status;
	}
	struct stat st;
	int status;
	if (argc - first >= 1 && stat(argv[first], &st) == 0 && S_ISDIR(st.st_mode)) {
		if (argc - first > 1) {
			ca_err_warn("a workspace directory must be the only argument");
			fputs(mode == CA_EVAL_VERIFY ? verify_usage : profile_usage, stderr);
			ca_opt_bad_usage();
		}
		status = ca_err_finish(ca_eval_directory(&cfg, argv[first]));
	} else {
		status = ca_eval_stream(&cfg, argc - first, argv + first);
	}
	free(cfg.gpus);
	return status;
}
