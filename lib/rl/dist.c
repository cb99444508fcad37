/*
 * dist: data-parallel ranks; see dist.h.
 */
#include "dist.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "file.h"

static int env_int(const char *a, const char *b, int dflt, int *found)
{
	const char *v = getenv(a);
	if (!v || !*v)
		v = getenv(b);
	if (!v || !*v)
		return dflt;
	char *end;
	errno = 0;
	long x = strtol(v, &end, 10);
	if (errno || *end || x < 0 || x > 1 << 20)
		ca_err_die(CA_EXIT_USAGE, "%s/%s: not a count: '%s'", a, b, v);
	*found = 1;
	return (int)x;
}

void ca_dist_init(struct ca_dist *d)
{
	int found = 0;
	*d = (struct ca_dist){.timeout = 600};
	d->world = env_int("CA_WORLD_SIZE", "SLURM_NTASKS", 1, &found);
	d->rank = env_int("CA_RANK", "SLURM_PROCID", 0, &found);
	d->local_rank = env_int("CA_LOCAL_RANK", "SLURM_LOCALID", 0, &found);
	if (d->world < 1)
		ca_err_die(CA_EXIT_USAGE, "CA_WORLD_SIZE: must be at least 1");
	if (d->rank >= d->world)
		ca_err_die(CA_EXIT_USAGE, "rank %d of a world of %d: CA_RANK/SLURM_PROCID out of range", d->rank,
			d->world);
	const char *t = getenv("CA_DIST_TIMEOUT");
	if (t && *t) {
		char *end;
		d->timeout = strtod(t, &end);
		if (*end || !(d->timeout > 0))
			ca_err_die(CA_EXIT_USAGE, "CA_DIST_TIMEOUT: not a number of seconds: '%s'", t);
	}
	const char *dir = getenv("CA_DIST_DIR");
	if (d->world == 1 && (!dir || !*dir))
		return;
	if (!dir || !*dir)
		ca_err_die(CA_EXIT_USAGE,
			"rank %d of %d: CA_DIST_DIR is not set (the ranks meet in that directory; "
			"scripts/ca-launch sets it)",
			d->rank, d->world);
	struct stat st;
	if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		ca_err_die(CA_EXIT_USAGE, "CA_DIST_DIR %s: not a directory", dir);
	d->dir = ca_xstrdup(dir);
}

static char *slot_path(const struct ca_dist *d, const char *what, long seq, int rank)
{
	size_t n = strlen(d->dir) + 64;
	char *p = ca_xmalloc(n);
	snprintf(p, n, "%s/%s%ld.%d", d->dir, what, seq, rank);
	return p;
}

