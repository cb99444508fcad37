/*
 * json: small helpers over libjq's jv that several commands need:
 * dotted-path lookup, typed getters, and setting a field in place.
 * All getters borrow their jv arguments.
 */
#ifndef CA_JSON_H
#define CA_JSON_H

#include <stddef.h>

#include <jv.h>

/* Value at a dotted path ("verify.ok", "group.level"), or jv_null() when absent. Borrows obj. */
jv ca_json_path(jv obj, const char *path);
/* Field of an object, or jv_invalid() when absent or obj is not an object. Borrows obj. */
jv ca_json_get(jv obj, const char *key);
/*
 * Number at key: returns 1 and sets *out if present and a finite number,
 * 0 if absent or null, -1 if present but not a finite number. Borrows obj.
 */
int ca_json_number(jv obj, const char *key, double *out);
/* Boolean at key: 1/0 for true/false, -1 absent or not a boolean. Borrows obj. */
int ca_json_bool(jv obj, const char *key);
/* String at key as a C string owned by the caller (malloc), or NULL. Borrows obj. */
char *ca_json_strdup(jv obj, const char *key);
/* dst (consumed) with src's field key set on it when that is of the given kind, else dst as it was. Borrows src. */
jv ca_json_copy_field(jv dst, jv src, const char *key, jv_kind kind);
/* jv number, or null when x is not finite (JSON has no NaN/Inf). */
jv ca_json_num_or_null(double x);
/*
 * The items of the array a (borrowed) when all are integers in [0, max),
 * such as token ids: their count, with *items a new array the caller frees
 * (allocated even for none); -1 when a is not an array, -2 when an item
 * is no such integer (*items NULL either way).
 */
int ca_json_int_array(jv a, double max, int **items);
/*
 * The JSON object a whole file holds (config.json, tokenizer.json), or
 * jv_invalid() with the reason in why[0..size): "PATH: strerror" when it
 * cannot be read, "PATH: not a JSON object" when it holds anything else.
 */
jv ca_json_read_object(const char *path, char *why, size_t size);

/*
 * The fast path over raw record text, for commands that touch a few
 * numeric fields of large records (ca-gae): validate the line without
 * building jv values, find the spans of some top-level fields, and pass
 * the rest of the text through. libjq stays the reference: whenever the
 * scanner is unsure it says so, and the caller parses with jv instead.
 */
struct ca_json_span {
	const char *start;  /* first byte of the value, NULL when the key is absent */
	size_t len;
};
/*
 * Check that text[0..len) is one JSON object (RFC 8259 grammar, optional
 * surrounding white space) and fill spans[i] with the value of top-level
 * key keys[i]. Returns 0 and sets *close to the offset of the object's
 * closing brace; returns -1 ("use jv") when the text is not valid JSON or
 * holds anything the scanner does not decide itself: a byte above 0x7f,
 * an escape in a top-level key, a wanted key twice, nesting deeper than
 * 200 levels.
 */
int ca_json_scan_object(const char *text, size_t len, const char *const *keys, size_t nkeys,
	struct ca_json_span *spans, size_t *close);
/*
 * The top-level members of text[0..len), a line libjq has accepted as one
 * object, for passing fields through as they were written: each member's
 * key and value as spans of the text. A member is strict when its key and
 * value are RFC 8259 JSON in valid UTF-8, so its text can be copied to the
 * output as it is (libjq also reads nan, 01, +1 and invalid UTF-8, which
 * must be written anew); key_plain when the key is strict and has no
 * escape, so its bytes between the quotes are its name. Fills
 * (*members)[0..n) (grown with ca_xrealloc; *cap is its capacity) and
 * returns n, or -1 when the text is not laid out as one object.
 */
struct ca_json_member {
	struct ca_json_span key;    /* as written, quotes included */
	struct ca_json_span value;  /* as written */
	int key_plain;
	int strict;
};
long ca_json_members(const char *text, size_t len, struct ca_json_member **members, size_t *cap);
/*
 * jv_parse_sized with a short message: libjq's own quotes the whole text
 * ("... (while parsing '...')"), which made a 100 MB error record of a
 * 100 MB bad line and, past 1 GiB, overflowed an int inside libjq and
 * aborted. Returns the value, or jv_invalid_with_msg(reason).
 */
jv ca_json_parse(const char *text, size_t len);
/*
 * Parse a span holding an array of numbers into *items (grown with
 * ca_xrealloc; *cap is its capacity). Returns the count, or -1 when the
 * span is not an array of finite numbers. Correctly rounded, as strtod.
 */
long ca_json_number_array(struct ca_json_span span, double **items, size_t *cap);
/* A JSON number from text: strtod's result, faster for short decimals. */
double ca_json_strtod(const char *text, char **end);
/*
 * Write x as JSON text that reads back as exactly x (buf holds at least
 * 32 bytes; no NUL is written); returns the length. Not finite: "null".
 */
size_t ca_json_format_double(double x, char *buf);

#endif
