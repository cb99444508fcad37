/*
 * cupti: GPU kernel activity tracing (owner: B2).
 *
 * Built twice from lib/cupti.c: into libca as stubs that say tracing is
 * unavailable, and, when the Makefile finds CUPTI, with CA_HAVE_CUPTI as
 * the shared library $(BIN)/libca-cupti.so that lib/py/ca_runner.py loads
 * (ctypes) into its worker processes. ca-verify and ca-profile pass its
 * path in $CA_CUPTI_LIB. Kernels are aggregated by demangled name: launch
 * count and total device time between start and stop.
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

#endif
