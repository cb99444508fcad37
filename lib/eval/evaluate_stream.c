/*
 * evaluate_stream: the record stream of ca-verify and ca-profile over the
 * pool (lib/pool), one slot per thread, results written in input order (or
 * as they finish, --unordered); and one workspace DIR as a record.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "evaluate_impl.h"
#include "ndjson.h"
#include "pool.h"

/* What the pool's release writes with: the run's options, and whether stdout failed. */
struct output {
	const struct ca_eval_config *cfg;
	int write_failed;
};

int more_records(struct slot *s)
{
	return s->pool ? ca_pool_more(s->pool) : 1;
}

static jv score(void *context, long index, jv record, void *data, int *status)
{
	return evaluate_record(context, record, status);
}

static int emit(void *ctx, jv result, int status, void *data)
{
	struct output *o = ctx;
	if (o->cfg->human) {
		print_human(o->cfg, result);
		jv_free(result);
		fflush(stdout);
	} else if (ca_pool_write(result) != 0) {
		o->write_failed = 1;
	}
	return status;
}

/*
 * The slots, each with its reference worker and a spare candidate started
 * now (both take seconds), ready for the pool's threads.
 */
static struct slot *slots_open(const struct ca_eval_config *cfg, int nslots)
{
	struct slot *slots = ca_xcalloc((size_t)nslots, sizeof *slots);
	workers_prepare();
	for (int i = 0; i < nslots; i++) {
		slot_open(&slots[i], cfg, i);
		jv fault;
		if (!cfg->no_gpu_why && worker_start(&slots[i], &slots[i].reference, 0, &fault) != 0)
			jv_free(fault);
		if (!cfg->no_gpu_why)
			spare_start(&slots[i]);
	}
	return slots;
}

/*
 * Queue every record read to the pool, with its line (the fields the
 * evaluation does not touch are written as they came); a malformed line
 * is an error record in its place.
 */
static void read_records(struct ca_pool *pool, struct ca_ndjson_reader *r)
{
	for (;;) {
		jv rec;
		int kind = ca_ndjson_next(r, &rec);
		if (kind == CA_NDJSON_EOF)
			break;
		if (kind == CA_NDJSON_BAD) {
			ca_pool_put_malformed(pool, r, rec, NULL);
		} else {
			size_t len;
			const char *text = ca_ndjson_text(r, &len);
			ca_pool_put_line(pool, jv_copy(rec), rec, text, len, NULL);
		}
	}
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
	struct slot *slots = slots_open(cfg, nslots);
	void **contexts = ca_xcalloc((size_t)nslots, sizeof *contexts);
	for (int i = 0; i < nslots; i++)
		contexts[i] = &slots[i];
	struct output out = {cfg, 0};
	struct ca_pool_config pc = {
		.workers = nslots, .contexts = contexts, .work = score, .release = emit, .release_ctx = &out,
		.unordered = cfg->unordered, .ahead = 2 * nslots,
	};
	struct ca_pool *pool = ca_pool_start(&pc);
	for (int i = 0; i < nslots; i++)
		slots[i].pool = pool;
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	read_records(pool, r);
	int status = ca_pool_finish(pool);
	for (int i = 0; i < nslots; i++)
		slot_close(&slots[i]);
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	free(slots);
	free(contexts);
	if (out.write_failed)
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
