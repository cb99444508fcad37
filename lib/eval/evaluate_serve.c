/*
 * evaluate_serve: ca-verify --serve SOCKET keeps the slots warm and
 * scores the records of the commands that connect ($CA_EVAL_SERVER), and
 * the client side those commands use.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "evaluate_impl.h"
#include "json.h"
#include "ndjson.h"
#include "proc.h"

/*
 * ca-verify --serve SOCKET (or ca-profile --serve) keeps the slots of this
 * engine warm (reference workers and spare candidates up) and scores the
 * records of any command that finds SOCKET in $CA_EVAL_SERVER, so a single
 * record no longer pays the Python, torch and CUDA start-ups. Protocol, one
 * JSON object per line over a Unix socket (0600, in a directory only its
 * owner may enter, so no candidate can reach it):
 *   client: {"mode": "verify"|"profile", "opts": {...}}   (see conn_options)
 *   server: {"ok": true} or {"ok": false, "error": "..."}  (then the client works alone)
 *   client: a record; server: {"status": N, "record": {...}}; and so on until EOF.
 */

struct server {
	const struct ca_eval_config *base;
	struct slot *slots;
	int *busy;
	int nslots;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int conns;
	double last;
};

static volatile sig_atomic_t serve_stop;

static void serve_signal(int sig)
{
	(void)sig;
	serve_stop = 1;
}

/* The options a client sends (and the server checks against its own). */
static jv conn_options(const struct ca_eval_config *c)
{
	jv o = jv_object();
	o = set_str(o, "device", c->device);
	o = jv_object_set(o, jv_string("sandbox"), jv_bool(c->sandbox));
	o = jv_object_set(o, jv_string("sandbox_user"), c->sandbox_user ? jv_string(c->sandbox_user) : jv_null());
	o = set_num(o, "checks", c->checks);
	o = set_num(o, "robust", c->robust);
	o = set_num(o, "shapes", c->shapes);
	o = set_num(o, "seed", (double)c->seed);
	o = jv_object_set(o, jv_string("seed_set"), jv_bool(c->seed_set));
	o = set_num(o, "atol", c->tol.atol);
	o = set_num(o, "rtol", c->tol.rtol);
	o = jv_object_set(o, jv_string("allow_torch"), jv_bool(c->allow_torch));
	o = set_num(o, "timeout_s", c->timeout_s);
	o = jv_object_set(o, jv_string("arch"), c->arch ? jv_string(c->arch) : jv_null());
	o = jv_object_set(o, jv_string("build_cache"), c->build_cache ? jv_string(c->build_cache) : jv_null());
	o = set_num(o, "warmup", c->warmup);
	o = set_num(o, "iters", c->iters);
	o = set_num(o, "sets", c->sets);
	o = set_num(o, "keep", c->keep);
	o = jv_object_set(o, jv_string("compile_mode"), c->compile_mode ? jv_string(c->compile_mode) : jv_null());
	o = jv_object_set(o, jv_string("no_compile"), jv_bool(c->no_compile));
	o = jv_object_set(o, jv_string("no_cache"), jv_bool(c->no_cache));
	o = set_num(o, "top", c->top);
	o = jv_object_set(o, jv_string("also_verify"), jv_bool(c->also_verify));
	return o;
}

/* A string option of the client's (kept in store, freed with the connection), or NULL. */
static const char *conn_str(jv opts, const char *key, char **store)
{
	char *v = ca_json_strdup(opts, key);
	*store = v;
	return v;
}

struct conn {
	struct server *sv;
	int fd;
};

/* Write v (borrowed) as a line to a socket; -1 when the peer is gone. */
static int write_line(int fd, jv v)
{
	jv text = jv_dump_string(jv_copy(v), 0);
	int rc = 0;
	const char *p = jv_string_value(text);
	size_t n = (size_t)jv_string_length_bytes(jv_copy(text)), off = 0;
	while (rc == 0 && off <= n) {
		const char *src = off < n ? p + off : "\n";
		size_t len = off < n ? n - off : 1;
		ssize_t w = send(fd, src, len, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			rc = -1;
		else
			off += (size_t)w;
	}
	jv_free(text);
	return rc;
}

struct linebuf {
	char *data;
	size_t len, cap;
};

static void linebuf_append(struct linebuf *b, const char *data, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->data = ca_xrealloc(b->data, b->cap);
	}
	memcpy(b->data + b->len, data, n);
	b->len += n;
}

