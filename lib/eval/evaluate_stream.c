/*
 * evaluate_stream: the record stream of ca-verify and ca-profile over a
 * pool of slots, one thread each, results written in input order (or as
 * they finish, --unordered); and one workspace DIR as a record.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "evaluate_impl.h"
#include "ndjson.h"

struct item {
	jv in, out;
	int done;
	int status;
	struct item *next;  /* pending list, input order */
	struct item *nq;    /* work queue */
};

struct pool {
	const struct ca_eval_config *cfg;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct item *queue_head, *queue_tail;  /* waiting for a slot */
	int queued;
	int closed;
	struct item *pending_head, *pending_tail;  /* all not yet written, in input order */
	int status;
	int write_failed;
};

struct thread_arg {
	struct pool *pool;
	struct slot *slot;
};

int more_records(struct slot *s)
{
	struct pool *p = s->pool;
	if (!p)
		return 1;
	pthread_mutex_lock(&p->lock);
	int more = !p->closed || p->queue_head;
	pthread_mutex_unlock(&p->lock);
	return more;
}

static void emit(struct pool *p, struct item *it)
{
	if (p->cfg->human) {
		print_human(p->cfg, it->out);
		jv_free(it->out);
		fflush(stdout);
	} else if (ca_ndjson_write(it->out) != 0) {
		p->write_failed = 1;
	}
	it->out = jv_invalid();
	p->status = ca_err_worst(p->status, it->status);
}

/* Write what can be written; called with the lock held. */
static void flush_done(struct pool *p)
{
	struct item **link = &p->pending_head, *prev = NULL;
	while (*link) {
		struct item *it = *link;
		if (!it->done) {
			if (!p->cfg->unordered)
				break;
			prev = it;
			link = &it->next;
			continue;
		}
		emit(p, it);
		*link = it->next;
		if (p->pending_tail == it)
			p->pending_tail = prev;
		free(it);
	}
}

static void *slot_thread(void *arg)
{
	struct thread_arg *ta = arg;
	struct pool *p = ta->pool;
	for (;;) {
		pthread_mutex_lock(&p->lock);
		while (!p->queue_head && !p->closed)
			pthread_cond_wait(&p->cond, &p->lock);
		struct item *it = p->queue_head;
		if (!it) {
			pthread_mutex_unlock(&p->lock);
			break;
		}
		p->queue_head = it->nq;
		if (!p->queue_head)
			p->queue_tail = NULL;
		p->queued--;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);

		int status = 0;
		jv out = evaluate_record(ta->slot, it->in, &status);
		it->in = jv_invalid();

		pthread_mutex_lock(&p->lock);
		it->out = out;
		it->status = status;
		it->done = 1;
		pthread_cond_broadcast(&p->cond);
		pthread_mutex_unlock(&p->lock);
	}
	return NULL;
}

