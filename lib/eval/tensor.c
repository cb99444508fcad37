/* tensor: see tensor.h. The reader trusts nothing in the file. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "err.h"
#include "tensor.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[CA_DT_COUNT] = {
	[CA_DT_NONE] = {"none", 0},
	[CA_DT_F32] = {"float32", 4},
	[CA_DT_F64] = {"float64", 8},
	[CA_DT_F16] = {"float16", 2},
	[CA_DT_BF16] = {"bfloat16", 2},
	[CA_DT_I8] = {"int8", 1},
	[CA_DT_I16] = {"int16", 2},
	[CA_DT_I32] = {"int32", 4},
	[CA_DT_I64] = {"int64", 8},
	[CA_DT_U8] = {"uint8", 1},
	[CA_DT_BOOL] = {"bool", 1},
};

const char *ca_tensor_dtype_name(int dtype)
{
	return dtype >= 0 && dtype < CA_DT_COUNT ? dtypes[dtype].name : "?";
}

size_t ca_tensor_dtype_size(int dtype)
{
	return dtype >= 0 && dtype < CA_DT_COUNT ? dtypes[dtype].size : 0;
}

int ca_tensor_dtype_is_float(int dtype)
{
	return dtype == CA_DT_F32 || dtype == CA_DT_F64 || dtype == CA_DT_F16 || dtype == CA_DT_BF16;
}

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

struct read_part {
	int fd;
	unsigned char *buf;
	size_t n;
	off_t off;
	int failed;
};

static void *read_part_run(void *arg)
{
	struct read_part *p = arg;
	size_t done = 0;
	while (done < p->n) {
		ssize_t got = pread(p->fd, p->buf + done, p->n - done, p->off + (off_t)done);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			p->failed = 1;
			break;
		}
		done += (size_t)got;
	}
	return NULL;
}

enum { BIG_READ = 64 << 20, READ_THREADS = 8 };

/*
 * Read exactly n bytes; -1 on short read. Large data (outputs of full-size
 * tasks reach gigabytes) is read by several threads at once with pread,
 * which is several times faster than one reader from a tmpfs.
 */
static int read_exact(FILE *fp, void *buf, size_t n)
{
	if (n < BIG_READ)
		return fread(buf, 1, n, fp) == n ? 0 : -1;
	off_t pos = ftello(fp);
	if (pos < 0)
		return fread(buf, 1, n, fp) == n ? 0 : -1;
	struct read_part parts[READ_THREADS];
	pthread_t threads[READ_THREADS];
	int started[READ_THREADS];
	size_t chunk = (n / READ_THREADS + 4095) & ~(size_t)4095;
	int failed = 0;
	for (int i = 0; i < READ_THREADS; i++) {
		size_t lo = (size_t)i * chunk < n ? (size_t)i * chunk : n;
		size_t hi = lo + chunk < n ? lo + chunk : n;
		parts[i] = (struct read_part){fileno(fp), (unsigned char *)buf + lo, hi - lo, pos + (off_t)lo, 0};
		started[i] = pthread_create(&threads[i], NULL, read_part_run, &parts[i]) == 0;
		if (!started[i])
			read_part_run(&parts[i]);
	}
	for (int i = 0; i < READ_THREADS; i++) {
		if (started[i])
			pthread_join(threads[i], NULL);
		failed |= parts[i].failed;
	}
	if (failed || fseeko(fp, pos + (off_t)n, SEEK_SET) != 0)
		return -1;
	return 0;
}

void ca_tensor_free(struct ca_tensor_file *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->count; i++) {
		free(f->entries[i].name);
		free(f->entries[i].data);
	}
	free(f->entries);
	f->entries = NULL;
	f->count = 0;
}

#define FAIL(...) do { snprintf(why, why_len, __VA_ARGS__); goto fail; } while (0)

