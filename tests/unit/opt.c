/* Unit tests of lib/opt: checked number parsing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "opt.h"

static int failures;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); failures++; } } while (0)

int main(void)
{
	double d;
	long long l;
	const char *why;
	CHECK(ca_parse_double("0.25", &d, &why) == 0 && d == 0.25);
	CHECK(ca_parse_double("-1e3", &d, &why) == 0 && d == -1000);
	CHECK(ca_parse_double("", &d, &why) == -1);
	CHECK(ca_parse_double("1x", &d, &why) == -1);
	CHECK(ca_parse_double("1e999", &d, &why) == -1);
	CHECK(ca_parse_double("nan", &d, &why) == -1);
	CHECK(ca_parse_double("inf", &d, &why) == -1);
	CHECK(ca_parse_long("42", &l, &why) == 0 && l == 42);
	CHECK(ca_parse_long("-7", &l, &why) == 0 && l == -7);
	CHECK(ca_parse_long("4.2", &l, &why) == -1);
	CHECK(ca_parse_long("99999999999999999999", &l, &why) == -1);
	CHECK(ca_parse_long(NULL, &l, &why) == -1);
	CHECK(ca_opt_double("--x", "0.5", 0, 1) == 0.5);
	CHECK(ca_opt_long("--n", "3", 1, 5) == 3);
	double *items;
	size_t n = ca_opt_double_list("-p", "0,0.5,1.5", &items);
	CHECK(n == 3 && items[0] == 0 && items[1] == 0.5 && items[2] == 1.5);
	free(items);
	if (failures)
		fprintf(stderr, "test-opt: %d failures\n", failures);
	return failures != 0;
}