/* Read a line from a socket (malloc'd, without the newline), NULL at EOF. */
static char *read_line(int fd, struct linebuf *b, size_t *pos)
{
	for (;;) {
		char *nl = b->data ? memchr(b->data + *pos, '\n', b->len - *pos) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - (b->data + *pos));
			char *line = ca_xmalloc(n + 1);
			memcpy(line, b->data + *pos, n);
			line[n] = '\0';
			*pos += n + 1;
			return line;
		}
		if (*pos > 0) {
			memmove(b->data, b->data + *pos, b->len - *pos);
			b->len -= *pos;
			*pos = 0;
		}
		char chunk[65536];
		ssize_t got = recv(fd, chunk, sizeof chunk, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return NULL;
		linebuf_append(b, chunk, (size_t)got);
	}
}

/* Why a client's request (its opts, borrowed, and mode) cannot be served, or NULL. */
static const char *conn_refusal(const struct server *sv, jv opts, const char *mode)
{
	const char *why = NULL;
	if (jv_get_kind(opts) != JV_KIND_OBJECT || !mode || (strcmp(mode, "verify") && strcmp(mode, "profile")))
		return "bad request";
	/* What the workers were started with must be what the client asks for. */
	jv mine = conn_options(sv->base);
	const char *fixed[] = {"device", "sandbox", "sandbox_user", NULL};
	for (int i = 0; fixed[i] && !why; i++) {
		jv a = ca_json_get(mine, fixed[i]), b = ca_json_get(opts, fixed[i]);
		if (!jv_equal(a, b))
			why = "the server's workers were started with other device or sandbox options";
	}
	double t = 0;
	ca_json_number(opts, "timeout_s", &t);
	if (!why && t > sv->base->timeout_s)
		why = "a longer --timeout than the server's";
	jv_free(mine);
	return why;
}

/*
 * The client's options (borrowed) and mode over the server's, in cfg;
 * its strings kept in strs[0..3], freed with the connection.
 */
static void conn_config(struct ca_eval_config *cfg, jv opts, const char *mode, char *strs[4])
{
	double v;
	cfg->mode = !strcmp(mode, "verify") ? CA_EVAL_VERIFY : CA_EVAL_PROFILE;
	cfg->human = 0;
	cfg->verbose = 0;
	/*
	 * No workers are started from this thread: a worker dies with the
	 * thread that started it (PR_SET_PDEATHSIG), and this one ends with
	 * the connection. The server's main thread keeps the spares and the
	 * reference up (serve_refill).
	 */
	cfg->adhoc = 1;
	if (ca_json_number(opts, "checks", &v) == 1) cfg->checks = (int)v;
	if (ca_json_number(opts, "robust", &v) == 1) cfg->robust = (int)v;
	if (ca_json_number(opts, "shapes", &v) == 1) cfg->shapes = (int)v;
	if (ca_json_number(opts, "seed", &v) == 1) cfg->seed = (unsigned long long)v;
	cfg->seed_set = ca_json_bool(opts, "seed_set") == 1;
	if (ca_json_number(opts, "atol", &v) == 1) cfg->tol.atol = v;
	if (ca_json_number(opts, "rtol", &v) == 1) cfg->tol.rtol = v;
	cfg->allow_torch = ca_json_bool(opts, "allow_torch") == 1;
	if (ca_json_number(opts, "timeout_s", &v) == 1) cfg->timeout_s = v;
	cfg->arch = conn_str(opts, "arch", &strs[0]);
	cfg->build_cache = conn_str(opts, "build_cache", &strs[1]);
	if (ca_json_number(opts, "warmup", &v) == 1) cfg->warmup = (int)v;
	if (ca_json_number(opts, "iters", &v) == 1) cfg->iters = (int)v;
	if (ca_json_number(opts, "sets", &v) == 1) cfg->sets = (int)v;
	if (ca_json_number(opts, "keep", &v) == 1) cfg->keep = (int)v;
	cfg->compile_mode = conn_str(opts, "compile_mode", &strs[2]);
	cfg->no_compile = ca_json_bool(opts, "no_compile") == 1;
	cfg->no_cache = ca_json_bool(opts, "no_cache") == 1;
	if (ca_json_number(opts, "top", &v) == 1) cfg->top = (int)v;
	cfg->also_verify = ca_json_bool(opts, "also_verify") == 1;
}

