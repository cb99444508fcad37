/* Unit tests for lib/build: trimming compiler output to what an agent needs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"

static int failures;

#define CHECK(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "test-build: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		failures++; \
	} \
} while (0)

int main(void)
{
	const char *log =
		"/tmp/ca-build.X/kernels/k.cu(12): warning #177-D: variable \"unused\" was declared but never referenced\n"
		"      int unused;\n"
		"          ^\n"
		"\n"
		"/tmp/ca-build.X/kernels/k.cu(14): error: identifier \"n_rows\" is undefined\n"
		"      int i = blockIdx.x * n_rows;\n"
		"                           ^\n"
		"\n"
		"1 error detected in the compilation of \"kernels/k.cu\".\n"
		"kernels/h.cpp:3:5: error: 'foo' was not declared in this scope\n"
		"    3 |     foo();\n"
		"      |     ^~~\n"
		"/usr/bin/ld: obj/0.o: in function `bar': undefined reference to `baz'\n"
		"collect2: error: ld returned 1 exit status\n";
	char *t = ca_build_trim_log(log, "/tmp/ca-build.X/", 4000);
	CHECK(strstr(t, "kernels/k.cu(14): error: identifier \"n_rows\" is undefined\n      int i = blockIdx.x * n_rows;\n") != NULL);
	CHECK(strstr(t, "warning") == NULL);
	CHECK(strstr(t, "/tmp/ca-build.X") == NULL);
	CHECK(strstr(t, "error detected") == NULL);
	CHECK(strstr(t, "kernels/h.cpp:3:5: error: 'foo' was not declared in this scope\n    3 |     foo();") != NULL);
	CHECK(strstr(t, "undefined reference to `baz'") != NULL);
	CHECK(t[strlen(t) - 1] != '\n');
	free(t);

	/* Many errors: at most 20 shown, the rest counted, the size capped. */
	char *big = malloc(200000), *p = big;
	for (int i = 0; i < 500; i++)
		p += sprintf(p, "kernels/k.cu(%d): error: something is wrong number %d\n    context line\n\n", i, i);
	t = ca_build_trim_log(big, NULL, 4000);
	CHECK(strlen(t) <= 4000 + 64);
	CHECK(strstr(t, "kernels/k.cu(0): error") != NULL);
	CHECK(strstr(t, "kernels/k.cu(19): error") != NULL);
	CHECK(strstr(t, "kernels/k.cu(20): error") == NULL);
	CHECK(strstr(t, "[480 more error lines not shown]") != NULL);
	free(t);
	free(big);

	/* No recognisable error line: the last lines. */
	t = ca_build_trim_log("line 1\nline 2\nSegmentation fault (core dumped)\n", NULL, 4000);
	CHECK(strstr(t, "Segmentation fault") != NULL && strstr(t, "line 1") != NULL);
	free(t);
	t = ca_build_trim_log("", NULL, 4000);
	CHECK(t && t[0] == '\0');
	free(t);

	if (failures) {
		fprintf(stderr, "test-build: %d checks failed\n", failures);
		return 1;
	}
	puts("test-build: all checks passed");
	return 0;
}
