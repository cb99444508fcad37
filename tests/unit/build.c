/* Unit tests for lib/build: trimming compiler output to what an agent needs, telling limits from errors. */
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

	/* Why a compile failed: the limit it ran into, told by the status or the tools' own lines. */
#define CAUSE(status, log, want) do { \
	const char *got_ = ca_build_failure_cause(status, log); \
	CHECK((want) ? got_ && strcmp(got_, (want) ? (want) : "") == 0 : got_ == NULL); \
} while (0)
	CAUSE(0, "", NULL);
	CAUSE(124, "", "time");
	CAUSE(128 + 24, "", "cpu");
	CAUSE(128 + 25, "", "fsize");
	CAUSE(128 + 9, "", "signal");
	CAUSE(128 + 11, "Segmentation fault\n", "signal");
	CAUSE(1, "cc1plus: out of memory allocating 4294967312 bytes after a total of 2187264 bytes\n", "memory");
	CAUSE(1, "kernels/k.cu(5): catastrophic error: out of memory\n   enum { v };\n", "memory");
	CAUSE(134, "LLVM ERROR: out of memory\nAborted\n", "memory");
	CAUSE(4, "g++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.\n", "memory");
	CAUSE(134, "\nInternal error: CPU time limit exceeded.\nCompilation aborted.\nAborted\n", "cpu");
	CAUSE(4, "g++: internal compiler error: CPU time limit exceeded signal terminated program cc1plus\n", "cpu");
	CAUSE(1, "nvcc error   : 'ptxas' died due to signal 25 (File size limit exceeded)\n", "fsize");
	CAUSE(1, "ptxas fatal   : Memory allocation failure\r\n", "memory");
	/* Honest errors start with the source's path and never name a limit, whatever they quote. */
	CAUSE(1, "kernels/k.cu(3): error: identifier \"out_of_memory\" is undefined\n", NULL);
	CAUSE(2, "kernels/k.cu(1): error: static assertion failed with \"tile: out of memory\"\n", NULL);
	CAUSE(1, "binding.cpp:4:2: error: #error CPU time limit exceeded signal terminated program\n", NULL);
	CAUSE(1, "kernels/k.cu:1:10: fatal error: Killed signal terminated program: No such file or directory\n", NULL);
	CAUSE(1, "  static_assert(false, \"LLVM ERROR: out of memory\");\n", NULL);
	CAUSE(1, NULL, NULL);

	if (failures) {
		fprintf(stderr, "test-build: %d checks failed\n", failures);
		return 1;
	}
	puts("test-build: all checks passed");
	return 0;
}
