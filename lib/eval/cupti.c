/* cupti: see cupti.h. Without CA_HAVE_CUPTI every call reports "unavailable". */
#include <stdlib.h>
#include <string.h>

#include "cupti.h"

#ifndef CA_HAVE_CUPTI

int ca_cupti_init(void) { return -1; }
int ca_cupti_start(void) { return -1; }
int ca_cupti_stop(void) { return -1; }
int ca_cupti_count(void) { return 0; }
const char *ca_cupti_name(int i) { (void)i; return ""; }
unsigned long long ca_cupti_calls(int i) { (void)i; return 0; }
unsigned long long ca_cupti_total_ns(int i) { (void)i; return 0; }
unsigned long long ca_cupti_now(void) { return 0; }
long ca_cupti_window(unsigned long long t0, unsigned long long t1, unsigned long long *first, unsigned long long *last)
{
	(void)t0; (void)t1;
	*first = *last = 0;
	return -1;
}

#else

#include <pthread.h>
#include <stdint.h>
#include <cupti.h>

#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_record;
#else
typedef CUpti_ActivityKernel9 kernel_record;
#endif

/* From libstdc++ (linked in): demangle C++ kernel names. */
extern char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

enum { BUFFER_SIZE = 8 << 20, MAX_KERNELS = 4096 };
/* Device spans kept per start/stop: 16 bytes each, at most 64 MiB. */
enum { MAX_SPANS = 1 << 22 };

struct entry {
	char *name;
	unsigned long long calls, ns;
};

static struct entry table[MAX_KERNELS];
static int count;
static int ready;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

struct span {
	unsigned long long start, end;
};

static struct span *spans;
static size_t nspans, spans_cap;
static int spans_lost;

/* Keep one device span; called with lock held. */
static void keep_span(unsigned long long start, unsigned long long end)
{
	if (end < start || spans_lost)
		return;
	if (nspans == spans_cap) {
		size_t cap = spans_cap ? 2 * spans_cap : 4096;
		struct span *grown = cap <= MAX_SPANS ? realloc(spans, cap * sizeof *grown) : NULL;
		if (!grown) {
			spans_lost = 1;
			return;
		}
		spans = grown;
		spans_cap = cap;
	}
	spans[nspans++] = (struct span){start, end};
}

static void note(const char *mangled, unsigned long long start, unsigned long long end)
{
	unsigned long long ns = end > start ? end - start : 0;
	pthread_mutex_lock(&lock);
	keep_span(start, end);
	for (int i = 0; i < count; i++) {
		if (!strcmp(table[i].name, mangled)) {
			table[i].calls++;
			table[i].ns += ns;
			pthread_mutex_unlock(&lock);
			return;
		}
	}
	if (count < MAX_KERNELS) {
		table[count].name = strdup(mangled);
		table[count].calls = 1;
		table[count].ns = ns;
		if (table[count].name)
			count++;
	}
	pthread_mutex_unlock(&lock);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	*buffer = aligned_alloc(8, BUFFER_SIZE);
	*size = *buffer ? BUFFER_SIZE : 0;
	*max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
	(void)ctx; (void)stream; (void)size;
	CUpti_Activity *record = NULL;
	while (valid && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
		unsigned long long start, end;
		if (record->kind == CUPTI_ACTIVITY_KIND_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
			const kernel_record *k = (const kernel_record *)record;
			note(k->name ? k->name : "?", k->start, k->end);
			continue;
		} else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
			/* Every version of the record begins as the first did: kind, kinds, flags, bytes, start, end. */
			const CUpti_ActivityMemcpy *m = (const CUpti_ActivityMemcpy *)record;
			start = m->start;
			end = m->end;
		} else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
			const CUpti_ActivityMemset *m = (const CUpti_ActivityMemset *)record;
			start = m->start;
			end = m->end;
		} else {
			continue;
		}
		pthread_mutex_lock(&lock);
		keep_span(start, end);
		pthread_mutex_unlock(&lock);
	}
	free(buffer);
}

int ca_cupti_init(void)
{
	if (ready)
		return 0;
	if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS)
		return -1;
	ready = 1;
	return 0;
}

int ca_cupti_start(void)
{
	if (!ready && ca_cupti_init() != 0)
		return -1;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < count; i++)
		free(table[i].name);
	count = 0;
	nspans = 0;
	spans_lost = 0;
	pthread_mutex_unlock(&lock);
	if (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
		return -1;
	/* Copies and memsets only widen the windows; without them, kernels alone. */
	cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
	cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
	return 0;
}

int ca_cupti_stop(void)
{
	if (!ready)
		return -1;
	cuptiActivityFlushAll(1);
	cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
	cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
	cuptiActivityFlushAll(1);
	/* Demangle once, at the end, outside the callbacks. */
	pthread_mutex_lock(&lock);
	for (int i = 0; i < count; i++) {
		int status = -1;
		char *plain = __cxa_demangle(table[i].name, NULL, NULL, &status);
		if (plain && status == 0) {
			free(table[i].name);
			table[i].name = plain;
		} else {
			free(plain);
		}
	}
	pthread_mutex_unlock(&lock);
	return 0;
}

int ca_cupti_count(void) { return count; }
const char *ca_cupti_name(int i) { return i >= 0 && i < count ? table[i].name : ""; }
unsigned long long ca_cupti_calls(int i) { return i >= 0 && i < count ? table[i].calls : 0; }
unsigned long long ca_cupti_total_ns(int i) { return i >= 0 && i < count ? table[i].ns : 0; }

unsigned long long ca_cupti_now(void)
{
	uint64_t t = 0;
	return cuptiGetTimestamp(&t) == CUPTI_SUCCESS ? (unsigned long long)t : 0;
}

long ca_cupti_window(unsigned long long t0, unsigned long long t1, unsigned long long *first, unsigned long long *last)
{
	long n = 0;
	unsigned long long lo = 0, hi = 0;
	pthread_mutex_lock(&lock);
	if (!ready || spans_lost) {
		pthread_mutex_unlock(&lock);
		*first = *last = 0;
		return -1;
	}
	for (size_t i = 0; i < nspans; i++) {
		if (spans[i].end <= t0 || spans[i].start >= t1)
			continue;
		unsigned long long a = spans[i].start > t0 ? spans[i].start : t0;
		unsigned long long b = spans[i].end < t1 ? spans[i].end : t1;
		if (!n || a < lo)
			lo = a;
		if (!n || b > hi)
			hi = b;
		n++;
	}
	pthread_mutex_unlock(&lock);
	*first = lo;
	*last = hi;
	return n;
}

#endif
