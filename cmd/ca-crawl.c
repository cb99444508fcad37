/*
 * ca-crawl: seed operators from the torch and transformers actually installed
 * (the first stage of the paper's synthesis pipeline).
 *
 * The introspection runs in lib/py/ca_synth.py ("crawl") under the
 * interpreter from ca_paths_python(); this command owns the stream: it
 * checks every line the crawler prints is a JSON object with a seed, and
 * turns a crawler failure into a diagnostic and an exit status.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "opt.h"
#include "paths.h"
#include "proc.h"

static const char usage_text[] =
	"usage: ca-crawl [-hu] [--families LIST] [-j N] [--no-functions] [--no-transformers] [--timeout S]\n";

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"families", required_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{"jobs", required_argument, NULL, 'j'},
		{"no-functions", no_argument, NULL, 'F'},
		{"no-transformers", no_argument, NULL, 'T'},
		{"timeout", required_argument, NULL, 't'},
		{"unbuffered", no_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	const char *families = NULL;
	int no_functions = 0, no_transformers = 0, c;
	double timeout_s = 1800;
	long long jobs = 0;
	ca_err_init(argv[0]);
	while ((c = getopt_long(argc, argv, "hj:u", longopts, NULL)) != -1) {
		switch (c) {
		case 'f': families = optarg; break;
		case 'F': no_functions = 1; break;
		case 'j': jobs = ca_opt_long("-j", optarg, 1, 64); break;
		case 't': timeout_s = ca_opt_double("--timeout", optarg, 0.001, 1e7); break;
		case 'T': no_transformers = 1; break;
		default: ca_opt_common(c, usage_text);
		}
	}
	if (optind != argc) {
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	char script[PATH_MAX];
	snprintf(script, sizeof script, "%s/ca_synth.py", ca_paths_pydir());
	if (jobs == 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		jobs = cpus < 1 ? 1 : cpus > 8 ? 8 : cpus;
	}
	char jobs_text[32];
	snprintf(jobs_text, sizeof jobs_text, "%lld", jobs);
	const char *args[12];
	int n = 0;
	args[n++] = ca_paths_python();
	args[n++] = script;
	args[n++] = "crawl";
	args[n++] = "--jobs";
	args[n++] = jobs_text;
	if (no_functions)
		args[n++] = "--no-functions";
	if (no_transformers)
		args[n++] = "--no-transformers";
	if (families) {
		args[n++] = "--families";
		args[n++] = families;
	}
	args[n] = NULL;
	struct ca_proc p;
	ca_proc_init(&p, args);
	p.timeout_s = timeout_s;
	p.die_with_parent = 1;
	struct ca_buf out = {0}, err = {0};
	int status = ca_proc_capture(&p, NULL, 0, &out, &err, (size_t)256 << 20);
	if (status < 0)
		ca_err_die_sys(CA_EXIT_SYSTEM, "cannot run %s", args[0]);
	int result = CA_EXIT_OK;
	long lines = 0, seeds = 0, concrete = 0;
	char *text = out.data ? out.data : "";
	for (char *line = text; *line;) {
		char *nl = strchr(line, '\n');
		size_t len = nl ? (size_t)(nl - line) : strlen(line);
		lines++;
		jv rec = jv_parse_sized(line, (int)len);
		jv seed = jv_is_valid(rec) ? ca_json_get(rec, "seed") : jv_invalid();
		if (jv_get_kind(seed) != JV_KIND_OBJECT) {
			ca_err_warn("crawler line %ld: not a seed record", lines);
			result = CA_EXIT_SYSTEM;
		} else {
			seeds++;
			concrete += ca_json_bool(seed, "concrete") == 1;
			if (ca_ndjson_write(jv_copy(rec)) < 0)
				break;
		}
		jv_free(seed);
		jv_free(rec);
		if (!nl)
			break;
		line = nl + 1;
	}
	if (status != 0) {
		/* the crawler's own last words are the useful part */
		const char *e = err.data ? err.data : "";
		size_t el = strlen(e);
		while (el > 0 && e[el - 1] == '\n')
			el--;
		size_t from = el;
		while (from > 0 && e[from - 1] != '\n')
			from--;
		ca_err_warn("crawler %s (status %d)%s%.*s", p.timed_out ? "timed out" : "failed", status,
		            el ? ": " : "", (int)(el - from), e + from);
		result = status > 128 ? status : CA_EXIT_SYSTEM;
	} else if (seeds == 0) {
		ca_err_warn("the crawler found no operators");
		result = CA_EXIT_SYSTEM;
	}
	ca_buf_free(&out);
	ca_buf_free(&err);
	(void)concrete;
	return ca_err_finish(result);
}
