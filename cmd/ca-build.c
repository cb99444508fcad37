/*
 * ca-build: build a workspace's kernels, content-addressed; prints one JSON
 * object. lib/build does the work (ca-verify and ca-profile call it too).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "build.h"
#include "err.h"
#include "opt.h"

static const char usage_text[] =
	"usage: ca-build [-H] [--arch sm_NN] [--cache DIR] [--cpu S] [--cxx CXX] [--flavour auto|ca|cuda-agent|kernelbench]\n"
	"                [--fsize MB] [--mem MB] [--no-light] [--no-sandbox] [--time S] DIR\n"
	"       ca-build --make-pch KEY [--arch sm_NN] [--cache DIR] [--cxx CXX] [--no-light] [--no-sandbox]\n";

static int valid_arch(const char *a)
{
	size_t n = strlen(a);
	if (n < 5 || n > 8 || strncmp(a, "sm_", 3) != 0)
		return 0;
	for (size_t i = 3; i < n; i++)
		if (!(a[i] >= '0' && a[i] <= '9') && !(i == n - 1 && i > 4 && a[i] >= 'a' && a[i] <= 'z'))
			return 0;
	return 1;
}

/*
 * --make-pch KEY: take the header's lock, or leave it to whoever holds
 * it; then a process of our own, in its own session, at a lower
 * priority, makes it while this one returns (the build that started us
 * compiles its units meanwhile). 0 once it is in the child's hands.
 */
static int make_pch_detached(const char *key, const struct ca_build_options *opt)
{
	int fd = ca_build_pch_lock(opt, key, 0);
	if (fd < 0)
		return 0;  /* being made */
	pid_t pid = fork();
	if (pid < 0)
		ca_err_die(CA_EXIT_SYSTEM, "fork: %s", strerror(errno));
	if (pid > 0)
		return 0;
	setsid();
	setpriority(PRIO_PROCESS, 0, 10);
	int null = open("/dev/null", O_RDWR);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
	}
	struct ca_build_result res;
	int status = ca_build_make_pch(key, opt, &res);
	ca_build_result_free(&res);
	close(fd);
	return status;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"arch", required_argument, NULL, 'a'},
		{"cache", required_argument, NULL, 'c'},
		{"cpu", required_argument, NULL, 'C'},
		{"cxx", required_argument, NULL, 'x'},
		{"flavour", required_argument, NULL, 'f'},
		{"fsize", required_argument, NULL, 'F'},
		{"help", no_argument, NULL, 'h'},
		{"human", no_argument, NULL, 'H'},
		{"make-pch", required_argument, NULL, 'P'},
		{"mem", required_argument, NULL, 'm'},
		{"no-light", no_argument, NULL, 'L'},
		{"no-sandbox", no_argument, NULL, 'n'},
		{"time", required_argument, NULL, 't'},
		{NULL, 0, NULL, 0},
	};
	struct ca_build_options opt = {0};
	const char *pch_key = NULL;
	int human = 0, c;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "Hh", longopts, NULL)) != -1) {
		switch (c) {
		case 'a':
			if (!valid_arch(optarg))
				ca_err_die(CA_EXIT_USAGE, "--arch: '%s': expected sm_NN (for example sm_90 or sm_90a)", optarg);
			opt.arch = optarg;
			break;
		case 'c': opt.cache = optarg; break;
		case 'C': opt.cpu_s = ca_opt_long("--cpu", optarg, 1, 1 << 20); break;
		case 'f':
			if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "ca") != 0 && strcmp(optarg, "cuda-agent") != 0 &&
					strcmp(optarg, "kernelbench") != 0)
				ca_err_die(CA_EXIT_USAGE, "--flavour: '%s': expected auto, ca, cuda-agent or kernelbench", optarg);
			opt.flavour = optarg;
			break;
		case 'F': opt.fsize_mb = ca_opt_long("--fsize", optarg, 1, 1 << 20); break;
		case 'H': human = 1; break;
		case 'm': opt.mem_mb = ca_opt_long("--mem", optarg, 1, 1 << 20); break;
		case 'L': opt.no_light = 1; break;
		case 'n': opt.no_sandbox = 1; break;
		case 'P':
			if (strlen(optarg) != 64 || strspn(optarg, "0123456789abcdef") != 64)
				ca_err_die(CA_EXIT_USAGE, "--make-pch: '%s': expected a key of 64 hex digits", optarg);
			pch_key = optarg;
			break;
		case 'x': opt.cxx = optarg; break;
		case 't': opt.time_s = ca_opt_double("--time", optarg, 0.001, 1 << 20); break;
		default: ca_opt_common(c, usage_text);
		}
	}
	if (pch_key && argc == optind)
		return ca_err_finish(make_pch_detached(pch_key, &opt));
	if (argc - optind != 1 || pch_key) {
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	struct ca_build_result res;
	int status = ca_build_workspace(argv[optind], &opt, &res);
	if (human) {
		printf("%s: %s (%s, %s%s) in %.2f s\n", argv[optind], res.ok ? "built" : "failed",
			res.flavour[0] ? res.flavour : "?", res.arch[0] ? res.arch : "?", res.cached ? ", cached" : "",
			res.seconds);
		if (res.library)
			printf("library: %s\n", res.library);
		if (res.log && res.log[0])
			printf("%s\n", res.log);
	} else {
		jv text = jv_dump_string(ca_build_result_json(&res), 0);
		printf("%s\n", jv_string_value(text));
		jv_free(text);
	}
	if (status == CA_EXIT_SYSTEM || status == CA_EXIT_DATA || status == CA_EXIT_USAGE)
		ca_err_warn("%s: %s", argv[optind], res.log);
	ca_build_result_free(&res);
	return ca_err_finish(status);
}
