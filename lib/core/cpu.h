/*
 * cpu: how fast each CPU this process may run on is right now.
 *
 * On a shared host the CPUs of one machine are not alike: on a
 * Firecracker guest with an H100 (16 CPUs, session 19) a Python loop ran
 * 1.4 to 1.75 times slower on two of them than on the rest, for seconds
 * at a time, so two processes doing the same work on different CPUs took
 * different times. ca-profile clocks a reference's and a candidate's
 * loops in two processes and compares their own work around each call;
 * it runs both on one CPU it chose here.
 */
#ifndef CA_CPU_H
#define CA_CPU_H

/* The CPUs the calling thread may run on into cpus (at most max), in order; how many (0 when unknown). */
int ca_cpu_allowed(int *cpus, int max);

/*
 * Sort cpus[0..n) fastest first. Each is timed on a short chain of
 * dependent integer operations (about 0.3 ms), the calling thread moved
 * onto it, three times in turn (the fastest kept: a busy moment only
 * lengthens one). A CPU the thread cannot be moved to goes last. The
 * thread's CPUs are as before on return.
 */
void ca_cpu_rank(int *cpus, int n);

#endif