int ca_tensor_read(const char *path, uint64_t max_bytes, struct ca_tensor_file *f,
		char *why, size_t why_len)
{
	memset(f, 0, sizeof *f);
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	uint64_t file_size = fstat(fileno(fp), &st) == 0 ? (uint64_t)st.st_size : UINT64_MAX;
	uint64_t total = 0;
	unsigned char head[16];
	if (read_exact(fp, head, sizeof head) < 0)
		FAIL("%s: truncated header", path);
	if (memcmp(head, CA_TENSOR_MAGIC, 8) != 0)
		FAIL("%s: not a tensor file (bad magic)", path);
	if (le32(head + 8) != CA_TENSOR_VERSION)
		FAIL("%s: unsupported tensor file version %u", path, le32(head + 8));
	uint32_t count = le32(head + 12);
	/* Each entry takes at least 16 bytes, so the count is bounded by the size. */
	if (count > 1000000 || (uint64_t)count * 16 > file_size)
		FAIL("%s: implausible entry count %u", path, count);
	f->entries = ca_xcalloc(count ? count : 1, sizeof *f->entries);
	for (uint32_t i = 0; i < count; i++) {
		struct ca_tensor *t = &f->entries[i];
		unsigned char b[8];
		if (read_exact(fp, b, 4) < 0)
			FAIL("%s: entry %u: truncated", path, i);
		uint32_t name_len = le32(b);
		if (name_len > 4096)
			FAIL("%s: entry %u: name too long", path, i);
		t->name = ca_xmalloc(name_len + 1);
		f->count = (int)i + 1;
		if (read_exact(fp, t->name, name_len) < 0)
			FAIL("%s: entry %u: truncated name", path, i);
		t->name[name_len] = '\0';
		if (memchr(t->name, '\0', name_len))
			FAIL("%s: entry %u: NUL in name", path, i);
		if (read_exact(fp, b, 4) < 0)
			FAIL("%s: entry %s: truncated", path, t->name);
		t->dtype = b[0];
		t->flags = b[1];
		t->ndim = b[2] | b[3] << 8;
		if (t->dtype >= CA_DT_COUNT)
			FAIL("%s: entry %s: unknown dtype %d", path, t->name, t->dtype);
		if (t->ndim > CA_TENSOR_MAX_DIMS)
			FAIL("%s: entry %s: %d dimensions (at most %d)", path, t->name, t->ndim, CA_TENSOR_MAX_DIMS);
		uint64_t numel = 1;
		for (int d = 0; d < t->ndim; d++) {
			if (read_exact(fp, b, 8) < 0)
				FAIL("%s: entry %s: truncated shape", path, t->name);
			int64_t dim = (int64_t)le64(b);
			if (dim < 0 || dim > (int64_t)1 << 48)
				FAIL("%s: entry %s: bad dimension %lld", path, t->name, (long long)dim);
			t->dims[d] = dim;
			if (dim && numel > UINT64_MAX / (uint64_t)dim)
				FAIL("%s: entry %s: shape overflows", path, t->name);
			numel *= (uint64_t)dim;
		}
		if (t->dtype == CA_DT_NONE)
			numel = 0;
		t->numel = numel;
		if (read_exact(fp, b, 8) < 0)
			FAIL("%s: entry %s: truncated", path, t->name);
		t->nbytes = le64(b);
		size_t elem = ca_tensor_dtype_size(t->dtype);
		if (elem && numel > UINT64_MAX / elem)
			FAIL("%s: entry %s: shape overflows", path, t->name);
		if (t->nbytes != numel * elem)
			FAIL("%s: entry %s: %llu data bytes for %llu elements of %s", path, t->name,
				(unsigned long long)t->nbytes, (unsigned long long)numel,
				ca_tensor_dtype_name(t->dtype));
		if (t->nbytes > file_size)
			FAIL("%s: entry %s: data runs past the end of the file", path, t->name);
		total += t->nbytes;
		if (max_bytes && total > max_bytes)
			FAIL("%s: more than %llu bytes of tensor data", path, (unsigned long long)max_bytes);
		t->data = malloc(t->nbytes ? t->nbytes : 1);
		if (!t->data)
			FAIL("%s: entry %s: out of memory for %llu bytes", path, t->name,
				(unsigned long long)t->nbytes);
		if (read_exact(fp, t->data, t->nbytes) < 0)
			FAIL("%s: entry %s: truncated data", path, t->name);
	}
	if (fgetc(fp) != EOF)
		FAIL("%s: trailing bytes after the last entry", path);
	fclose(fp);
	return 0;
fail:
	fclose(fp);
	ca_tensor_free(f);
	return -1;
}