/* One record (consumed) scored on the first idle slot, under the client's cfg. */
static jv conn_evaluate(struct server *sv, const struct ca_eval_config *cfg, jv rec, int *status)
{
	pthread_mutex_lock(&sv->lock);
	int i;
	for (;;) {
		for (i = 0; i < sv->nslots && sv->busy[i]; i++)
			;
		if (i < sv->nslots)
			break;
		pthread_cond_wait(&sv->cond, &sv->lock);
	}
	sv->busy[i] = 1;
	pthread_mutex_unlock(&sv->lock);
	struct slot *s = &sv->slots[i];
	s->cfg = cfg;
	jv out = evaluate_record(s, rec, status);
	s->cfg = sv->base;
	pthread_mutex_lock(&sv->lock);
	sv->busy[i] = 0;
	sv->last = ca_proc_now();
	pthread_cond_broadcast(&sv->cond);
	pthread_mutex_unlock(&sv->lock);
	return out;
}

static void *conn_thread(void *arg)
{
	struct conn *cn = arg;
	struct server *sv = cn->sv;
	struct linebuf buf = {0};
	size_t pos = 0;
	char *strs[4] = {NULL, NULL, NULL, NULL};
	struct ca_eval_config cfg = *sv->base;
	char *line = read_line(cn->fd, &buf, &pos);
	jv head = line ? jv_parse(line) : jv_invalid();
	free(line);
	jv opts = jv_get_kind(head) == JV_KIND_OBJECT ? ca_json_get(head, "opts") : jv_invalid();
	char *mode = jv_get_kind(head) == JV_KIND_OBJECT ? ca_json_strdup(head, "mode") : NULL;
	const char *why = conn_refusal(sv, opts, mode);
	if (!why)
		conn_config(&cfg, opts, mode, strs);
	free(mode);
	jv_free(opts);
	jv_free(head);
	jv hello = jv_object_set(jv_object(), jv_string("ok"), jv_bool(why == NULL));
	if (why)
		hello = set_str(hello, "error", why);
	int alive = write_line(cn->fd, hello) == 0 && !why;
	jv_free(hello);
	while (alive && (line = read_line(cn->fd, &buf, &pos))) {
		jv rec = jv_parse(line);
		free(line);
		int status = 0;
		jv out;
		if (jv_get_kind(rec) != JV_KIND_OBJECT) {
			jv_free(rec);
			out = ca_ndjson_error_record("server", 0, "not a JSON object");
			status = CA_EXIT_DATA;
		} else {
			out = conn_evaluate(sv, &cfg, rec, &status);
		}
		jv reply = jv_object_set(jv_object(), jv_string("status"), jv_number(status));
		reply = jv_object_set(reply, jv_string("record"), out);
		alive = write_line(cn->fd, reply) == 0;
		jv_free(reply);
	}
	close(cn->fd);
	free(buf.data);
	for (int i = 0; i < 4; i++)
		free(strs[i]);
	pthread_mutex_lock(&sv->lock);
	sv->conns--;
	sv->last = ca_proc_now();
	pthread_mutex_unlock(&sv->lock);
	free(cn);
	return NULL;
}

/* From the server's main thread: idle slots get their reference worker and spares back. */
static void serve_refill(struct server *sv)
{
	for (int i = 0; i < sv->nslots; i++) {
		pthread_mutex_lock(&sv->lock);
		int mine = !sv->busy[i];
		if (mine)
			sv->busy[i] = 1;
		pthread_mutex_unlock(&sv->lock);
		if (!mine)
			continue;
		struct slot *s = &sv->slots[i];
		if (s->reference.run.running && ca_proc_wait_exit(&s->reference.run.co.proc, 0))
			worker_stop(&s->reference, 0);
		if (!s->reference.run.running) {
			jv fault;
			worker_stop(&s->reference, 0);
			memset(&s->reference, 0, sizeof s->reference);
			s->reference.run.hello = jv_invalid();
			if (worker_start(s, &s->reference, 0, &fault) != 0)
				jv_free(fault);
		}
		for (int k = 0; k < s->nspares; k++)
			if (s->spare[k].run.running && !jv_is_valid(s->spare[k].run.hello) && ca_proc_wait_exit(&s->spare[k].run.co.proc, 0))
				worker_stop(&s->spare[k], 0);
		spare_start(s);
		pthread_mutex_lock(&sv->lock);
		sv->busy[i] = 0;
		pthread_cond_broadcast(&sv->cond);
		pthread_mutex_unlock(&sv->lock);
	}
}

