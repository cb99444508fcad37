/* safetensors: see safetensors.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jv.h>

#include "err.h"
#include "file.h"
#include "safetensors.h"

const char *ca_st_dtype_name(enum ca_st_dtype dtype)
{
	switch (dtype) {
	case CA_ST_F32: return "F32";
	case CA_ST_F16: return "F16";
	case CA_ST_BF16: return "BF16";
	case CA_ST_F64: return "F64";
	default: return "?";
	}
}

size_t ca_st_dtype_size(enum ca_st_dtype dtype)
{
	switch (dtype) {
	case CA_ST_F32: return 4;
	case CA_ST_F16: case CA_ST_BF16: return 2;
	case CA_ST_F64: return 8;
	default: return 0;
	}
}

static size_t other_dtype_size(const char *name)
{
	static const struct { const char *name; size_t size; } table[] = {
		{"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
		{"I16", 2}, {"U16", 2}, {"I32", 4}, {"U32", 4}, {"I64", 8}, {"U64", 8},
	};
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(table[i].name, name) == 0)
			return table[i].size;
	return 0;
}

/* An fp32 from its bits and back (memcpy: no aliasing trouble). */
static float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint32_t to_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

float ca_st_bf16_to_f32(uint16_t h)
{
	return from_bits((uint32_t)h << 16);
}

uint16_t ca_st_f32_to_bf16(float f)
{
	uint32_t u = to_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);  /* quiet NaN */
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float ca_st_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
	if (exp == 0) {
		if (mant == 0) {
			u = sign;
		} else {  /* subnormal: normalise */
			int e = -1;
			do { e++; mant <<= 1; } while (!(mant & 0x400));
			u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
		}
	} else if (exp == 31) {
		u = sign | 0x7f800000u | (mant << 13);
	} else {
		u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
	}
	return from_bits(u);
}

uint16_t ca_st_f32_to_f16(float f)
{
	uint32_t u = to_bits(f);
	uint32_t sign = (u >> 16) & 0x8000;
	int32_t exp = (int32_t)((u >> 23) & 0xff) - 127 + 15;
	uint32_t mant = u & 0x7fffff;
	if (((u >> 23) & 0xff) == 0xff)
		return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
	if (exp >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		if (exp < -10)
			return (uint16_t)sign;
		mant |= 0x800000;
		int shift = 14 - exp;
		uint32_t half = 1u << (shift - 1);
		uint32_t rounded = (mant + half - 1 + ((mant >> shift) & 1)) >> shift;
		return (uint16_t)(sign | rounded);
	}
	uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
	uint32_t rest = mant & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++;  /* carries into the exponent correctly, up to infinity */
	return (uint16_t)h;
}

int ca_st_to_f32(const struct ca_st_tensor *t, float *out)
{
	const unsigned char *p = t->data;
	switch (t->dtype) {
	case CA_ST_F32:
		memcpy(out, p, (size_t)t->numel * 4);
		return 0;
	case CA_ST_BF16:
	case CA_ST_F16:
		for (int64_t i = 0; i < t->numel; i++) {
			uint16_t h;
			memcpy(&h, p + 2 * i, 2);
			out[i] = t->dtype == CA_ST_BF16 ? ca_st_bf16_to_f32(h) : ca_st_f16_to_f32(h);
		}
		return 0;
	case CA_ST_F64:
		for (int64_t i = 0; i < t->numel; i++) {
			double d;
			memcpy(&d, p + 8 * i, 8);
			out[i] = (float)d;
		}
		return 0;
	default:
		return -1;
	}
}

