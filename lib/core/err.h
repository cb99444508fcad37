/*
 * err: diagnostics and exit statuses shared by every ca command.
 *
 * Messages go to stderr as "ca-NAME: where: reason"; data never goes there.
 * The exit statuses are defined here once and listed in every man page.
 */
#ifndef CA_ERR_H
#define CA_ERR_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
/* C++ too: the CUDA backend (lib/model/cuda) reports through ca_err_why. */
#ifdef __cplusplus
extern "C" {
#else
#include <stdnoreturn.h>
#endif

enum {
	CA_EXIT_OK = 0,        /* everything succeeded */
	CA_EXIT_NEGATIVE = 1,  /* a negative answer: a candidate failed */
	CA_EXIT_USAGE = 2,     /* bad command line */
	CA_EXIT_DATA = 3,      /* bad input data (malformed records) */
	CA_EXIT_SYSTEM = 4,    /* I/O, system or CUDA failure; worth retrying */
};

/* Set once from main(): the program name used as message prefix. */
void ca_err_init(const char *argv0);
const char *ca_err_prog(void);

/* "ca-foo: message" on stderr, one line: control characters are escaped (\n, \x1b). */
void ca_err_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same, with ": strerror(errno)" appended. */
void ca_err_warn_sys(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
__attribute__((__noreturn__)) void ca_err_die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
__attribute__((__noreturn__)) void ca_err_die_sys(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * A library call that reports a failure instead of dying writes its reason
 * into the caller's buffer of size bytes (why[CA_MODEL_WHY], why[CA_ST_WHY],
 * ...): lowercase, no trailing period, truncated to fit.
 */
void ca_err_why(char *why, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * A resident server (a step command's --serve) answers a failed request
 * and goes on to the next: while a catcher is set, ca_err_die and
 * ca_err_die_sys write their message as always, keep it for
 * ca_err_caught(), and longjmp to the catcher with the exit status they
 * would have exited with. What the failed call had allocated is leaked and
 * whatever it was changing must be thrown away by the catcher. NULL: die
 * exits again.
 */
void ca_err_catch(jmp_buf *catcher);
/* The last message a caught die wrote (without the program name). */
const char *ca_err_caught(void);

/* Allocation that cannot fail: dies with CA_EXIT_SYSTEM on exhaustion. */
void *ca_xmalloc(size_t n);
void *ca_xcalloc(size_t n, size_t size);
void *ca_xrealloc(void *p, size_t n);
char *ca_xstrdup(const char *s);
/* Free the n strings of v (NULL ones allowed), then v itself. */
void ca_free_strings(char **v, size_t n);

/*
 * Flush stdout and report failure (for example ENOSPC on /dev/full):
 * returns CA_EXIT_SYSTEM if writing failed, else the status given.
 */
int ca_err_finish(int status);

/* Combine statuses: the most serious one wins (4 > 3 > 2 > 1 > 0). */
int ca_err_worst(int a, int b);

#ifdef __cplusplus
}
#endif

#endif
