/*
 * ca-sandbox: run a command with limits, no network and a private work
 * directory; a chain-loader in the style of s6-softlimit. lib/sandbox does
 * the work; this file is the command line and the report.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "opt.h"
#include "sandbox.h"

static const char usage_text[] =
	"usage: ca-sandbox [--allow-network] [--cpu S] [--dir DIR] [--env NAME=VALUE]... [--fsize MB] [--gpu]\n"
	"                  [--hide PATH]... [--mem MB] [--nofile N] [--nproc N] [--report FILE] [--ro PATH]...\n"
	"                  [--show PATH]... [--time S] [--user UID] -- COMMAND [ARG...]\n";

static void add(const char ***list, size_t *n, const char *item)
{
	*list = ca_xrealloc(*list, (*n + 1) * sizeof **list);
	(*list)[(*n)++] = item;
}

static int write_report(const char *path, const struct ca_sandbox_result *res)
{
	FILE *fp = fopen(path, "w");
	if (!fp) {
		ca_err_warn_sys("%s", path);
		return -1;
	}
	jv report = ca_sandbox_report(res);
	jv text = jv_dump_string(report, 0);
	fprintf(fp, "%s\n", jv_string_value(text));
	jv_free(text);
	if (fclose(fp) != 0) {
		ca_err_warn_sys("%s", path);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	enum { O_NET = 256, O_CPU, O_DIR, O_ENV, O_FSIZE, O_GPU, O_HIDE, O_MEM, O_NOFILE, O_NPROC, O_REPORT, O_RO,
		O_SHOW, O_TIME, O_USER };
	static const struct option longopts[] = {
		{"allow-network", no_argument, NULL, O_NET},
		{"cpu", required_argument, NULL, O_CPU},
		{"dir", required_argument, NULL, O_DIR},
		{"env", required_argument, NULL, O_ENV},
		{"fsize", required_argument, NULL, O_FSIZE},
		{"gpu", no_argument, NULL, O_GPU},
		{"help", no_argument, NULL, 'h'},
		{"hide", required_argument, NULL, O_HIDE},
		{"mem", required_argument, NULL, O_MEM},
		{"nofile", required_argument, NULL, O_NOFILE},
		{"nproc", required_argument, NULL, O_NPROC},
		{"report", required_argument, NULL, O_REPORT},
		{"ro", required_argument, NULL, O_RO},
		{"show", required_argument, NULL, O_SHOW},
		{"time", required_argument, NULL, O_TIME},
		{"user", required_argument, NULL, O_USER},
		{NULL, 0, NULL, 0},
	};
	struct ca_sandbox cfg;
	const char *report = NULL;
	int c;
	ca_err_init(argv[0]);
	ca_sandbox_init(&cfg);
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case O_NET: cfg.allow_network = 1; break;
		case O_CPU: cfg.cpu_s = ca_opt_long("--cpu", optarg, 1, 1LL << 31); break;
		case O_DIR: cfg.dir = optarg; break;
		case O_ENV:
			if (!strchr(optarg, '=') || optarg[0] == '=')
				ca_err_die(CA_EXIT_USAGE, "--env: '%s': expected NAME=VALUE", optarg);
			add(&cfg.env, &cfg.nenv, optarg);
			break;
		case O_FSIZE: cfg.fsize_mb = ca_opt_long("--fsize", optarg, 1, 1LL << 30); break;
		case O_GPU: cfg.gpu = 1; break;
		case O_HIDE: add(&cfg.hide, &cfg.nhide, optarg); break;
		case O_MEM: cfg.mem_mb = ca_opt_long("--mem", optarg, 1, 1LL << 30); break;
		case O_NOFILE: cfg.nofile = ca_opt_long("--nofile", optarg, 4, 1 << 20); break;
		case O_NPROC: cfg.nproc = ca_opt_long("--nproc", optarg, 1, 1 << 22); break;
		case O_REPORT: report = optarg; break;
		case O_RO: add(&cfg.ro, &cfg.nro, optarg); break;
		case O_SHOW: add(&cfg.show, &cfg.nshow, optarg); break;
		case O_TIME: cfg.time_s = ca_opt_double("--time", optarg, 0.001, 1e9); break;
		case O_USER: cfg.uid = ca_opt_long("--user", optarg, 1, 4294967294LL); break;
		default: ca_opt_common(c, usage_text);
		}
	}
	if (optind >= argc) {
		ca_err_warn("no command given");
		fputs(usage_text, stderr);
		ca_opt_bad_usage();
	}
	struct ca_sandbox_result res;
	int status = ca_sandbox_run(&cfg, (const char *const *)argv + optind, &res);
	if (res.error[0])
		ca_err_warn("%s", res.error);
	if (report && write_report(report, &res) != 0 && status == 0)
		status = CA_EXIT_SYSTEM;
	ca_sandbox_result_free(&res);
	free(cfg.env);
	free(cfg.hide);
	free(cfg.ro);
	free(cfg.show);
	return status;
}
