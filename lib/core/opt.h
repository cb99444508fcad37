/*
 * opt: checked parsing of numbers and lists from the command line, and
 * the options every command takes alike.
 *
 * Every numeric option goes through these; none uses atoi. On a bad
 * value they print "ca-NAME: --opt: reason" and exit with CA_EXIT_USAGE.
 */
#ifndef CA_OPT_H
#define CA_OPT_H

#include <stddef.h>
#include <stdnoreturn.h>

/*
 * The common options (ca(7)): -h, --help writes the usage on stdout and
 * exits 0; --progress and -u, --unbuffered set the record stream's
 * (ndjson). A command lists those it takes in its long options as
 * {"help", no_argument, NULL, 'h'}, {"progress", no_argument, NULL, 'P'}
 * and {"unbuffered", no_argument, NULL, 'u'}, and ends its getopt_long
 * switch with
 *     default: ca_opt_common(c, usage_text);
 * which handles them, and answers anything else getopt_long returns (an
 * unknown option, a missing argument) with the usage on stderr and
 * CA_EXIT_USAGE.
 */
void ca_opt_common(int c, const char *usage);

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