static int parse_entry(struct ca_st_tensor *t, const char *name, jv info, size_t data_size,
		       char why[CA_ST_WHY])
{
	t->name = ca_xstrdup(name);
	jv dtype = jv_object_get(jv_copy(info), jv_string("dtype"));
	jv shape = jv_object_get(jv_copy(info), jv_string("shape"));
	jv offsets = jv_object_get(jv_copy(info), jv_string("data_offsets"));
	int rc = -1;
	if (jv_get_kind(dtype) != JV_KIND_STRING || jv_get_kind(shape) != JV_KIND_ARRAY ||
	    jv_get_kind(offsets) != JV_KIND_ARRAY || jv_array_length(jv_copy(offsets)) != 2) {
		ca_err_why(why, CA_ST_WHY, "tensor %s: bad header entry", name);
		goto out;
	}
	snprintf(t->dtype_name, sizeof t->dtype_name, "%s", jv_string_value(dtype));
	size_t elsize;
	if (strcmp(t->dtype_name, "F32") == 0) t->dtype = CA_ST_F32;
	else if (strcmp(t->dtype_name, "F16") == 0) t->dtype = CA_ST_F16;
	else if (strcmp(t->dtype_name, "BF16") == 0) t->dtype = CA_ST_BF16;
	else if (strcmp(t->dtype_name, "F64") == 0) t->dtype = CA_ST_F64;
	else t->dtype = CA_ST_OTHER;
	elsize = t->dtype == CA_ST_OTHER ? other_dtype_size(t->dtype_name) : ca_st_dtype_size(t->dtype);
	if (elsize == 0) {
		ca_err_why(why, CA_ST_WHY, "tensor %s: unknown dtype %s", name, t->dtype_name);
		goto out;
	}
	t->ndim = jv_array_length(jv_copy(shape));
	if (t->ndim > CA_ST_MAXDIM) {
		ca_err_why(why, CA_ST_WHY, "tensor %s: too many dimensions", name);
		goto out;
	}
	t->numel = 1;
	for (int i = 0; i < t->ndim; i++) {
		jv d = jv_array_get(jv_copy(shape), i);
		double x = jv_get_kind(d) == JV_KIND_NUMBER ? jv_number_value(d) : -1;
		jv_free(d);
		if (!(x >= 0 && x < 1e15) || x != (double)(int64_t)x) {
			ca_err_why(why, CA_ST_WHY, "tensor %s: bad shape", name);
			goto out;
		}
		t->shape[i] = (int64_t)x;
		t->numel *= t->shape[i];
	}
	jv b = jv_array_get(jv_copy(offsets), 0), e = jv_array_get(jv_copy(offsets), 1);
	double begin = jv_get_kind(b) == JV_KIND_NUMBER ? jv_number_value(b) : -1;
	double end = jv_get_kind(e) == JV_KIND_NUMBER ? jv_number_value(e) : -1;
	jv_free(b);
	jv_free(e);
	if (!(begin >= 0 && end >= begin && end <= (double)data_size)) {
		ca_err_why(why, CA_ST_WHY, "tensor %s: data offsets outside the file", name);
		goto out;
	}
	t->nbytes = (size_t)(end - begin);
	if (t->nbytes != (size_t)t->numel * elsize) {
		ca_err_why(why, CA_ST_WHY, "tensor %s: %zu bytes for %lld elements of %s", name, t->nbytes,
			(long long)t->numel, t->dtype_name);
		goto out;
	}
	t->data = (const char *)(uintptr_t)begin;  /* made absolute by the caller */
	rc = 0;
out:
	jv_free(dtype);
	jv_free(shape);
	jv_free(offsets);
	return rc;
}

void ca_st_close(struct ca_st_file *f)
{
	if (!f)
		return;
	for (int i = 0; i < f->ntensors; i++)
		free(f->tensors[i].name);
	free(f->tensors);
	if (f->map && f->map != MAP_FAILED)
		munmap(f->map, f->map_size);
	free(f->path);
	free(f);
}

