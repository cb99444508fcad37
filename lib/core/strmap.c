/* strmap: see strmap.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "strmap.h"

struct slot {
	char *key;  /* NULL: empty */
	size_t len;
	uint64_t hash;
	long value;
};

struct ca_strmap {
	struct slot *slots;
	size_t cap, n;  /* cap is a power of two, kept at least twice n */
};

static uint64_t fnv1a(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

struct ca_strmap *ca_strmap_new(void)
{
	struct ca_strmap *m = ca_xcalloc(1, sizeof *m);
	m->cap = 64;
	m->slots = ca_xcalloc(m->cap, sizeof *m->slots);
	return m;
}

void ca_strmap_free(struct ca_strmap *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->cap; i++)
		free(m->slots[i].key);
	free(m->slots);
	free(m);
}

/* The slot holding key, or the empty slot where it belongs. */
static struct slot *find(const struct ca_strmap *m, const char *key, size_t len, uint64_t hash)
{
	size_t i = (size_t)hash & (m->cap - 1);
	for (;;) {
		struct slot *s = &m->slots[i];
		if (!s->key || (s->hash == hash && s->len == len && memcmp(s->key, key, len) == 0))
			return s;
		i = (i + 1) & (m->cap - 1);
	}
}

static void grow(struct ca_strmap *m)
{
	struct ca_strmap bigger = {ca_xcalloc(m->cap * 2, sizeof *m->slots), m->cap * 2, m->n};
	for (size_t i = 0; i < m->cap; i++)
		if (m->slots[i].key)
			*find(&bigger, m->slots[i].key, m->slots[i].len, m->slots[i].hash) = m->slots[i];
	free(m->slots);
	*m = bigger;
}

long ca_strmap_get(const struct ca_strmap *m, const char *key, size_t len)
{
	const struct slot *s = find(m, key, len, fnv1a(key, len));
	return s->key ? s->value : -1;
}

long ca_strmap_put(struct ca_strmap *m, const char *key, size_t len, long value)
{
	if (2 * (m->n + 1) > m->cap)
		grow(m);
	uint64_t hash = fnv1a(key, len);
	struct slot *s = find(m, key, len, hash);
	if (s->key)
		return s->value;
	s->key = memcpy(ca_xmalloc(len + 1), key, len);
	s->key[len] = '\0';
	s->len = len;
	s->hash = hash;
	s->value = value;
	m->n++;
	return value;
}