int ca_tensor_write(const char *path, const struct ca_tensor_file *f)
{
	size_t plen = strlen(path);
	char *tmp = ca_xmalloc(plen + 16);
	snprintf(tmp, plen + 16, "%s.tmp%ld", path, (long)getpid());
	FILE *fp = fopen(tmp, "wb");
	if (!fp) {
		free(tmp);
		return -1;
	}
	unsigned char head[16];
	memcpy(head, CA_TENSOR_MAGIC, 8);
	put32(head + 8, CA_TENSOR_VERSION);
	put32(head + 12, (uint32_t)f->count);
	fwrite(head, 1, sizeof head, fp);
	for (int i = 0; i < f->count; i++) {
		const struct ca_tensor *t = &f->entries[i];
		unsigned char b[8];
		uint32_t name_len = (uint32_t)strlen(t->name);
		put32(b, name_len);
		fwrite(b, 1, 4, fp);
		fwrite(t->name, 1, name_len, fp);
		b[0] = (unsigned char)t->dtype;
		b[1] = (unsigned char)t->flags;
		b[2] = (unsigned char)(t->ndim & 0xff);
		b[3] = (unsigned char)(t->ndim >> 8);
		fwrite(b, 1, 4, fp);
		for (int d = 0; d < t->ndim; d++) {
			put64(b, (uint64_t)t->dims[d]);
			fwrite(b, 1, 8, fp);
		}
		put64(b, t->nbytes);
		fwrite(b, 1, 8, fp);
		if (t->nbytes)
			fwrite(t->data, 1, t->nbytes, fp);
	}
	int bad = ferror(fp);
	if (fclose(fp) != 0 || bad) {
		int e = errno;
		unlink(tmp);
		free(tmp);
		errno = e ? e : EIO;
		return -1;
	}
	int rc = rename(tmp, path);
	free(tmp);
	return rc;
}

static double half_to_double(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
	double v;
	if (exp == 0)
		v = mant * 0x1p-24;
	else if (exp == 31)
		v = mant ? (double)NAN : (double)INFINITY;
	else
		v = (1.0 + mant * 0x1p-10) * ((double)(1 << exp) * 0x1p-15);
	return sign ? -v : v;
}

double ca_tensor_value(const struct ca_tensor *t, uint64_t i)
{
	const unsigned char *p = (const unsigned char *)t->data + i * ca_tensor_dtype_size(t->dtype);
	switch (t->dtype) {
	case CA_DT_F32: { float v; memcpy(&v, p, 4); return v; }
	case CA_DT_F64: { double v; memcpy(&v, p, 8); return v; }
	case CA_DT_F16: return half_to_double((uint16_t)(p[0] | p[1] << 8));
	case CA_DT_BF16: {
		uint32_t bits = (uint32_t)(p[0] | p[1] << 8) << 16;
		float v;
		memcpy(&v, &bits, 4);
		return v;
	}
	case CA_DT_I8: return (int8_t)p[0];
	case CA_DT_I16: { int16_t v; memcpy(&v, p, 2); return v; }
	case CA_DT_I32: { int32_t v; memcpy(&v, p, 4); return v; }
	case CA_DT_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
	case CA_DT_U8: return p[0];
	case CA_DT_BOOL: return p[0] != 0;
	default: return 0;
	}
}

void ca_tensor_shape_string(const struct ca_tensor *t, char *buf, size_t len)
{
	size_t used = 0;
	if (len == 0)
		return;
	used += (size_t)snprintf(buf, len, "[");
	for (int d = 0; d < t->ndim && used < len; d++)
		used += (size_t)snprintf(buf + used, len - used, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
	if (used < len)
		snprintf(buf + used, len - used, "]");
}