struct ca_st_file *ca_st_open(const char *path, char why[CA_ST_WHY])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ca_err_why(why, CA_ST_WHY, "%s: %s", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) < 0) {
		ca_err_why(why, CA_ST_WHY, "%s: %s", path, strerror(errno));
		close(fd);
		return NULL;
	}
	struct ca_st_file *f = ca_xcalloc(1, sizeof *f);
	f->path = ca_xstrdup(path);
	f->map_size = (size_t)st.st_size;
	if (f->map_size < 8) {
		ca_err_why(why, CA_ST_WHY, "%s: too short for a safetensors file", path);
		close(fd);
		ca_st_close(f);
		return NULL;
	}
	f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f->map == MAP_FAILED) {
		ca_err_why(why, CA_ST_WHY, "%s: mmap: %s", path, strerror(errno));
		f->map = NULL;
		ca_st_close(f);
		return NULL;
	}
	const unsigned char *p = f->map;
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | p[i];
	if (hlen > f->map_size - 8 || hlen > INT_MAX) {
		ca_err_why(why, CA_ST_WHY, "%s: header length %llu exceeds the file", path, (unsigned long long)hlen);
		ca_st_close(f);
		return NULL;
	}
	jv header = jv_parse_sized((const char *)p + 8, (int)hlen);
	if (jv_get_kind(header) != JV_KIND_OBJECT) {
		if (!jv_is_valid(header)) {
			jv msg = jv_invalid_get_msg(header);
			ca_err_why(why, CA_ST_WHY, "%s: bad header: %s", path,
				jv_get_kind(msg) == JV_KIND_STRING ? jv_string_value(msg) : "not JSON");
			jv_free(msg);
		} else {
			jv_free(header);
			ca_err_why(why, CA_ST_WHY, "%s: header is not a JSON object", path);
		}
		ca_st_close(f);
		return NULL;
	}
	const char *data = (const char *)p + 8 + hlen;
	size_t data_size = f->map_size - 8 - hlen;
	int cap = jv_object_length(jv_copy(header));
	f->tensors = ca_xcalloc((size_t)cap + 1, sizeof *f->tensors);
	int bad = 0;
	jv_object_foreach(header, key, value) {
		const char *name = jv_string_value(key);
		if (!bad && strcmp(name, "__metadata__") != 0) {
			struct ca_st_tensor *t = &f->tensors[f->ntensors++];
			if (parse_entry(t, name, value, data_size, why) < 0)
				bad = 1;
			else
				t->data = data + (uintptr_t)t->data;
		}
		jv_free(key);
		jv_free(value);
	}
	jv_free(header);
	if (bad) {
		char reason[CA_ST_WHY];
		memcpy(reason, why, CA_ST_WHY);
		ca_err_why(why, CA_ST_WHY, "%s: %s", path, reason);
		ca_st_close(f);
		return NULL;
	}
	return f;
}

const struct ca_st_tensor *ca_st_file_find(const struct ca_st_file *f, const char *name)
{
	for (int i = 0; i < f->ntensors; i++)
		if (strcmp(f->tensors[i].name, name) == 0)
			return &f->tensors[i];
	return NULL;
}

void ca_st_dir_close(struct ca_st_dir *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->nfiles; i++)
		ca_st_close(d->files[i]);
	free(d->files);
	free(d);
}

struct ca_st_dir *ca_st_dir_open(const char *dir, char why[CA_ST_WHY])
{
	char path[PATH_MAX];
	struct ca_st_dir *d = ca_xcalloc(1, sizeof *d);
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	size_t len;
	char *text = ca_file_read(path, 0, 0, &len);
	if (!text) {
		snprintf(path, sizeof path, "%s/model.safetensors", dir);
		struct ca_st_file *f = ca_st_open(path, why);
		if (!f) {
			free(d);
			return NULL;
		}
		d->files = ca_xmalloc(sizeof *d->files);
		d->files[0] = f;
		d->nfiles = 1;
		return d;
	}
	jv index = jv_parse_sized(text, (int)len);
	free(text);
	jv map = jv_get_kind(index) == JV_KIND_OBJECT ?
		jv_object_get(jv_copy(index), jv_string("weight_map")) : jv_invalid();
	jv_free(index);
	if (jv_get_kind(map) != JV_KIND_OBJECT) {
		jv_free(map);
		ca_err_why(why, CA_ST_WHY, "%s: no weight_map object", path);
		free(d);
		return NULL;
	}
	/* The distinct shard names, in first-seen order. */
	jv shards = jv_object();
	jv order = jv_array();
	jv_object_foreach(map, key, value) {
		if (jv_get_kind(value) == JV_KIND_STRING &&
		    !jv_object_has(jv_copy(shards), jv_copy(value))) {
			shards = jv_object_set(shards, jv_copy(value), jv_true());
			order = jv_array_append(order, jv_copy(value));
		}
		jv_free(key);
		jv_free(value);
	}
	jv_free(map);
	jv_free(shards);
	int n = jv_array_length(jv_copy(order));
	d->files = ca_xcalloc((size_t)n + 1, sizeof *d->files);
	for (int i = 0; i < n; i++) {
		jv name = jv_array_get(jv_copy(order), i);
		if (strchr(jv_string_value(name), '/')) {
			ca_err_why(why, CA_ST_WHY, "%s: shard name %s has a slash", path, jv_string_value(name));
			jv_free(name);
			jv_free(order);
			ca_st_dir_close(d);
			return NULL;
		}
		char shard[PATH_MAX];
		snprintf(shard, sizeof shard, "%s/%s", dir, jv_string_value(name));
		jv_free(name);
		d->files[i] = ca_st_open(shard, why);
		if (!d->files[i]) {
			jv_free(order);
			ca_st_dir_close(d);
			return NULL;
		}
		d->nfiles++;
	}
	jv_free(order);
	return d;
}

