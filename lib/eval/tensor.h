/*
 * tensor: the tensor files the Python runner writes and trusted C reads
 * (owner: B2). Inputs, weights and outputs cross the process boundary
 * between the trusted side and a sandboxed candidate in this format, and
 * lib/compare reads the outputs back, so the reader treats every file as
 * hostile: sizes are checked against the file, against each other and
 * against a caller's cap before anything is allocated.
 *
 * A file holds a flat list of named entries; nested Python values (tuples,
 * lists, dicts of tensors) are flattened into paths. Layout, all integers
 * little-endian, no padding:
 *
 *   header   8 bytes magic "CATENSOR", u32 version (1), u32 entry count
 *   entry    u32 name length, name bytes (UTF-8, no NUL),
 *            u8 dtype, u8 flags, u16 ndim, i64 dims[ndim],
 *            u64 data length in bytes, data (C-contiguous, little-endian)
 *
 * Names are paths from the top value: "" for a bare tensor, "(0)" for a
 * tuple element, "[1]" for a list element, "{key}" for a dict entry, joined
 * without separators: "(1){mean}". Flag bit 0 marks a Python scalar (int,
 * float or bool stored as a 0-d entry) rather than a tensor; dtype NONE is
 * Python's None (ndim 0, no data). The format is documented for users in
 * ca-records(5).
 */
#ifndef CA_TENSOR_H
#define CA_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define CA_TENSOR_MAGIC "CATENSOR"
#define CA_TENSOR_VERSION 1
#define CA_TENSOR_MAX_DIMS 16

enum ca_dtype {
	CA_DT_NONE = 0,
	CA_DT_F32 = 1,
	CA_DT_F64 = 2,
	CA_DT_F16 = 3,
	CA_DT_BF16 = 4,
	CA_DT_I8 = 5,
	CA_DT_I16 = 6,
	CA_DT_I32 = 7,
	CA_DT_I64 = 8,
	CA_DT_U8 = 9,
	CA_DT_BOOL = 10,
	CA_DT_COUNT
};

enum { CA_TENSOR_SCALAR = 1 };

struct ca_tensor {
	char *name;
	int dtype;
	int flags;
	int ndim;
	int64_t dims[CA_TENSOR_MAX_DIMS];
	uint64_t numel;
	uint64_t nbytes;
	void *data;
};

struct ca_tensor_file {
	int count;
	struct ca_tensor *entries;
};

/* "float32", "bfloat16", ... or "?" for an unknown code. */
const char *ca_tensor_dtype_name(int dtype);
/* Bytes per element (0 for NONE or unknown). */
size_t ca_tensor_dtype_size(int dtype);
/* 1 for float32/64, float16, bfloat16. */
int ca_tensor_dtype_is_float(int dtype);

/*
 * Read a tensor file. max_bytes caps the total data size (0: no cap).
 * Returns 0, or -1 with a reason in why (a system error sets errno and
 * says so; a malformed file says what is wrong).
 */
int ca_tensor_read(const char *path, uint64_t max_bytes, struct ca_tensor_file *f,
		char *why, size_t why_len);
/* Write f to path (atomically: a temporary file renamed). 0 or -1 with errno. */
int ca_tensor_write(const char *path, const struct ca_tensor_file *f);
void ca_tensor_free(struct ca_tensor_file *f);

/* Element i of t as a double (half and bfloat16 widened exactly). */
double ca_tensor_value(const struct ca_tensor *t, uint64_t i);

/* "[2, 3]" into buf (truncated to len). */
void ca_tensor_shape_string(const struct ca_tensor *t, char *buf, size_t len);

#endif
