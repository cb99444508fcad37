/* Unit tests for lib/sandbox: the ca-sandbox command line built for threaded callers, the report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox.h"

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "test-sandbox: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

static char *joined(char **v)
{
	static char buf[4096];
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 1; v[i]; i++)  /* skip argv[0]: its directory depends on where we run */
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i > 1 ? " " : "", v[i]);
	return buf;
}

int main(void)
{
	struct ca_sandbox cfg;
	const char *argv[] = {"python3", "-c", "print(1)", NULL};
	const char *env[] = {"A=1", "B=two words"};
	const char *hide[] = {"/srv/eval"};
	const char *ro[] = {"/opt/lib"};
	ca_sandbox_init(&cfg);
	char **v = ca_sandbox_command(&cfg, NULL, argv);
	CHECK(strstr(v[0], "ca-sandbox") != NULL);
	CHECK(strcmp(joined(v), "-- python3 -c print(1)") == 0);
	ca_sandbox_command_free(v);

	cfg.dir = "/tmp/w";
	cfg.time_s = 2.5;
	cfg.cpu_s = 10;
	cfg.fsize_mb = 64;
	cfg.mem_mb = 4096;
	cfg.nofile = 128;
	cfg.nproc = 32;
	cfg.uid = 60000;
	cfg.gpu = 1;
	cfg.allow_network = 1;
	cfg.env = env;
	cfg.nenv = 2;
	cfg.hide = hide;
	cfg.nhide = 1;
	cfg.ro = ro;
	cfg.nro = 1;
	v = ca_sandbox_command(&cfg, "r.json", argv);
	CHECK(strcmp(joined(v), "--allow-network --cpu 10 --dir /tmp/w --env A=1 --env B=two words --fsize 64 --gpu "
		"--hide /srv/eval --mem 4096 --nofile 128 --nproc 32 --report r.json --ro /opt/lib --time 2.5 "
		"--user 60000 -- python3 -c print(1)") == 0);
	CHECK(strcmp(v[9], "B=two words") == 0);  /* one argument, not split */
	ca_sandbox_command_free(v);

	struct ca_sandbox_result res = {.status = 124, .timed_out = 1, .wall_s = 1.5, .max_rss_kb = 100};
	res.isolation = jv_object();
	jv r = ca_sandbox_report(&res);
	jv text = jv_dump_string(r, JV_PRINT_SORTED);
	CHECK(strcmp(jv_string_value(text),
		"{\"isolation\":{},\"max_rss_kb\":100,\"signal\":null,\"status\":124,\"timed_out\":true,\"wall_s\":1.5}") == 0);
	jv_free(text);
	ca_sandbox_result_free(&res);

	int abi = ca_sandbox_landlock_abi();
	CHECK(abi >= 0);
	printf("test-sandbox: landlock ABI %d\n", abi);
	if (failures) {
		fprintf(stderr, "test-sandbox: %d checks failed\n", failures);
		return 1;
	}
	puts("test-sandbox: all checks passed");
	return 0;
}