const struct ca_st_tensor *ca_st_dir_find(const struct ca_st_dir *d, const char *name)
{
	for (int i = 0; i < d->nfiles; i++) {
		const struct ca_st_tensor *t = ca_st_file_find(d->files[i], name);
		if (t)
			return t;
	}
	return NULL;
}

enum ca_st_dtype ca_st_dir_dtype(const struct ca_st_dir *d)
{
	int64_t count[CA_ST_OTHER + 1] = {0};
	for (int i = 0; i < d->nfiles; i++)
		for (int j = 0; j < d->files[i]->ntensors; j++)
			count[d->files[i]->tensors[j].dtype] += d->files[i]->tensors[j].numel;
	enum ca_st_dtype best = CA_ST_F32;
	for (int k = CA_ST_F32; k <= CA_ST_F64; k++)
		if (count[k] > count[best])
			best = k;
	return best == CA_ST_F64 ? CA_ST_F32 : best;
}

static int64_t out_numel(const struct ca_st_out *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	return n;
}

static int write_all(FILE *fp, const void *p, size_t n)
{
	return fwrite(p, 1, n, fp) == n ? 0 : -1;
}

static int write_data(FILE *fp, const struct ca_st_out *t, enum ca_st_dtype dtype)
{
	int64_t n = out_numel(t);
	if (dtype == CA_ST_F32)
		return write_all(fp, t->data, (size_t)n * 4);
	uint16_t buf[4096];
	for (int64_t i = 0; i < n; i += 4096) {
		int64_t m = n - i < 4096 ? n - i : 4096;
		for (int64_t j = 0; j < m; j++)
			buf[j] = dtype == CA_ST_BF16 ? ca_st_f32_to_bf16(t->data[i + j])
						     : ca_st_f32_to_f16(t->data[i + j]);
		if (write_all(fp, buf, (size_t)m * 2) < 0)
			return -1;
	}
	return 0;
}

int ca_st_write_file(const char *path, int n, const struct ca_st_out *tensors,
		     enum ca_st_dtype dtype, char why[CA_ST_WHY])
{
	if (dtype != CA_ST_F32 && dtype != CA_ST_BF16 && dtype != CA_ST_F16) {
		ca_err_why(why, CA_ST_WHY, "cannot write dtype %s", ca_st_dtype_name(dtype));
		return -1;
	}
	size_t elsize = ca_st_dtype_size(dtype);
	jv header = jv_object();
	header = jv_object_set(header, jv_string("__metadata__"),
			       jv_object_set(jv_object(), jv_string("format"), jv_string("pt")));
	size_t offset = 0;
	for (int i = 0; i < n; i++) {
		jv shape = jv_array();
		for (int k = 0; k < tensors[i].ndim; k++)
			shape = jv_array_append(shape, jv_number((double)tensors[i].shape[k]));
		size_t bytes = (size_t)out_numel(&tensors[i]) * elsize;
		jv entry = jv_object();
		entry = jv_object_set(entry, jv_string("dtype"), jv_string(ca_st_dtype_name(dtype)));
		entry = jv_object_set(entry, jv_string("shape"), shape);
		entry = jv_object_set(entry, jv_string("data_offsets"),
				      JV_ARRAY(jv_number((double)offset), jv_number((double)(offset + bytes))));
		header = jv_object_set(header, jv_string(tensors[i].name), entry);
		offset += bytes;
	}
	jv text = jv_dump_string(header, 0);
	size_t hlen = (size_t)jv_string_length_bytes(jv_copy(text));
	size_t padded = (hlen + 7) / 8 * 8;
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
	FILE *fp = fopen(tmp, "wb");
	if (!fp) {
		ca_err_why(why, CA_ST_WHY, "%s: %s", tmp, strerror(errno));
		jv_free(text);
		return -1;
	}
	unsigned char lenbuf[8];
	for (int i = 0; i < 8; i++)
		lenbuf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
	int rc = write_all(fp, lenbuf, 8);
	if (rc == 0)
		rc = write_all(fp, jv_string_value(text), hlen);
	for (size_t i = hlen; rc == 0 && i < padded; i++)
		rc = fputc(' ', fp) == EOF ? -1 : 0;
	jv_free(text);
	for (int i = 0; rc == 0 && i < n; i++)
		rc = write_data(fp, &tensors[i], dtype);
	if (fclose(fp) != 0)
		rc = -1;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -1;
	if (rc < 0) {
		ca_err_why(why, CA_ST_WHY, "%s: %s", path, strerror(errno));
		unlink(tmp);
	}
	return rc;
}

