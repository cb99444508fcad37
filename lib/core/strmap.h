/*
 * strmap: a table from strings to numbers, for commands that group or join
 * records by a key (ca-best by trajectory id, and by file set).
 *
 * Keys are any bytes with a length (a JSON string may hold NUL) and are
 * copied into the table; values are the caller's indices. Lookups and
 * insertions take constant time on average (open addressing, FNV-1a), so a
 * command's time grows with its input, not with its square.
 */
#ifndef CA_STRMAP_H
#define CA_STRMAP_H

#include <stddef.h>

struct ca_strmap;

struct ca_strmap *ca_strmap_new(void);
void ca_strmap_free(struct ca_strmap *m);
/* The value stored for key[0..len), or -1 when there is none. */
long ca_strmap_get(const struct ca_strmap *m, const char *key, size_t len);
/*
 * Store value (>= 0) for key[0..len) unless the key is there already.
 * Returns the value the key now has: value when it was new, else the old one.
 */
long ca_strmap_put(struct ca_strmap *m, const char *key, size_t len, long value);

#endif
