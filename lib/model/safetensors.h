/*
 * safetensors: read and write Hugging Face safetensors files and sharded
 * checkpoint directories (owner: policy engine, issue 6).
 *
 * A file is an 8-byte little-endian header length, a JSON header mapping
 * tensor names to {"dtype", "shape", "data_offsets"} (plus an optional
 * "__metadata__" object of strings), then the raw little-endian data.
 * Files are mapped read-only; tensors are converted to fp32 on request
 * (F32, F16, BF16 and F64 are understood). A checkpoint directory holds
 * either model.safetensors or model.safetensors.index.json whose
 * "weight_map" names the shard of every tensor.
 *
 * Functions that can fail on bad data return NULL or -1 and write a
 * lowercase reason into why[CA_ST_WHY] (no trailing period).
 */
#ifndef CA_SAFETENSORS_H
#define CA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define CA_ST_WHY 256
#define CA_ST_MAXDIM 8

enum ca_st_dtype { CA_ST_F32, CA_ST_F16, CA_ST_BF16, CA_ST_F64, CA_ST_OTHER };

struct ca_st_tensor {
	char *name;
	enum ca_st_dtype dtype;
	char dtype_name[16];    /* as written in the header ("BF16") */
	int ndim;
	int64_t shape[CA_ST_MAXDIM];
	int64_t numel;
	size_t nbytes;
	const void *data;       /* inside the mapping; not aligned in general */
};

struct ca_st_file {
	char *path;
	void *map;
	size_t map_size;
	int ntensors;
	struct ca_st_tensor *tensors;
};

struct ca_st_file *ca_st_open(const char *path, char why[CA_ST_WHY]);
void ca_st_close(struct ca_st_file *f);
const struct ca_st_tensor *ca_st_file_find(const struct ca_st_file *f, const char *name);

/* Convert numel elements to fp32 (out must hold t->numel floats); -1 for unknown dtypes. */
int ca_st_to_f32(const struct ca_st_tensor *t, float *out);
/* Elementwise conversions used by the writer and the model. */
float ca_st_bf16_to_f32(uint16_t h);
uint16_t ca_st_f32_to_bf16(float f);   /* round to nearest even; NaN stays NaN */
float ca_st_f16_to_f32(uint16_t h);
uint16_t ca_st_f32_to_f16(float f);

/* A checkpoint directory: one file or shards joined by the index. */
struct ca_st_dir {
	int nfiles;
	struct ca_st_file **files;
};
struct ca_st_dir *ca_st_dir_open(const char *dir, char why[CA_ST_WHY]);
void ca_st_dir_close(struct ca_st_dir *d);
const struct ca_st_tensor *ca_st_dir_find(const struct ca_st_dir *d, const char *name);
/* The dtype most tensors of the directory have (what a writer should keep). */
enum ca_st_dtype ca_st_dir_dtype(const struct ca_st_dir *d);

/* Writing: tensors given as fp32 data, stored as dtype (F32, F16 or BF16). */
struct ca_st_out {
	const char *name;
	int ndim;
	int64_t shape[CA_ST_MAXDIM];
	const float *data;
};
/*
 * Write a checkpoint's weights into dir: model.safetensors when they fit in
 * max_shard_bytes (0: no limit), else model-0000K-of-0000N.safetensors
 * shards plus model.safetensors.index.json. Files are written to a
 * temporary name and renamed. Returns 0, or -1 with why set.
 */
int ca_st_write_dir(const char *dir, int n, const struct ca_st_out *tensors,
		    enum ca_st_dtype dtype, size_t max_shard_bytes, char why[CA_ST_WHY]);
/* Write one file holding tensors [0, n). */
int ca_st_write_file(const char *path, int n, const struct ca_st_out *tensors,
		     enum ca_st_dtype dtype, char why[CA_ST_WHY]);
const char *ca_st_dtype_name(enum ca_st_dtype dtype);
size_t ca_st_dtype_size(enum ca_st_dtype dtype);

#endif
