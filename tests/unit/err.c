/*
 * Unit tests of lib/err: the program name, status combination, and
 * ca_err_finish detecting a failed write (stdout is pointed at /dev/full).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

int main(int argc, char **argv)
{
	ca_err_init("/some/dir/ca-test");
	CHECK(strcmp(ca_err_prog(), "ca-test") == 0);
	CHECK(ca_err_worst(CA_EXIT_OK, CA_EXIT_DATA) == CA_EXIT_DATA);
	CHECK(ca_err_worst(CA_EXIT_SYSTEM, CA_EXIT_DATA) == CA_EXIT_SYSTEM);
	CHECK(ca_err_worst(128 + 9, CA_EXIT_SYSTEM) == 128 + 9);
	char *s = ca_xstrdup("abc");
	CHECK(strcmp(s, "abc") == 0);
	free(s);
	CHECK(ca_err_finish(CA_EXIT_DATA) == CA_EXIT_DATA);  /* stdout fine so far */
	int fd = open("/dev/full", O_WRONLY);
	if (fd >= 0) {
		fflush(stdout);
		dup2(fd, 1);
		close(fd);
		printf("this cannot be written\n");
		CHECK(ca_err_finish(CA_EXIT_OK) == CA_EXIT_SYSTEM);
	}
	if (failures)
		fprintf(stderr, "test-err: %d failures\n", failures);
	return failures != 0;
}
