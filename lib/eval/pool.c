/*
 * pool: N threads working on queued records, results released in input
 * order (or as they finish). One lock and one condition guard the queue
 * and the list of records not yet released; see pool.h for who owns what.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "ndjson.h"
#include "pool.h"

struct item {
	jv in, out;
	jv parsed;          /* the record as read, when put with its line */
	char *text;         /* that line */
	size_t len;
	void *data;
	long index;
	int done;
	int status;
	struct item *next;  /* the pending list, input order */
	struct item *nq;    /* the work queue */
};

struct worker_arg {
	struct ca_pool *pool;
	void *context;
};

struct ca_pool {
	struct ca_pool_config cfg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct item *queue_head, *queue_tail;      /* waiting for a worker */
	int queued, busy;
	int closed;
	struct item *pending_head, *pending_tail;  /* all not yet released, in input order */
	long npending, nput;
	int releasing;                             /* a thread is in release(): the others leave it the next ones */
	int status;
	pthread_t *threads;
	struct worker_arg *args;
};

/* Unlink the next result that may be released: the oldest, or with unordered any finished one. */
static struct item *take_ready(struct ca_pool *p)
{
	struct item **link = &p->pending_head, *prev = NULL;
	while (*link && !(*link)->done) {
		if (!p->cfg.unordered)
			return NULL;
		prev = *link;
		link = &(*link)->next;
	}
	struct item *it = *link;
	if (!it)
		return NULL;
	*link = it->next;
	if (p->pending_tail == it)
		p->pending_tail = prev;
	return it;
}

/* The item whose release() runs in this thread, for ca_pool_write. */
static _Thread_local struct item *releasing_item;

int ca_pool_write(jv result)
{
	struct item *it = releasing_item;
	if (it && it->text)
		return ca_ndjson_write_spliced(result, it->parsed, it->text, it->len);
	return ca_ndjson_write(result);
}

/* Told after the state changed, the lock held: a poll loop that wakes must find it changed. */
static void changed(struct ca_pool *p)
{
	if (p->cfg.changed)
		p->cfg.changed(p->cfg.release_ctx);
}

/*
 * Release what is ready, in turn. Called with the lock held; release()
 * itself runs without it, one thread at a time: a thread that finds
 * another releasing leaves the rest to it, which looks again before it
 * stops.
 */
static void release_ready(struct ca_pool *p)
{
	while (!p->releasing) {
		struct item *it = take_ready(p);
		if (!it)
			break;
		p->releasing = 1;
		pthread_mutex_unlock(&p->lock);
		releasing_item = it;
		int status = p->cfg.release(p->cfg.release_ctx, it->out, it->status, it->data);
		releasing_item = NULL;
		jv_free(it->parsed);
		free(it->text);
		free(it);
		pthread_mutex_lock(&p->lock);
		p->releasing = 0;
		p->status = ca_err_worst(p->status, status);
		p->npending--;
		pthread_cond_broadcast(&p->cond);
		changed(p);
	}
}

static void *worker_main(void *arg)
{
	struct worker_arg *wa = arg;
	struct ca_pool *p = wa->pool;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->queue_head && !p->closed)
			pthread_cond_wait(&p->cond, &p->lock);
		struct item *it = p->queue_head;
		if (!it)
			break;
		p->queue_head = it->nq;
		if (!p->queue_head)
			p->queue_tail = NULL;
		p->queued--;
		p->busy++;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);

		int status = 0;
		jv out = p->cfg.work(wa->context, it->index, it->in, it->data, &status);
		it->in = jv_invalid();

		pthread_mutex_lock(&p->lock);
		it->out = out;
		it->status = status;
		it->done = 1;
		p->busy--;
		pthread_cond_broadcast(&p->cond);
		changed(p);
		release_ready(p);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

struct ca_pool *ca_pool_start(const struct ca_pool_config *cfg)
{
	struct ca_pool *p = ca_xcalloc(1, sizeof *p);
	p->cfg = *cfg;
	if (p->cfg.workers < 1)
		p->cfg.workers = 1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->threads = ca_xcalloc((size_t)p->cfg.workers, sizeof *p->threads);
	p->args = ca_xcalloc((size_t)p->cfg.workers, sizeof *p->args);
	for (int i = 0; i < p->cfg.workers; i++) {
		p->args[i].pool = p;
		p->args[i].context = cfg->contexts ? cfg->contexts[i] : NULL;
		if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "cannot start a worker thread");
	}
	return p;
}

