/*
 * opt: checked parsing of numbers and lists from the command line.
 *
 * Every numeric option goes through these; none uses atoi. On a bad
 * value they print "ca-NAME: --opt: reason" and exit with CA_EXIT_USAGE.
 */
#ifndef CA_OPT_H
#define CA_OPT_H

#include <stddef.h>
#include <stdnoreturn.h>

/* Parse a finite double in [min, max]. */
double ca_opt_double(const char *option, const char *text, double min, double max);
/* Parse a decimal integer in [min, max]. */
long long ca_opt_long(const char *option, const char *text, long long min, long long max);
/* Non-dying variants: return 0 on success, -1 with *why set on failure. */
int ca_parse_double(const char *text, double *out, const char **why);
int ca_parse_long(const char *text, long long *out, const char **why);

/*
 * Split a comma-separated list of doubles ("0,0.5,1") into a new array.
 * Returns the count; *items gets a malloc'd array the caller frees.
 */
size_t ca_opt_double_list(const char *option, const char *text, double **items);

/* Print "Try 'ca-NAME --help'" and exit CA_EXIT_USAGE. */
noreturn void ca_opt_bad_usage(void);

#endif
