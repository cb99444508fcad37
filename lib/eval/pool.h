/*
 * pool: the one worker pool of the commands that work on records in
 * parallel (ca-verify and ca-profile, ca-filter, ca-agent): N threads,
 * each with a context of its own (a GPU slot, a warm Python worker, a
 * task directory); records queued as they are read; results released in
 * input order, or as they finish when asked; the statuses folded into the
 * worst.
 *
 * Ownership: a record put in the pool belongs to it until work() returns
 * its result, which belongs to the pool until release() takes it. work()
 * runs in the pool's threads, one record per thread at a time, with the
 * thread's own context; release() runs in whichever thread finds the next
 * result ready (a worker that finished, or the one that puts or waits),
 * one call at a time and never under the pool's lock, so a slow output
 * holds no worker back from its next record.
 *
 *   struct ca_pool_config pc = {.workers = n, .contexts = ctx, .work = score,
 *                               .release = write_out, .ahead = 2 * n};
 *   struct ca_pool *p = ca_pool_start(&pc);
 *   while (ca_ndjson_next(r, &rec) != CA_NDJSON_EOF)
 *           ca_pool_put(p, rec, NULL);
 *   int status = ca_pool_finish(p);
 */
#ifndef CA_POOL_H
#define CA_POOL_H

#include <jv.h>

/*
 * One record's work in worker thread context (of contexts[i]): returns the
 * result (the record is consumed) and sets *status. index counts the
 * records put, from 0; data is what ca_pool_put was given with it.
 */
typedef jv (*ca_pool_work_fn)(void *context, long index, jv record, void *data, int *status);

/*
 * Take a finished result (consumed) with the status its work set; returns
 * the status to fold into the run's (a write error's, say).
 */
typedef int (*ca_pool_release_fn)(void *ctx, jv result, int status, void *data);

struct ca_pool_config {
	int workers;                 /* threads, at least 1 */
	void **contexts;             /* contexts[i]: thread i's (may be NULL: all NULL) */
	ca_pool_work_fn work;
	ca_pool_release_fn release;
	void *release_ctx;
	void (*changed)(void *ctx);  /* optional: a record finished or was released (wakes a poll loop);
	                                called under the pool's lock, so it must not call the pool */
	int unordered;               /* release results as they finish, not in input order */
	int ahead;                   /* records queued beyond the idle workers before a put waits */
	long max_pending;            /* records held (queued, worked on, waiting for release) before a put waits; 0: no bound */
};

/* Start the threads; exits (CA_EXIT_SYSTEM) when a thread cannot be started. */
struct ca_pool *ca_pool_start(const struct ca_pool_config *cfg);

/* Queue a record (consumed) for work, after waiting for room (see ca_pool_room). */
void ca_pool_put(struct ca_pool *p, jv record, void *data);

/*
 * ca_pool_put and ca_pool_put_done for a record read from a line: parsed
 * (consumed) is what the reader made of the line text[0..len) (copied), so
 * that release() can write the result with ca_pool_write, the fields still
 * as parsed going out byte for byte as they were read.
 */
void ca_pool_put_line(struct ca_pool *p, jv record, jv parsed, const char *text, size_t len, void *data);
void ca_pool_put_done_line(struct ca_pool *p, jv result, int status, jv parsed, const char *text, size_t len,
	void *data);

/*
 * Inside release(): write result (consumed) as one record line; for a
 * record put with its line, the fields it still holds as parsed are
 * copied from that line (ca_ndjson_write_spliced). 0, or -1 when stdout
 * failed.
 */
int ca_pool_write(jv result);

/* Place a result that needs no work (an error record) in its turn among the others. */
void ca_pool_put_done(struct ca_pool *p, jv result, int status, void *data);

/*
 * A malformed line the reader r just gave (why consumed, as ca_ndjson_next
 * returned it): told on stderr at its position, and an error record in
 * its turn, with the status of bad input data.
 */
struct ca_ndjson_reader;
void ca_pool_put_malformed(struct ca_pool *p, struct ca_ndjson_reader *r, jv why, void *data);

/* 1 when ca_pool_put would not wait now. */
int ca_pool_room(struct ca_pool *p);

/* Records put and not yet released. */
long ca_pool_pending(struct ca_pool *p);

/* Whether a worker may still get a record: the input is open or records are queued. */
int ca_pool_more(struct ca_pool *p);

/*
 * End of input: wait until every record is worked on and released, stop
 * the threads and free the pool. Returns the worst status released.
 */
int ca_pool_finish(struct ca_pool *p);

#endif