int ca_st_write_dir(const char *dir, int n, const struct ca_st_out *tensors,
		    enum ca_st_dtype dtype, size_t max_shard_bytes, char why[CA_ST_WHY])
{
	size_t elsize = ca_st_dtype_size(dtype);
	char path[PATH_MAX];
	/* Plan the shards: consecutive runs of tensors under the limit. */
	int *shard_of = ca_xcalloc((size_t)n + 1, sizeof *shard_of);
	int nshards = 0;
	size_t cur = 0, total = 0;
	for (int i = 0; i < n; i++) {
		size_t bytes = (size_t)out_numel(&tensors[i]) * elsize;
		if (nshards == 0 || (max_shard_bytes && cur > 0 && cur + bytes > max_shard_bytes)) {
			nshards++;
			cur = 0;
		}
		shard_of[i] = nshards - 1;
		cur += bytes;
		total += bytes;
	}
	int rc = 0;
	if (nshards <= 1) {
		snprintf(path, sizeof path, "%s/model.safetensors", dir);
		rc = ca_st_write_file(path, n, tensors, dtype, why);
		if (rc == 0) {  /* a stale index would shadow the new file */
			snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
			unlink(path);
		}
		free(shard_of);
		return rc;
	}
	jv map = jv_object();
	for (int s = 0, first = 0; s < nshards && rc == 0; s++) {
		int last = first;
		while (last < n && shard_of[last] == s)
			last++;
		char name[64];
		snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
		snprintf(path, sizeof path, "%s/%s", dir, name);
		rc = ca_st_write_file(path, last - first, tensors + first, dtype, why);
		for (int i = first; i < last; i++)
			map = jv_object_set(map, jv_string(tensors[i].name), jv_string(name));
		first = last;
	}
	free(shard_of);
	if (rc < 0) {
		jv_free(map);
		return rc;
	}
	jv index = jv_object();
	index = jv_object_set(index, jv_string("metadata"),
			      jv_object_set(jv_object(), jv_string("total_size"), jv_number((double)total)));
	index = jv_object_set(index, jv_string("weight_map"), map);
	jv text = jv_dump_string(index, JV_PRINT_PRETTY | JV_PRINT_INDENT_FLAGS(2) | JV_PRINT_SORTED);
	snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
	FILE *fp = fopen(path, "w");
	if (!fp || fputs(jv_string_value(text), fp) == EOF || fputc('\n', fp) == EOF) {
		ca_err_why(why, CA_ST_WHY, "%s: %s", path, strerror(errno));
		rc = -1;
	}
	if (fp && fclose(fp) != 0 && rc == 0) {
		ca_err_why(why, CA_ST_WHY, "%s: %s", path, strerror(errno));
		rc = -1;
	}
	jv_free(text);
	if (rc == 0) {
		snprintf(path, sizeof path, "%s/model.safetensors", dir);
		unlink(path);
	}
	return rc;
}