static int room_locked(struct ca_pool *p)
{
	int idle = p->cfg.workers - p->busy;
	return p->queued < p->cfg.ahead + idle && (p->cfg.max_pending <= 0 || p->npending < p->cfg.max_pending);
}

int ca_pool_room(struct ca_pool *p)
{
	pthread_mutex_lock(&p->lock);
	int room = room_locked(p);
	pthread_mutex_unlock(&p->lock);
	return room;
}

long ca_pool_pending(struct ca_pool *p)
{
	pthread_mutex_lock(&p->lock);
	long n = p->npending;
	pthread_mutex_unlock(&p->lock);
	return n;
}

int ca_pool_more(struct ca_pool *p)
{
	pthread_mutex_lock(&p->lock);
	int more = !p->closed || p->queue_head;
	pthread_mutex_unlock(&p->lock);
	return more;
}

/* Append it to the pending list (the lock held). */
static void add_pending(struct ca_pool *p, struct item *it)
{
	it->index = p->nput++;
	if (p->pending_tail)
		p->pending_tail->next = it;
	else
		p->pending_head = it;
	p->pending_tail = it;
	p->npending++;
}

static struct item *new_item(jv in, void *data)
{
	struct item *it = ca_xcalloc(1, sizeof *it);
	it->in = in;
	it->out = jv_invalid();
	it->parsed = jv_invalid();
	it->data = data;
	return it;
}

static void put_item(struct ca_pool *p, struct item *it)
{
	pthread_mutex_lock(&p->lock);
	for (;;) {
		release_ready(p);
		if (room_locked(p))
			break;
		pthread_cond_wait(&p->cond, &p->lock);
	}
	add_pending(p, it);
	if (p->queue_tail)
		p->queue_tail->nq = it;
	else
		p->queue_head = it;
	p->queue_tail = it;
	p->queued++;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void ca_pool_put(struct ca_pool *p, jv record, void *data)
{
	put_item(p, new_item(record, data));
}

/* Keep the line an item's record was read from (parsed consumed, text copied). */
static struct item *with_line(struct item *it, jv parsed, const char *text, size_t len)
{
	it->parsed = parsed;
	it->text = ca_xmalloc(len + 1);
	memcpy(it->text, text, len);
	it->text[len] = '\0';
	it->len = len;
	return it;
}

void ca_pool_put_line(struct ca_pool *p, jv record, jv parsed, const char *text, size_t len, void *data)
{
	put_item(p, with_line(new_item(record, data), parsed, text, len));
}

static void put_done_item(struct ca_pool *p, struct item *it, jv result, int status)
{
	it->out = result;
	it->status = status;
	it->done = 1;
	pthread_mutex_lock(&p->lock);
	add_pending(p, it);
	release_ready(p);
	pthread_mutex_unlock(&p->lock);
}

void ca_pool_put_done(struct ca_pool *p, jv result, int status, void *data)
{
	put_done_item(p, new_item(jv_invalid(), data), result, status);
}

void ca_pool_put_done_line(struct ca_pool *p, jv result, int status, jv parsed, const char *text, size_t len,
	void *data)
{
	put_done_item(p, with_line(new_item(jv_invalid(), data), parsed, text, len), result, status);
}

void ca_pool_put_malformed(struct ca_pool *p, struct ca_ndjson_reader *r, jv why, void *data)
{
	ca_ndjson_warn(r, "%s", jv_string_value(why));
	jv err = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(why));
	jv_free(why);
	ca_pool_put_done(p, err, CA_EXIT_DATA, data);
}

int ca_pool_finish(struct ca_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->closed = 1;
	pthread_cond_broadcast(&p->cond);
	for (;;) {
		release_ready(p);
		if (!p->pending_head && !p->releasing)
			break;
		pthread_cond_wait(&p->cond, &p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < p->cfg.workers; i++)
		pthread_join(p->threads[i], NULL);
	int status = p->status;
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p->threads);
	free(p->args);
	free(p);
	return status;
}
