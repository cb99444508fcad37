/*
 * ndjson: the record stream every ca command reads and writes.
 *
 * Reading: records come from stdin or from the files named on the command
 * line ("-" is stdin); gzip-compressed input is read transparently. The
 * reader tracks file name and line number for messages. Empty lines are
 * skipped. A line may be up to CA_NDJSON_LINE_MAX bytes long; a longer one
 * is read past without being kept (so memory stays bounded) and reported
 * as bad, like a malformed line. No line, however long or malformed, is
 * handed to libjq in a way that can abort the command: libjq's own parse
 * error quotes the whole line, and past 1 GiB its length overflowed.
 *
 * Writing: one compact JSON object per line on stdout, buffered unless
 * ca_ndjson_set_unbuffered(1) (the -u option) asks for a flush per record.
 *
 * Ownership follows libjq: functions taking a jv consume it unless their
 * comment says "borrows".
 */
#ifndef CA_NDJSON_H
#define CA_NDJSON_H

#include <stddef.h>
#include <jv.h>

struct ca_ndjson_reader;

/* 1 GiB: well inside libjq's int lengths (its parser grows an int-sized token buffer by doubling). */
#define CA_NDJSON_LINE_MAX ((size_t)1 << 30)
/* Change the limit (for tests: a long line need not be a GiB). */
void ca_ndjson_set_line_max(size_t bytes);

/* Open a reader over files[0..nfiles); nfiles == 0 reads stdin. */
struct ca_ndjson_reader *ca_ndjson_open(int nfiles, char **files);
void ca_ndjson_close(struct ca_ndjson_reader *r);

enum {
	CA_NDJSON_EOF = 0,     /* no more input */
	CA_NDJSON_RECORD = 1,  /* *out holds a JSON object */
	CA_NDJSON_BAD = 2,     /* *out holds a string: why the line was rejected */
};
/* Read the next non-empty line. */
int ca_ndjson_next(struct ca_ndjson_reader *r, jv *out);
/*
 * For a command that reads records without writing them back (a summary,
 * a set of references): the next record (CA_NDJSON_RECORD) or
 * CA_NDJSON_EOF, a malformed line on the way reported ("ca-NAME:
 * FILE:LINE: reason") and passed over, raising *status to CA_EXIT_DATA
 * (NULL: the line is only reported).
 */
int ca_ndjson_next_valid(struct ca_ndjson_reader *r, jv *out, int *status);
/*
 * The same in two steps, for commands with a fast path over the raw text:
 * the next non-empty line (CA_NDJSON_RECORD or CA_NDJSON_EOF; *text is
 * NUL-terminated and valid until the next call; CA_NDJSON_BAD for a line
 * too long to keep, with the reason in *text), then the parse of any text
 * as a record (CA_NDJSON_RECORD with the object, or CA_NDJSON_BAD with the
 * reason as a string, never longer than a few lines' worth).
 */
int ca_ndjson_next_text(struct ca_ndjson_reader *r, const char **text, size_t *len);
int ca_ndjson_parse(const char *text, size_t len, jv *out);
/*
 * For a command that waits on more than its input (ca-agent runs tasks
 * while more arrive): 1 when the next call of ca_ndjson_next or
 * ca_ndjson_next_text will not wait for input (a whole line is buffered,
 * or the input is at its end), after taking in whatever was there without
 * waiting; 0 when it would wait: poll ca_ndjson_fd(r) for input, then ask
 * again. (A partial line of over 16 MiB counts as ready: it is read to
 * its end.)
 */
int ca_ndjson_ready(struct ca_ndjson_reader *r);
/* The descriptor of the current input, or -1. */
int ca_ndjson_fd(const struct ca_ndjson_reader *r);
/* Where the last line came from ("stdin" or the file name) and its number. */
const char *ca_ndjson_name(const struct ca_ndjson_reader *r);
long ca_ndjson_line(const struct ca_ndjson_reader *r);
/* The raw text of the last line read (without newline), valid until the next call. */
const char *ca_ndjson_text(const struct ca_ndjson_reader *r, size_t *len);
/* Worst status met while opening or reading files (CA_EXIT_SYSTEM on I/O errors). */
int ca_ndjson_status(const struct ca_ndjson_reader *r);

/* Output. */
void ca_ndjson_set_unbuffered(int on);
void ca_ndjson_set_progress(int on);  /* progress lines on stderr */
/* Write one record (consumed) as a line on stdout; -1 if stdout failed. */
int ca_ndjson_write(jv record);
/* Write raw bytes of one already-serialised record plus newline. */
int ca_ndjson_write_raw(const char *text, size_t len);
/*
 * Write record (consumed) with its untouched fields passed through byte
 * for byte: parsed (borrowed) is what ca_ndjson_parse made of the line
 * text[0..len), and a top-level field of record whose value is still the
 * very value parsed (jv_identical) is copied from that text; the rest is
 * written by libjq, in record's order. So numbers libjq would round or
 * rewrite (12345678901234567890123, -0.0), escapes and the like reach the
 * next command as they came, while a field a command changed is new.
 * Text that libjq accepts but JSON does not (nan, 01) is written anew.
 */
