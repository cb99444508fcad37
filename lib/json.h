/*
 * json: small helpers over libjq's jv that several commands need:
 * dotted-path lookup, typed getters, and setting a field in place.
 * All getters borrow their jv arguments.
 */
#ifndef CA_JSON_H
#define CA_JSON_H

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
/* jv number, or null when x is not finite (JSON has no NaN/Inf). */
jv ca_json_num_or_null(double x);

#endif
