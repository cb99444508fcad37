/*
 * ca-nvcc: nvcc, with the host and device halves of a compile run at once.
 *
 * Takes nvcc's arguments and gives nvcc's results: the same files, the
 * same diagnostics, the same exit status. A compile of one .cu to an
 * object runs through ca_nvcc_compile (lib/eval/nvcc.h), which runs
 * cudafe++ and cicc side by side; everything else, and anything it does
 * not recognise, is handed to the real nvcc by exec. Only --help alone is
 * ours, so there is no getopt: every other argument is nvcc's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "nvcc.h"

static const char usage_text[] =
	"usage: ca-nvcc [--help] [nvcc-argument ...]\n";

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc == 2 && strcmp(argv[1], "--help") == 0) {
		fputs(usage_text, stdout);
		return ca_err_finish(CA_EXIT_OK);
	}
	char *real = ca_nvcc_find_real();
	if (!real)
		ca_err_die(CA_EXIT_SYSTEM, "no nvcc found (set CA_NVCC_REAL or CUDA_HOME, or put nvcc in PATH)");
	const char *parallel = getenv("CA_NVCC_PARALLEL"), *why = "CA_NVCC_PARALLEL=0";
	const char *verbose = getenv("CA_NVCC_VERBOSE");
	if (!parallel || strcmp(parallel, "0") != 0) {
		int status = ca_nvcc_compile(real, argv + 1, &why);
		if (status >= 0) {
			if (verbose && *verbose)
				ca_err_warn("ran side by side");
			return ca_err_finish(status);
		}
	}
	if (verbose && *verbose)
		ca_err_warn("%s runs it: %s", real, why);
	fflush(NULL);
	argv[0] = real;
	execv(real, argv);
	ca_err_die_sys(CA_EXIT_SYSTEM, "cannot run %s", real);
}