int ca_ndjson_write_spliced(jv record, jv parsed, const char *text, size_t len);
/*
 * For a record that went through another process (written out and parsed
 * again, by ca-agent's task process or the evaluation server): each
 * top-level field of record (consumed) whose value equals parsed's
 * (borrowed) takes parsed's own value, so that ca_ndjson_write_spliced
 * with parsed passes it through as it was read.
 */
jv ca_ndjson_keep_equal(jv record, jv parsed);

/*
 * The record loop every filter command uses: for each record call fn,
 * which returns the output (consumed by the loop) and may raise *status.
 * The output is a record, or an array of records for a command that
 * writes several for one (ca-best --explode), or jv_invalid() for none (a
 * filter that drops records on purpose); fields fn did not touch are
 * passed through byte for byte (ca_ndjson_write_spliced). Malformed
 * lines become {"error": {...}} records plus a diagnostic, and status
 * CA_EXIT_DATA. Returns the final exit status, stdout errors included
 * (see ca_err_finish; a failed write is reported once and ends the loop).
 */
typedef jv (*ca_record_fn)(jv record, void *ctx, int *status);
int ca_ndjson_map(int nfiles, char **files, ca_record_fn fn, void *ctx);
/*
 * Inside a ca_record_fn: the output also takes fields
 * from another line, as read earlier (a join: ca-best --trajectories adds
 * the winner's verify, profile, reward): those whose values are still
 * parsed's (borrowed) are copied from text[0..len), which must stay valid
 * until the output is written. For the next output only; up to four lines.
 */
void ca_ndjson_pass_from(jv parsed, const char *text, size_t len);

/*
 * The same loop for commands that work on records in batches (one forward
 * pass over many sequences, a GPU sampler): take gets each record
 * (consumed) in input order, with where it came from ("FILE:LINE", for
 * messages written later), and returns 1 when the records taken so far
 * should be processed now. run then gets the n records taken since the
 * last run and sets out[0..n) to their outputs in the same order, as fn
 * returns them above (consumed by the loop). The loop also runs a batch
 * before a malformed line's error record (order is kept), at the end of
 * input, and after every record with -u (ca_ndjson_set_unbuffered).
 */
typedef int (*ca_batch_take_fn)(jv record, const char *where, void *ctx, int *status);
typedef void (*ca_batch_run_fn)(void *ctx, jv *out, int n, int *status);
int ca_ndjson_map_batch(int nfiles, char **files, ca_batch_take_fn take, ca_batch_run_fn run, void *ctx);

/*
 * The same loop for the common kind of filter that adds one field computed
 * from a few others: fn gets a record (borrowed) holding at least the
 * top-level fields named in keys[0..nkeys) and returns the value of the
 * field `field` (consumed). Large records are not parsed whole: when the
 * raw line passes lib/json's validating scanner, only the named fields are
 * parsed, and the new field is appended to the line's text as it was
 * (or replaces the old value where it stands). When the scanner is unsure
 * libjq parses the line, and the other fields are still passed through
 * as written (ca_ndjson_write_spliced).
 */
typedef jv (*ca_field_fn)(jv record, void *ctx, int *status);
int ca_ndjson_map_field(int nfiles, char **files, const char *const *keys, size_t nkeys, const char *field,
	ca_field_fn fn, void *ctx);

/*
 * The error record for a malformed line: {"error": {"file":..., "line": N,
 * "message": ...}}, under 4 KB: a file name or message that would print
 * longer than 1 KB is cut, ending in "...".
 */
jv ca_ndjson_error_record(const char *file, long line, const char *message);

/* Report "ca-NAME: FILE:LINE: message" for the record just read. */
void ca_ndjson_warn(const struct ca_ndjson_reader *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Inside a ca_record_fn (or a batch's take): report a problem with the current record as FILE:LINE. */
void ca_ndjson_record_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * For a record a command cannot process (bad field values): report it as
 * above and return the record (consumed) with "error": {"file", "line",
 * "message"} added, the same shape as a malformed line's error record.
 */
jv ca_ndjson_record_error(jv record, const char *message);

/* Count one processed record for the progress line (called by ca_ndjson_map). */
void ca_ndjson_progress_tick(void);
void ca_ndjson_progress_done(void);

#endif
