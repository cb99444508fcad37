/*
 * cupti: GPU kernel activity tracing (owner: B2).
 *
 * Built twice from lib/eval/cupti.c: into libca as stubs that say tracing is
 * unavailable, and, when the Makefile finds CUPTI, with CA_HAVE_CUPTI as
 * the shared library $(BIN)/libca-cupti.so that lib/py/ca_runner.py loads
 * (ctypes) into its worker processes. ca-verify and ca-profile pass its
 * path in $CA_CUPTI_LIB. Kernels are aggregated by demangled name: launch
 * count and total device time between start and stop. The device spans of
 * kernels, memory copies and memsets are kept too, so that the worker can
 * ask, after stop, when the device was first and last busy between two
 * host moments (ca_cupti_now) on any stream: the timed call's device
 * window, which the host's launch latency before the first kernel does
 * not enter (see ca-profile(1)).
 */
#ifndef CA_CUPTI_H
#define CA_CUPTI_H

/* 0 when tracing can be used (CUPTI present and initialised), else -1. */
int ca_cupti_init(void);
/* Clear the table and enable kernel activity records. */
int ca_cupti_start(void);
/* Flush pending records and disable; the table then holds the kernels seen. */
int ca_cupti_stop(void);
int ca_cupti_count(void);
const char *ca_cupti_name(int i);
unsigned long long ca_cupti_calls(int i);
unsigned long long ca_cupti_total_ns(int i);
/* CUPTI's clock now, in ns: the clock activity records are stamped with. */
unsigned long long ca_cupti_now(void);
/*
 * The spans recorded between the last start and stop that overlap
 * [t0, t1], clipped to it: the earliest start into *first, the latest end
 * into *last. Returns how many there were (0: none, *first = *last = 0),
 * or -1 when spans were lost (more than the table holds, or no tracing).
 */
long ca_cupti_window(unsigned long long t0, unsigned long long t1, unsigned long long *first, unsigned long long *last);

#endif