int ca_eval_stream(const struct ca_eval_config *cfg, int nfiles, char **files)
{
	const char *server = getenv("CA_EVAL_SERVER");
	if (server && *server) {
		int st = client_stream(cfg, server, nfiles, files);
		if (st >= 0)
			return st;
	}
	char why[512];
	struct ca_eval_config none;
	if (strcmp(cfg->device, "cpu") && gpu_missing(why, sizeof why)) {
		/* Said once, at once; every record then gets it without a worker started. */
		ca_err_warn("%s", why);
		none = *cfg;
		none.no_gpu_why = why;
		cfg = &none;
	}
	int nslots = cfg->ngpus > 0 ? cfg->ngpus : 1;
	struct slot *slots = ca_xcalloc((size_t)nslots, sizeof *slots);
	struct thread_arg *args = ca_xcalloc((size_t)nslots, sizeof *args);
	struct pool p;
	memset(&p, 0, sizeof p);
	p.cfg = cfg;
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.cond, NULL);
	workers_prepare();
	for (int i = 0; i < nslots; i++) {
		slot_open(&slots[i], cfg, i);
		args[i].pool = &p;
		args[i].slot = &slots[i];
		slots[i].pool = &p;
		/* Start the reference worker and a spare candidate now: both take seconds. */
		jv fault;
		if (!cfg->no_gpu_why && worker_start(&slots[i], &slots[i].reference, 0, &fault) != 0)
			jv_free(fault);
		if (!cfg->no_gpu_why)
			spare_start(&slots[i]);
		if (pthread_create(&slots[i].thread, NULL, slot_thread, &args[i]) != 0)
			ca_err_die_sys(CA_EXIT_SYSTEM, "cannot start a worker thread");
	}
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	int queue_cap = 2 * nslots;
	for (;;) {
		jv rec;
		int kind = ca_ndjson_next(r, &rec);
		if (kind == CA_NDJSON_EOF)
			break;
		struct item *it = ca_xcalloc(1, sizeof *it);
		it->in = jv_invalid();
		it->out = jv_invalid();
		if (kind == CA_NDJSON_BAD) {
			ca_ndjson_warn(r, "%s", jv_string_value(rec));
			it->out = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(rec));
			jv_free(rec);
			it->status = CA_EXIT_DATA;
			it->done = 1;
		} else {
			it->in = rec;
		}
		pthread_mutex_lock(&p.lock);
		if (p.pending_tail)
			p.pending_tail->next = it;
		else
			p.pending_head = it;
		p.pending_tail = it;
		if (!it->done) {
			while (p.queued >= queue_cap) {
				flush_done(&p);
				if (p.queued >= queue_cap)
					pthread_cond_wait(&p.cond, &p.lock);
			}
			if (p.queue_tail)
				p.queue_tail->nq = it;
			else
				p.queue_head = it;
			p.queue_tail = it;
			p.queued++;
			pthread_cond_broadcast(&p.cond);
		}
		flush_done(&p);
		pthread_mutex_unlock(&p.lock);
	}
	pthread_mutex_lock(&p.lock);
	p.closed = 1;
	pthread_cond_broadcast(&p.cond);
	for (;;) {
		flush_done(&p);
		if (!p.pending_head)
			break;
		pthread_cond_wait(&p.cond, &p.lock);
	}
	pthread_mutex_unlock(&p.lock);
	for (int i = 0; i < nslots; i++) {
		pthread_join(slots[i].thread, NULL);
		slot_close(&slots[i]);
	}
	int status = ca_err_worst(p.status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	free(slots);
	free(args);
	if (p.write_failed)
		status = CA_EXIT_SYSTEM;
	return ca_err_finish(status);
}

int ca_eval_directory(const struct ca_eval_config *cfg, const char *dir)
{
	char path[PATHLEN], abs[PATH_MAX];
	if (!realpath(dir, abs)) {
		ca_err_warn_sys("%s", dir);
		return CA_EXIT_USAGE;
	}
	snprintf(path, sizeof path, "%s/model.py", abs);
	size_t len;
	char *code = eval_read_file(path, 16 << 20, &len);
	if (!code) {
		ca_err_warn("%s: no model.py (the reference task) in this directory", dir);
		return CA_EXIT_USAGE;
	}
	snprintf(path, sizeof path, "%s/model_new.py", abs);
	if (access(path, R_OK) != 0) {
		free(code);
		ca_err_warn("%s: no model_new.py (the candidate) in this directory", dir);
		return CA_EXIT_USAGE;
	}
	const char *base = strrchr(abs, '/') ? strrchr(abs, '/') + 1 : abs;
	jv rec = jv_object();
	rec = set_str(rec, "id", base);
	rec = set_str(rec, "code", code);
	rec = jv_object_set(rec, jv_string("candidate"), set_str(jv_object(), "dir", abs));
	free(code);
	/* Run it through the same loop via a temporary file holding the one record. */
	char tmp[] = "/tmp/ca-adhoc.XXXXXX";
	int fd = mkstemp(tmp);
	if (fd < 0) {
		jv_free(rec);
		ca_err_warn_sys("cannot create a temporary file");
		return CA_EXIT_SYSTEM;
	}
	jv text = jv_dump_string(rec, 0);
	FILE *fp = fdopen(fd, "w");
	fprintf(fp, "%s\n", jv_string_value(text));
	fclose(fp);
	jv_free(text);
	char *files[] = {tmp};
	struct ca_eval_config one = *cfg;
	one.adhoc = 1;
	one.ngpus = cfg->ngpus > 1 ? 1 : cfg->ngpus;
	int status = ca_eval_stream(&one, 1, files);
	unlink(tmp);
	return status;
}