static void write_file(const char *path, const void *buf, size_t n)
{
	size_t len = strlen(path) + 8;
	char *tmp = ca_xmalloc(len);
	snprintf(tmp, len, "%s.tmp", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s: %s", tmp, strerror(errno));
	if (ca_file_write_fd(fd, buf, n) != 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s: %s", tmp, strerror(errno));
	if (close(fd) != 0 || rename(tmp, path) != 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s: %s", path, strerror(errno));
	free(tmp);
}

static void pause_for(double *wait)
{
	struct timespec ts = {0, (long)(*wait * 1e9)};
	nanosleep(&ts, NULL);
	if (*wait < 0.02)
		*wait *= 2;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wait for path to appear and read exactly n bytes of it. */
static void read_file(const struct ca_dist *d, const char *path, int from, void *buf, size_t n)
{
	double t0 = now(), wait = 0.0005;
	int fd;
	while ((fd = open(path, O_RDONLY)) < 0) {
		if (errno != ENOENT)
			ca_err_die(CA_EXIT_SYSTEM, "%s: %s", path, strerror(errno));
		if (now() - t0 > d->timeout)
			ca_err_die(CA_EXIT_SYSTEM,
				"rank %d: rank %d did not reach collective #%ld within %g s (CA_DIST_TIMEOUT); "
				"did it fail?",
				d->rank, from, d->seq, d->timeout);
		pause_for(&wait);
	}
	struct stat st;
	if (fstat(fd, &st) != 0)
		ca_err_die(CA_EXIT_SYSTEM, "%s: %s", path, strerror(errno));
	if ((size_t)st.st_size != n)
		ca_err_die(CA_EXIT_DATA,
			"rank %d: rank %d sent %lld bytes to collective #%ld, expected %zu: the ranks disagree "
			"about the model or the data",
			d->rank, from, (long long)st.st_size, d->seq, n);
	char *p = buf;
	while (n > 0) {
		ssize_t r = read(fd, p, n);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			ca_err_die(CA_EXIT_SYSTEM, "%s: short read", path);
		}
		p += r;
		n -= (size_t)r;
	}
	close(fd);
}

void ca_dist_sum(struct ca_dist *d, double *buf, size_t n)
{
	if (d->world == 1)
		return;
	d->seq++;
	char *mine = slot_path(d, "sum", d->seq, d->rank);
	write_file(mine, buf, n * sizeof(double));
	double *acc = ca_xcalloc(n ? n : 1, sizeof(double)), *part = ca_xmalloc((n ? n : 1) * sizeof(double));
	for (int r = 0; r < d->world; r++) {
		char *path = slot_path(d, "sum", d->seq, r);
		read_file(d, path, r, part, n * sizeof(double));
		for (size_t i = 0; i < n; i++)
			acc[i] += part[i];
		free(path);
	}
	memcpy(buf, acc, n * sizeof(double));
	free(acc);
	free(part);
	/* Every rank has read my previous file: it wrote this one after. */
	char *prev = slot_path(d, "sum", d->seq - 1, d->rank);
	unlink(prev);
	free(prev);
	free(mine);
}

void ca_dist_sum_float(struct ca_dist *d, float *buf, size_t n)
{
	if (d->world == 1)
		return;
	double *x = ca_xmalloc((n ? n : 1) * sizeof(double));
	for (size_t i = 0; i < n; i++)
		x[i] = buf[i];
	ca_dist_sum(d, x, n);
	for (size_t i = 0; i < n; i++)
		buf[i] = (float)x[i];
	free(x);
}

void ca_dist_barrier(struct ca_dist *d)
{
	double one = 1;
	ca_dist_sum(d, &one, 1);
	if (d->world > 1 && one != d->world)
		ca_err_die(CA_EXIT_SYSTEM, "rank %d: barrier counted %g ranks, expected %d", d->rank, one, d->world);
}

int ca_dist_device_sums(const struct ca_dist *d)
{
	return d->world > 1 || d->dir;
}

void ca_dist_share(const struct ca_dist *d, int n, int *first, int *count)
{
	int base = n / d->world, extra = n % d->world;
	*first = d->rank * base + (d->rank < extra ? d->rank : extra);
	*count = base + (d->rank < extra);
}

/* NCCL, opened at run time: the few entry points used, declared as in nccl.h. */
typedef struct {
	char internal[128];
} nccl_id;
struct nccl {
	void *so, *comm;
	int (*get_id)(nccl_id *);
	int (*init_rank)(void **, int, nccl_id, int);
	int (*all_reduce)(const void *, void *, size_t, int, int, void *, void *);
	int (*destroy)(void *);
	const char *(*error)(int);
};
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

static int nccl_open(struct ca_dist *d, char why[256])
{
	struct nccl *c = calloc(1, sizeof(*c));
	if (!c)
		return snprintf(why, 256, "out of memory"), -1;
	const char *name = getenv("CA_NCCL_LIB");
	c->so = dlopen(name && *name ? name : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
	if (!c->so) {
		snprintf(why, 256, "cannot open NCCL (set CA_NCCL_LIB to libnccl.so.2): %s", dlerror());
		free(c);
		return -1;
	}
	*(void **)&c->get_id = dlsym(c->so, "ncclGetUniqueId");
	*(void **)&c->init_rank = dlsym(c->so, "ncclCommInitRank");
	*(void **)&c->all_reduce = dlsym(c->so, "ncclAllReduce");
	*(void **)&c->destroy = dlsym(c->so, "ncclCommDestroy");
	*(void **)&c->error = dlsym(c->so, "ncclGetErrorString");
	if (!c->get_id || !c->init_rank || !c->all_reduce || !c->destroy || !c->error) {
		snprintf(why, 256, "NCCL library lacks the entry points used");
		dlclose(c->so);
		free(c);
		return -1;
	}
	nccl_id id;
	char *path = slot_path(d, "nccl-id", 0, 0);
	if (d->rank == 0) {
		int rc = c->get_id(&id);
		if (rc != 0) {
			snprintf(why, 256, "ncclGetUniqueId: %s", c->error(rc));
			free(path);
			return -1;
		}
		write_file(path, &id, sizeof(id));
	} else {
		read_file(d, path, 0, &id, sizeof(id));
	}
	free(path);
	int rc = c->init_rank(&c->comm, d->world, id, d->rank);
	if (rc != 0) {
		snprintf(why, 256, "ncclCommInitRank (rank %d of %d): %s", d->rank, d->world, c->error(rc));
		return -1;
	}
	d->nccl = c;
	return 0;
}

int ca_dist_sum_device(struct ca_dist *d, float *dev, size_t n, void *stream, char why[256])
{
	if (!ca_dist_device_sums(d))
		return 0;
	if (!d->nccl && nccl_open(d, why) < 0)
		return -1;
	struct nccl *c = d->nccl;
	int rc = c->all_reduce(dev, dev, n, NCCL_FLOAT32, NCCL_SUM, c->comm, stream);
	if (rc != 0) {
		snprintf(why, 256, "ncclAllReduce: %s", c->error(rc));
		return -1;
	}
	return 0;
}

void ca_dist_close(struct ca_dist *d)
{
	if (d->nccl) {
		struct nccl *c = d->nccl;
		c->destroy(c->comm);
		free(c);
	}
	if (d->world > 1) {
		ca_dist_barrier(d);
		char *prev = slot_path(d, "sum", d->seq - 1, d->rank);
		unlink(prev);
		free(prev);
	}
	free(d->dir);
	*d = (struct ca_dist){.world = 1};
}