/*
 * The server's socket at path, listening: in a directory that is ours and
 * closed to others. The descriptor, or -1 with *status the exit status
 * and the diagnostic printed.
 */
static int serve_listen(const char *path, int *status)
{
	struct sockaddr_un addr;
	memset(&addr, 0, sizeof addr);
	addr.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof addr.sun_path) {
		ca_err_warn("%s: socket path too long", path);
		*status = CA_EXIT_USAGE;
		return -1;
	}
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	/* Its directory must be ours and closed to others: candidates must not reach the socket. */
	char dir[PATHLEN];
	snprintf(dir, sizeof dir, "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(dir, sizeof dir, ".");
	struct stat st;
	if (stat(*dir ? dir : "/", &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
		ca_err_warn("%s: the socket's directory must be yours and closed to others (chmod 700)", *dir ? dir : "/");
		*status = CA_EXIT_USAGE;
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ca_err_warn_sys("socket");
		*status = CA_EXIT_SYSTEM;
		return -1;
	}
	unlink(path);
	if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || chmod(path, 0600) != 0 || listen(fd, 16) != 0) {
		ca_err_warn_sys("%s", path);
		close(fd);
		*status = CA_EXIT_SYSTEM;
		return -1;
	}
	return fd;
}

int ca_eval_serve(const struct ca_eval_config *cfg, const char *path, double idle_s)
{
	int status;
	int fd = serve_listen(path, &status);
	if (fd < 0)
		return status;
	/* A server answers single records in bursts: more spares kept started (see slot_open). */
	struct ca_eval_config *mine = ca_xmalloc(sizeof *mine);
	*mine = *cfg;
	mine->serving = 1;
	cfg = mine;
	struct server sv;
	memset(&sv, 0, sizeof sv);
	sv.base = cfg;
	sv.nslots = cfg->ngpus > 0 ? cfg->ngpus : 1;
	sv.slots = ca_xcalloc((size_t)sv.nslots, sizeof *sv.slots);
	sv.busy = ca_xcalloc((size_t)sv.nslots, sizeof *sv.busy);
	pthread_mutex_init(&sv.lock, NULL);
	pthread_cond_init(&sv.cond, NULL);
	workers_prepare();
	for (int i = 0; i < sv.nslots; i++) {
		slot_open(&sv.slots[i], cfg, i);
		jv fault;
		if (worker_start(&sv.slots[i], &sv.slots[i].reference, 0, &fault) != 0)
			jv_free(fault);
		spare_start(&sv.slots[i]);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = serve_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sv.last = ca_proc_now();
	if (cfg->verbose)
		ca_err_warn("serving on %s (%d slot%s)", path, sv.nslots, sv.nslots == 1 ? "" : "s");
	while (!serve_stop) {
		serve_refill(&sv);
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = poll(&pfd, 1, 100);
		if (r > 0) {
			int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
			if (c < 0)
				continue;
			struct conn *cn = ca_xmalloc(sizeof *cn);
			cn->sv = &sv;
			cn->fd = c;
			pthread_t t;
			pthread_mutex_lock(&sv.lock);
			sv.conns++;
			pthread_mutex_unlock(&sv.lock);
			if (pthread_create(&t, NULL, conn_thread, cn) != 0) {
				close(c);
				free(cn);
				pthread_mutex_lock(&sv.lock);
				sv.conns--;
				pthread_mutex_unlock(&sv.lock);
			} else {
				pthread_detach(t);
			}
			continue;
		}
		pthread_mutex_lock(&sv.lock);
		int idle = sv.conns == 0 && idle_s > 0 && ca_proc_now() - sv.last > idle_s;
		pthread_mutex_unlock(&sv.lock);
		if (idle)
			break;
	}
	close(fd);
	unlink(path);
	/* Connections still running hold slots: wait for them a while, then go. */
	double until = ca_proc_now() + 5;
	for (;;) {
		pthread_mutex_lock(&sv.lock);
		int conns = sv.conns;
		pthread_mutex_unlock(&sv.lock);
		if (conns == 0 || ca_proc_now() > until)
			break;
		struct timespec ts = {0, 50000000};
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < sv.nslots; i++)
		slot_close(&sv.slots[i]);
	free(sv.slots);
	free(sv.busy);
	free(mine);
	return ca_err_finish(0);
}

/*
 * Score the records through a server; -1 (nothing written) when there is
 * none to use, so the caller works alone.
 */
int client_stream(const struct ca_eval_config *cfg, const char *path, int nfiles, char **files)
{
	struct sockaddr_un addr;
	memset(&addr, 0, sizeof addr);
	addr.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof addr.sun_path)
		return -1;
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
		if (cfg->verbose)
			ca_err_warn_sys("no evaluation server at %s; working alone", path);
		close(fd);
		return -1;
	}
	jv head = set_str(jv_object(), "mode", cfg->mode == CA_EVAL_VERIFY ? "verify" : "profile");
	head = jv_object_set(head, jv_string("opts"), conn_options(cfg));
	struct linebuf buf = {0};
	size_t pos = 0;
	char *line = write_line(fd, head) == 0 ? read_line(fd, &buf, &pos) : NULL;
	jv_free(head);
	jv hello = line ? jv_parse(line) : jv_invalid();
	free(line);
	if (jv_get_kind(hello) != JV_KIND_OBJECT || ca_json_bool(hello, "ok") != 1) {
		if (cfg->verbose) {
			char *err = jv_get_kind(hello) == JV_KIND_OBJECT ? ca_json_strdup(hello, "error") : NULL;
			ca_err_warn("the evaluation server at %s declined (%s); working alone", path, err ? err : "no answer");
			free(err);
		}
		jv_free(hello);
		free(buf.data);
		close(fd);
		return -1;
	}
	jv_free(hello);
	if (cfg->verbose)
		ca_err_warn("scoring through the evaluation server at %s", path);
	struct ca_ndjson_reader *r = ca_ndjson_open(nfiles, files);
	int status = 0, lost = 0;
	for (;;) {
		jv rec, out;
		int kind = ca_ndjson_next(r, &rec);
		if (kind == CA_NDJSON_EOF)
			break;
		int st = 0;
		size_t len = 0;
		const char *text = ca_ndjson_text(r, &len);
		if (kind == CA_NDJSON_BAD) {
			ca_ndjson_warn(r, "%s", jv_string_value(rec));
			out = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), jv_string_value(rec));
			jv_free(rec);
			rec = jv_invalid();
			st = CA_EXIT_DATA;
		} else {
			jv reply = jv_invalid();
			if (!lost && write_line(fd, rec) == 0 && (line = read_line(fd, &buf, &pos))) {
				reply = jv_parse(line);
				free(line);
			}
			jv got = jv_get_kind(reply) == JV_KIND_OBJECT ? ca_json_get(reply, "record") : jv_invalid();
			double v = 0;
			if (jv_get_kind(got) == JV_KIND_OBJECT) {
				ca_json_number(reply, "status", &v);
				st = (int)v;
				out = got;
			} else {
				jv_free(got);
				lost = 1;
				ca_err_warn("the evaluation server at %s went away", path);
				out = ca_ndjson_error_record(ca_ndjson_name(r), ca_ndjson_line(r), "the evaluation server went away");
				st = CA_EXIT_SYSTEM;
			}
			jv_free(reply);
		}
		if (cfg->verbose) {
			const char *field = cfg->mode == CA_EVAL_VERIFY ? "verify" : "profile";
			jv res = ca_json_get(out, field);
			if (jv_get_kind(res) == JV_KIND_OBJECT) {
				jv ph = ca_json_get(res, "phases");
				double secs = 0;
				ca_json_number(res, "seconds", &secs);
				if (jv_get_kind(ph) == JV_KIND_OBJECT)
					print_phases(out, ph, secs);
				jv_free(ph);
			}
			jv_free(res);
		}
		if (cfg->human) {
			print_human(cfg, out);
			jv_free(out);
			fflush(stdout);
		} else if (ca_ndjson_write_spliced(ca_ndjson_keep_equal(out, rec), rec, text, len) != 0) {
			/* The server's record, with the fields it left as ours written as they came. */
			status = CA_EXIT_SYSTEM;
		}
		jv_free(rec);
		status = ca_err_worst(status, st);
	}
	status = ca_err_worst(status, ca_ndjson_status(r));
	ca_ndjson_close(r);
	free(buf.data);
	close(fd);
	return ca_err_finish(status);
}
