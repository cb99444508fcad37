/* tokenizer: see tokenizer.h. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "err.h"
#include "json.h"
#include "tokenizer.h"
#include "tokenizer_nfc.h"
#include "tokenizer_unicode.h"

/* The pre-tokenizer patterns we implement by hand (see split_piece). */
static const char qwen2_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
	"\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char llama3_pattern[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
	"\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Open-addressing hash of byte strings to ids. */
struct str_map {
	size_t cap;   /* power of two */
	struct { const char *s; size_t len; int id; } *slot;
};

/* Pair (left, right) -> (rank, merged id). */
struct pair_map {
	size_t cap;
	struct { uint64_t key; int rank, id; int used; } *slot;
};

struct added {
	char *content;
	size_t len;
	int id;
};

struct ca_tokenizer {
	int size;
	char **bytes;          /* id -> raw bytes of the token */
	size_t *nbytes;
	int byte_id[256];      /* id of each single byte */
	struct str_map vocab;  /* raw bytes -> id */
	struct pair_map merges;
	int max_digits;        /* 1 (Qwen2) or 3 (Llama 3); 0 until the pre-tokenizer's Split is seen */
	int ignore_merges;
	int nfc;               /* the normalizer is NFC */
	int nadded;
	struct added *added;
};

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static void str_map_init(struct str_map *m, size_t n)
{
	m->cap = 16;
	while (m->cap < 2 * n + 16)
		m->cap *= 2;
	m->slot = ca_xcalloc(m->cap, sizeof *m->slot);
}

/* Insert unless present; the string must outlive the map. */
static void str_map_put(struct str_map *m, const char *s, size_t len, int id)
{
	size_t i = hash_bytes(s, len) & (m->cap - 1);
	while (m->slot[i].s) {
		if (m->slot[i].len == len && memcmp(m->slot[i].s, s, len) == 0)
			return;
		i = (i + 1) & (m->cap - 1);
	}
	m->slot[i].s = s;
	m->slot[i].len = len;
	m->slot[i].id = id;
}

static int str_map_get(const struct str_map *m, const char *s, size_t len)
{
	size_t i = hash_bytes(s, len) & (m->cap - 1);
	while (m->slot[i].s) {
		if (m->slot[i].len == len && memcmp(m->slot[i].s, s, len) == 0)
			return m->slot[i].id;
		i = (i + 1) & (m->cap - 1);
	}
	return -1;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void pair_map_put(struct pair_map *m, int a, int b, int rank, int id)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = mix64(key) & (m->cap - 1);
	while (m->slot[i].used) {
		if (m->slot[i].key == key)
			return;  /* the first (lowest-rank) merge of a pair wins */
		i = (i + 1) & (m->cap - 1);
	}
	m->slot[i].used = 1;
	m->slot[i].key = key;
	m->slot[i].rank = rank;
	m->slot[i].id = id;
}

static int pair_map_get(const struct pair_map *m, int a, int b, int *id)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = mix64(key) & (m->cap - 1);
	while (m->slot[i].used) {
		if (m->slot[i].key == key) {
			*id = m->slot[i].id;
			return m->slot[i].rank;
		}
		i = (i + 1) & (m->cap - 1);
	}
	return -1;
}

/* ---- byte-level alphabet ---- */

/* The code point byte b is shown as (GPT-2's printable remapping). */
static uint32_t byte_to_cp(int b)
{
	if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))
		return (uint32_t)b;
	int k = 0;
	for (int x = 0; x < b; x++)
		if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
			k++;
	return 256u + (uint32_t)k;
}

/* Decode one UTF-8 sequence at s[0..n); returns its length (1 for invalid bytes, *cp = 0xFFFD). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned c = s[0];
	size_t len;
	uint32_t v, min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if ((c & 0xe0) == 0xc0) {
		len = 2, v = c & 0x1f, min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		len = 3, v = c & 0x0f, min = 0x800;
	} else if ((c & 0xf8) == 0xf0) {
		len = 4, v = c & 0x07, min = 0x10000;
	} else {
		*cp = 0xfffd;
		return 1;
	}
	if (len > n) {
		*cp = 0xfffd;
		return 1;
	}
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) {
			*cp = 0xfffd;
			return 1;
		}
		v = v << 6 | (s[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
		*cp = 0xfffd;
		return 1;
	}
	*cp = v;
	return len;
}

/* A token string of the byte-level alphabet back to raw bytes; -1 if a char is outside it. */
static int token_to_bytes(const char *s, size_t n, const int cp_to_byte[324], char *out, size_t *outlen)
{
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += utf8_decode((const unsigned char *)s + i, n - i, &cp);
		if (cp >= 324 || cp_to_byte[cp] < 0)
			return -1;
		out[k++] = (char)cp_to_byte[cp];
	}
	*outlen = k;
	return 0;
}

/* ---- character classes ---- */

static int in_ranges(uint32_t c, const uint32_t (*r)[2], size_t n)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < r[mid][0])
			hi = mid;
		else if (c > r[mid][1])
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

static int is_letter(uint32_t c)
{
	if (c < 128)
		return (c | 32) >= 'a' && (c | 32) <= 'z';
	return in_ranges(c, letter_ranges, sizeof letter_ranges / sizeof letter_ranges[0]);
}

static int is_number(uint32_t c)
{
	if (c < 128)
		return c >= '0' && c <= '9';
	return in_ranges(c, number_ranges, sizeof number_ranges / sizeof number_ranges[0]);
}

static int is_space(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

static int is_newline(uint32_t c)
{
	return c == '\r' || c == '\n';
}

static uint32_t fold(uint32_t c)
{
	if (c < 128 && c >= 'A' && c <= 'Z')
		return c | 32;
	if (c == 0x17f)  /* long s folds to s */
		return 's';
	return c;
}

/*
 * The end (exclusive) of the pre-token starting at cp[i]: the first
 * alternative of the pattern that matches, as the regex engine finds it.
 */
static size_t match_at(const uint32_t *cp, size_t n, size_t i, int max_digits)
{
	uint32_t c = cp[i];
	/* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
	if (c == '\'' && i + 1 < n) {
		uint32_t a = fold(cp[i + 1]), b = i + 2 < n ? fold(cp[i + 2]) : 0;
		if (a == 's' || a == 't' || a == 'm' || a == 'd')
			return i + 2;
		if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
			return i + 3;
	}
	/* [^\r\n\p{L}\p{N}]?\p{L}+ */
	size_t j = i;
	if (!is_letter(c) && !is_number(c) && !is_newline(c) && i + 1 < n && is_letter(cp[i + 1]))
		j = i + 1;
	if (is_letter(cp[j])) {
		while (j < n && is_letter(cp[j]))
			j++;
		return j;
	}
	/* \p{N} or \p{N}{1,3} */
	if (is_number(c)) {
		j = i;
		while (j < n && j - i < (size_t)max_digits && is_number(cp[j]))
			j++;
		return j;
	}
	/* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
	j = c == ' ' ? i + 1 : i;
	if (j < n && !is_space(cp[j]) && !is_letter(cp[j]) && !is_number(cp[j])) {
		while (j < n && !is_space(cp[j]) && !is_letter(cp[j]) && !is_number(cp[j]))
			j++;
		while (j < n && is_newline(cp[j]))
			j++;
		return j;
	}
	if (is_space(c)) {
		size_t e = i;
		while (e < n && is_space(cp[e]))
			e++;
		/* \s*[\r\n]+ : up to and including the run's last line break */
		size_t p = e;
		while (p > i && !is_newline(cp[p - 1]))
			p--;
		if (p > i)
			return p;
		/* \s+(?!\S) : all of the run at the end, else all but its last char */
		if (e == n)
			return e;
		if (e - i >= 2)
			return e - 1;
		return e;  /* \s+ */
	}
	return i + 1;
}

/* ---- BPE ---- */

static void push_id(int **ids, size_t *n, size_t *cap, int id)
{
	if (*n == *cap)
		*ids = ca_xrealloc(*ids, sizeof **ids * (*cap = *cap ? 2 * *cap : 64));
	(*ids)[(*n)++] = id;
}

static void bpe_piece(const struct ca_tokenizer *t, const char *s, size_t len, int **ids, size_t *n,
		      size_t *cap)
{
	if (t->ignore_merges) {
		int whole = str_map_get(&t->vocab, s, len);
		if (whole >= 0) {
			push_id(ids, n, cap, whole);
			return;
		}
	}
	int stack[64];
	int *sym = len <= 64 ? stack : ca_xmalloc(sizeof(int) * len);
	size_t m = len;
	for (size_t i = 0; i < len; i++)
		sym[i] = t->byte_id[(unsigned char)s[i]];
	for (;;) {
		int best_rank = INT_MAX, best_id = -1;
		size_t best_at = 0;
		for (size_t i = 0; i + 1 < m; i++) {
			int id, rank = pair_map_get(&t->merges, sym[i], sym[i + 1], &id);
			if (rank >= 0 && rank < best_rank) {
				best_rank = rank;
				best_id = id;
				best_at = i;
			}
		}
		if (best_id < 0)
			break;
		sym[best_at] = best_id;
		memmove(sym + best_at + 1, sym + best_at + 2, sizeof(int) * (m - best_at - 2));
		m--;
	}
	for (size_t i = 0; i < m; i++)
		push_id(ids, n, cap, sym[i]);
	if (sym != stack)
		free(sym);
}


/* ---- NFC (Unicode canonical composition), for an "NFC" normalizer ---- */

/* A byte that is not UTF-8, kept as it is (above every code point, so it composes with nothing). */
#define NFC_RAW_BYTE 0x80000000u

enum { HANGUL_S = 0xac00, HANGUL_L = 0x1100, HANGUL_V = 0x1161, HANGUL_T = 0x11a7,
       HANGUL_LCOUNT = 19, HANGUL_VCOUNT = 21, HANGUL_TCOUNT = 28, HANGUL_NCOUNT = 588, HANGUL_SCOUNT = 11172 };

static int nfc_class(uint32_t c)
{
	size_t lo = 0, hi = sizeof nfc_ccc / sizeof nfc_ccc[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < nfc_ccc[mid].first)
			hi = mid;
		else if (c > nfc_ccc[mid].last)
			lo = mid + 1;
		else
			return nfc_ccc[mid].ccc;
	}
	return 0;
}

static void push_cp(uint32_t **out, size_t *n, size_t *cap, uint32_t c)
{
	if (*n == *cap)
		*out = ca_xrealloc(*out, sizeof **out * (*cap = *cap ? 2 * *cap : 64));
	(*out)[(*n)++] = c;
}

/* Append the full canonical decomposition of c. */
static void nfc_decompose(uint32_t c, uint32_t **out, size_t *n, size_t *cap)
{
	if (c >= HANGUL_S && c < HANGUL_S + HANGUL_SCOUNT) {
		uint32_t s = c - HANGUL_S;
		push_cp(out, n, cap, HANGUL_L + s / HANGUL_NCOUNT);
		push_cp(out, n, cap, HANGUL_V + s % HANGUL_NCOUNT / HANGUL_TCOUNT);
		if (s % HANGUL_TCOUNT)
			push_cp(out, n, cap, HANGUL_T + s % HANGUL_TCOUNT);
		return;
	}
	size_t lo = 0, hi = sizeof nfc_decomp / sizeof nfc_decomp[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (c < nfc_decomp[mid].cp) {
			hi = mid;
		} else if (c > nfc_decomp[mid].cp) {
			lo = mid + 1;
		} else {
			nfc_decompose(nfc_decomp[mid].first, out, n, cap);
			if (nfc_decomp[mid].second)
				nfc_decompose(nfc_decomp[mid].second, out, n, cap);
			return;
		}
	}
	push_cp(out, n, cap, c);
}

/* The primary composite of a and b, or 0. */
static uint32_t nfc_compose(uint32_t a, uint32_t b)
{
	if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LCOUNT && b >= HANGUL_V && b < HANGUL_V + HANGUL_VCOUNT)
		return HANGUL_S + ((a - HANGUL_L) * HANGUL_VCOUNT + (b - HANGUL_V)) * HANGUL_TCOUNT;
	if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SCOUNT && (a - HANGUL_S) % HANGUL_TCOUNT == 0 && b > HANGUL_T &&
	    b < HANGUL_T + HANGUL_TCOUNT)
		return a + (b - HANGUL_T);
	size_t lo = 0, hi = sizeof nfc_comp / sizeof nfc_comp[0];
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (a < nfc_comp[mid].first || (a == nfc_comp[mid].first && b < nfc_comp[mid].second))
			hi = mid;
		else if (a > nfc_comp[mid].first || b > nfc_comp[mid].second)
			lo = mid + 1;
		else
			return nfc_comp[mid].cp;
	}
	return 0;
}

static size_t utf8_encode(uint32_t c, char *out)
{
	if (c < 0x80) {
		out[0] = (char)c;
		return 1;
	} else if (c < 0x800) {
		out[0] = (char)(0xc0 | c >> 6);
		out[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	} else if (c < 0x10000) {
		out[0] = (char)(0xe0 | c >> 12);
		out[1] = (char)(0x80 | (c >> 6 & 0x3f));
		out[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | c >> 18);
	out[1] = (char)(0x80 | (c >> 12 & 0x3f));
	out[2] = (char)(0x80 | (c >> 6 & 0x3f));
	out[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/*
 * text[0..len) in NFC: decompose, order the combining marks by class,
 * recompose (UAX #15). Returns malloc'd bytes and *outlen, or NULL when
 * the text is NFC already because every code point is below U+0300 (no
 * combining mark, composition exclusion or composable pair lives there).
 * Bytes that are not UTF-8 pass through unchanged, as starters.
 */
static char *nfc_normalize(const char *text, size_t len, size_t *outlen)
{
	size_t i = 0;
	while (i < len && (unsigned char)text[i] < 0xcc)   /* 0xcc leads U+0300..U+033F */
		i++;
	if (i == len)
		return NULL;
	uint32_t *d = NULL;
	size_t n = 0, cap = 0;
	for (i = 0; i < len;) {
		uint32_t c;
		size_t step = utf8_decode((const unsigned char *)text + i, len - i, &c);
		if (step == 1 && (unsigned char)text[i] >= 0x80)
			push_cp(&d, &n, &cap, NFC_RAW_BYTE | (unsigned char)text[i]);
		else
			nfc_decompose(c, &d, &n, &cap);
		i += step;
	}
	/* Canonical order: a stable insertion sort of each run of non-starters by class. */
	for (size_t k = 1; k < n; k++) {
		int cls = nfc_class(d[k]);
		if (cls == 0)
			continue;
		uint32_t c = d[k];
		size_t j = k;
		while (j > 0 && nfc_class(d[j - 1]) > cls) {
			d[j] = d[j - 1];
			j--;
		}
		d[j] = c;
	}
	size_t m = n ? 1 : 0, starter = 0;
	int last = n && nfc_class(d[0]) ? 256 : 0;
	for (size_t k = 1; k < n; k++) {
		uint32_t c = d[k], composite;
		int cls = nfc_class(c);
		if ((last < cls || last == 0) && (composite = nfc_compose(d[starter], c)) != 0) {
			d[starter] = composite;
			continue;
		}
		if (cls == 0)
			starter = m;
		last = cls;
		d[m++] = c;
	}
	char *out = ca_xmalloc(4 * m + 1);
	size_t o = 0;
	for (size_t k = 0; k < m; k++)
		if (d[k] & NFC_RAW_BYTE)
			out[o++] = (char)(d[k] & 0xff);
		else
			o += utf8_encode(d[k], out + o);
	free(d);
	*outlen = o;
	return out;
}

/* Normalise, pre-tokenize and encode one stretch of text without added tokens. */
static void encode_plain(const struct ca_tokenizer *t, const char *text, size_t len, int **ids, size_t *n,
			 size_t *cap)
{
	if (len == 0)
		return;
	size_t nlen;
	char *normal = t->nfc ? nfc_normalize(text, len, &nlen) : NULL;
	if (normal) {
		text = normal;
		len = nlen;
	}
	uint32_t *cp = ca_xmalloc(sizeof *cp * len);
	size_t *off = ca_xmalloc(sizeof *off * (len + 1));
	size_t ncp = 0;
	for (size_t i = 0; i < len;) {
		off[ncp] = i;
		i += utf8_decode((const unsigned char *)text + i, len - i, &cp[ncp]);
		ncp++;
	}
	off[ncp] = len;
	for (size_t i = 0; i < ncp;) {
		size_t e = match_at(cp, ncp, i, t->max_digits);
		bpe_piece(t, text + off[i], off[e] - off[i], ids, n, cap);
		i = e;
	}
	free(cp);
	free(off);
	free(normal);
}

size_t ca_tokenizer_encode(const struct ca_tokenizer *t, const char *text, size_t len, int **ids)
{
	size_t n = 0, cap = 0;
	*ids = NULL;
	size_t start = 0;
	for (size_t i = 0; i < len;) {
		int best = -1;
		for (int a = 0; a < t->nadded; a++)
			if (t->added[a].len > 0 && t->added[a].len <= len - i &&
			    memcmp(text + i, t->added[a].content, t->added[a].len) == 0 &&
			    (best < 0 || t->added[a].len > t->added[best].len))
				best = a;
		if (best < 0) {
			i++;
			continue;
		}
		encode_plain(t, text + start, i - start, ids, &n, &cap);
		push_id(ids, &n, &cap, t->added[best].id);
		i += t->added[best].len;
		start = i;
	}
	encode_plain(t, text + start, len - start, ids, &n, &cap);
	if (!*ids)
		*ids = ca_xmalloc(sizeof(int));
	return n;
}

char *ca_tokenizer_decode(const struct ca_tokenizer *t, const int *ids, size_t n, size_t *len)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= 0 && ids[i] < t->size && t->bytes[ids[i]])
			total += t->nbytes[ids[i]];
	char *out = ca_xmalloc(total + 1), *p = out;
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= 0 && ids[i] < t->size && t->bytes[ids[i]]) {
			memcpy(p, t->bytes[ids[i]], t->nbytes[ids[i]]);
			p += t->nbytes[ids[i]];
		}
	*p = 0;
	*len = total;
	return out;
}

int ca_tokenizer_added_id(const struct ca_tokenizer *t, const char *content)
{
	for (int a = 0; a < t->nadded; a++)
		if (strcmp(t->added[a].content, content) == 0)
			return t->added[a].id;
	return -1;
}

int ca_tokenizer_size(const struct ca_tokenizer *t)
{
	return t->size;
}

void ca_tokenizer_free(struct ca_tokenizer *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->size; i++)
		free(t->bytes[i]);
	free(t->bytes);
	free(t->nbytes);
	free(t->vocab.slot);
	free(t->merges.slot);
	for (int a = 0; a < t->nadded; a++)
		free(t->added[a].content);
	free(t->added);
	free(t);
}

/* ---- loading ---- */

/* The steps of a normalizer or pre-tokenizer: the array field of a Sequence, or node alone. Borrows node. */
static jv sequence_steps(jv node, const char *field)
{
	jv list = jv_get_kind(node) == JV_KIND_OBJECT ? jv_object_get(jv_copy(node), jv_string(field)) : jv_invalid();
	if (jv_get_kind(list) != JV_KIND_ARRAY) {
		jv_free(list);
		list = JV_ARRAY(jv_copy(node));
	}
	return list;
}

/*
 * A step's check, given its "type" (NULL where that is no string): 0, or -1
 * with why set where the step is refused. Borrows step.
 */
typedef int step_check_fn(struct ca_tokenizer *t, jv step, const char *type, char why[CA_TOKENIZER_WHY]);

/* Check each step of a normalizer or pre-tokenizer (see sequence_steps) until one is refused. Consumes node. */
static int check_steps(struct ca_tokenizer *t, jv node, const char *field, step_check_fn *check,
	char why[CA_TOKENIZER_WHY])
{
	jv list = sequence_steps(node, field);
	int rc = 0;
	for (int i = 0; i < jv_array_length(jv_copy(list)) && rc == 0; i++) {
		jv step = jv_array_get(jv_copy(list), i);
		jv type = jv_get_kind(step) == JV_KIND_OBJECT ? jv_object_get(jv_copy(step), jv_string("type")) : jv_invalid();
		rc = check(t, step, jv_get_kind(type) == JV_KIND_STRING ? jv_string_value(type) : NULL, why);
		jv_free(type);
		jv_free(step);
	}
	jv_free(list);
	jv_free(node);
	return rc;
}

static int check_normalizer_step(struct ca_tokenizer *t, jv step, const char *type, char why[CA_TOKENIZER_WHY])
{
	(void)step;
	if (type && strcmp(type, "NFC") == 0) {
		t->nfc = 1;
		return 0;
	}
	ca_err_why(why, CA_TOKENIZER_WHY, "tokenizer.json: normalizer %s is not supported (NFC only)",
		type ? type : "(none)");
	return -1;
}

/* The normalizer: none, or NFC (alone or in a Sequence); anything else is refused. Consumes norm. */
static int check_normalizer(struct ca_tokenizer *t, jv norm, char why[CA_TOKENIZER_WHY])
{
	if (jv_get_kind(norm) == JV_KIND_NULL || !jv_is_valid(norm)) {
		jv_free(norm);
		return 0;
	}
	return check_steps(t, norm, "normalizers", check_normalizer_step, why);
}

/* A Split step decides which pattern it is (t->max_digits); a ByteLevel step must not split or add a space. */
static int check_pre_tokenizer_step(struct ca_tokenizer *t, jv step, const char *type, char why[CA_TOKENIZER_WHY])
{
	int rc = 0;
	if (!type)
		type = "";
	if (strcmp(type, "Split") == 0) {
		jv re = jv_object_get(jv_object_get(jv_copy(step), jv_string("pattern")), jv_string("Regex"));
		const char *s = jv_get_kind(re) == JV_KIND_STRING ? jv_string_value(re) : "";
		if (strcmp(s, qwen2_pattern) == 0) {
			t->max_digits = 1;
		} else if (strcmp(s, llama3_pattern) == 0) {
			t->max_digits = 3;
		} else {
			ca_err_why(why, CA_TOKENIZER_WHY, "tokenizer.json: unsupported pre-tokenizer pattern (Qwen2 and Llama 3 only)");
			rc = -1;
		}
		jv_free(re);
	} else if (strcmp(type, "ByteLevel") == 0) {
		jv use = jv_object_get(jv_copy(step), jv_string("use_regex"));
		jv prefix = jv_object_get(jv_copy(step), jv_string("add_prefix_space"));
		if (jv_get_kind(use) == JV_KIND_TRUE || jv_get_kind(prefix) == JV_KIND_TRUE) {
			ca_err_why(why, CA_TOKENIZER_WHY, "tokenizer.json: ByteLevel with use_regex or add_prefix_space is not supported");
			rc = -1;
		}
		jv_free(use);
		jv_free(prefix);
	} else {
		ca_err_why(why, CA_TOKENIZER_WHY, "tokenizer.json: pre-tokenizer %s is not supported", type);
		rc = -1;
	}
	return rc;
}

/* The pre-tokenizer: a Split of a pattern we know, and at most a plain ByteLevel beside it. Consumes pre. */
static int check_pre_tokenizer(struct ca_tokenizer *t, jv pre, char why[CA_TOKENIZER_WHY])
{
	if (check_steps(t, pre, "pretokenizers", check_pre_tokenizer_step, why) < 0)
		return -1;
	if (!t->max_digits) {
		ca_err_why(why, CA_TOKENIZER_WHY,
			"tokenizer.json: no Split pre-tokenizer (byte-level BPE of Qwen2/Llama 3 expected)");
		return -1;
	}
	return 0;
}

/* A merge entry: "a b" (older files) or ["a", "b"]. */
static int merge_parts(jv m, const char **a, size_t *alen, const char **b, size_t *blen, jv *hold)
{
	if (jv_get_kind(m) == JV_KIND_STRING) {
		const char *s = jv_string_value(m);
		const char *sp = strchr(s, ' ');
		if (!sp)
			return -1;
		*a = s, *alen = (size_t)(sp - s), *b = sp + 1, *blen = strlen(sp + 1);
		*hold = m;
		return 0;
	}
	if (jv_get_kind(m) == JV_KIND_ARRAY && jv_array_length(jv_copy(m)) == 2) {
		jv x = jv_array_get(jv_copy(m), 0), y = jv_array_get(jv_copy(m), 1);
		if (jv_get_kind(x) != JV_KIND_STRING || jv_get_kind(y) != JV_KIND_STRING) {
			jv_free(x), jv_free(y), jv_free(m);
			return -1;
		}
		hold[0] = x, hold[1] = y;
		jv_free(m);
		*a = jv_string_value(x), *alen = (size_t)jv_string_length_bytes(jv_copy(x));
		*b = jv_string_value(y), *blen = (size_t)jv_string_length_bytes(jv_copy(y));
		return 1;
	}
	jv_free(m);
	return -1;
}

/* A directory means its tokenizer.json. */
static void tokenizer_file(const char *path, char *file, size_t size)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		snprintf(file, size, "%s/tokenizer.json", path);
	else
		snprintf(file, size, "%s", path);
}

static int is_bpe(jv model)
{
	jv type = jv_get_kind(model) == JV_KIND_OBJECT ? jv_object_get(jv_copy(model), jv_string("type")) : jv_invalid();
	int bpe = jv_get_kind(type) == JV_KIND_STRING && strcmp(jv_string_value(type), "BPE") == 0;
	jv_free(type);
	return bpe;
}

/* The added tokens (borrowed) into t->added; the largest id among them, or -1. */
static int read_added(struct ca_tokenizer *t, jv added)
{
	int maxid = -1;
	int nadded = jv_get_kind(added) == JV_KIND_ARRAY ? jv_array_length(jv_copy(added)) : 0;
	t->added = ca_xcalloc((size_t)nadded + 1, sizeof *t->added);
	for (int i = 0; i < nadded; i++) {
		jv a = jv_array_get(jv_copy(added), i);
		jv content = jv_object_get(jv_copy(a), jv_string("content"));
		jv id = jv_object_get(a, jv_string("id"));
		if (jv_get_kind(content) == JV_KIND_STRING && jv_get_kind(id) == JV_KIND_NUMBER) {
			struct added *x = &t->added[t->nadded++];
			x->content = ca_xstrdup(jv_string_value(content));
			x->len = strlen(x->content);
			x->id = (int)jv_number_value(id);
			if (x->id > maxid)
				maxid = x->id;
		}
		jv_free(content);
		jv_free(id);
	}
	return maxid;
}

/* The largest id in the vocabulary (borrowed), or -1. */
static int vocab_max_id(jv vocab)
{
	int maxid = -1;
	jv_object_foreach(vocab, k, v) {
		if (jv_get_kind(v) == JV_KIND_NUMBER && jv_number_value(v) > maxid)
			maxid = (int)jv_number_value(v);
		jv_free(k);
		jv_free(v);
	}
	return maxid;
}

/*
 * Each token's bytes: the vocabulary's (borrowed) byte-level strings
 * decoded, the added tokens' content over them; then the map from bytes
 * to id. buf holds 64 KiB.
 */
static void read_vocab(struct ca_tokenizer *t, jv vocab, const int *cp_to_byte, char *buf)
{
	t->bytes = ca_xcalloc((size_t)t->size, sizeof *t->bytes);
	t->nbytes = ca_xcalloc((size_t)t->size, sizeof *t->nbytes);
	str_map_init(&t->vocab, (size_t)t->size);
	jv_object_foreach(vocab, k, v) {
		size_t klen = (size_t)jv_string_length_bytes(jv_copy(k)), blen;
		int id = jv_get_kind(v) == JV_KIND_NUMBER ? (int)jv_number_value(v) : -1;
		if (id >= 0 && klen < (1 << 16) &&
		    token_to_bytes(jv_string_value(k), klen, cp_to_byte, buf, &blen) == 0 && !t->bytes[id]) {
			t->bytes[id] = ca_xmalloc(blen + 1);
			memcpy(t->bytes[id], buf, blen);
			t->nbytes[id] = blen;
		}
		jv_free(k);
		jv_free(v);
	}
	for (int a = 0; a < t->nadded; a++) {
		int id = t->added[a].id;
		free(t->bytes[id]);
		t->bytes[id] = ca_xstrdup(t->added[a].content);
		t->nbytes[id] = t->added[a].len;
	}
	for (int id = 0; id < t->size; id++)
		if (t->bytes[id])
			str_map_put(&t->vocab, t->bytes[id], t->nbytes[id], id);
}

/* Every byte must have its own token: a byte-level BPE can then encode any text. */
static int find_byte_tokens(struct ca_tokenizer *t, const char *file, char why[CA_TOKENIZER_WHY])
{
	for (int b = 0; b < 256; b++) {
		char c = (char)b;
		t->byte_id[b] = str_map_get(&t->vocab, &c, 1);
		if (t->byte_id[b] < 0) {
			ca_err_why(why, CA_TOKENIZER_WHY, "%s: byte %d has no token (not a byte-level vocabulary)", file, b);
			return -1;
		}
	}
	return 0;
}

/* The merges (borrowed), by rank, into t->merges; -1 with why set at one not made of vocabulary tokens. */
static int read_merges(struct ca_tokenizer *t, jv merges, const int *cp_to_byte, char *buf, const char *file,
	char why[CA_TOKENIZER_WHY])
{
	int nmerges = jv_array_length(jv_copy(merges));
	t->merges.cap = 16;
	while (t->merges.cap < 2 * (size_t)nmerges + 16)
		t->merges.cap *= 2;
	t->merges.slot = ca_xcalloc(t->merges.cap, sizeof *t->merges.slot);
	for (int r = 0; r < nmerges; r++) {
		const char *a, *b;
		size_t alen, blen, ra, rb;
		jv hold[2] = {jv_invalid(), jv_invalid()};
		int kind = merge_parts(jv_array_get(jv_copy(merges), r), &a, &alen, &b, &blen, hold);
		int bad = kind < 0 || alen + blen >= (1 << 15) ||
			  token_to_bytes(a, alen, cp_to_byte, buf, &ra) < 0 ||
			  token_to_bytes(b, blen, cp_to_byte, buf + ra, &rb) < 0;
		int ia = -1, ib = -1, im = -1;
		if (!bad) {
			ia = str_map_get(&t->vocab, buf, ra);
			ib = str_map_get(&t->vocab, buf + ra, rb);
			im = str_map_get(&t->vocab, buf, ra + rb);
		}
		jv_free(hold[0]);
		jv_free(hold[1]);
		if (bad || ia < 0 || ib < 0 || im < 0) {
			ca_err_why(why, CA_TOKENIZER_WHY, "%s: merge %d is not made of vocabulary tokens", file, r);
			return -1;
		}
		pair_map_put(&t->merges, ia, ib, r, im);
	}
	return 0;
}

/* Fill t from tokenizer.json's root object (borrowed); -1 with why set where it is not a byte-level BPE we support. */
static int load_bpe(struct ca_tokenizer *t, jv root, const char *file, char why[CA_TOKENIZER_WHY])
{
	jv model = jv_object_get(jv_copy(root), jv_string("model"));
	jv vocab = jv_invalid(), merges = jv_invalid(), added = jv_invalid();
	int cp_to_byte[324];
	char *buf = NULL;
	int ok = -1;
	if (!is_bpe(model)) {
		ca_err_why(why, CA_TOKENIZER_WHY, "%s: model type is not BPE", file);
		goto out;
	}
	if (check_pre_tokenizer(t, jv_object_get(jv_copy(root), jv_string("pre_tokenizer")), why) < 0 ||
	    check_normalizer(t, jv_object_get(jv_copy(root), jv_string("normalizer")), why) < 0)
		goto out;
	t->ignore_merges = jv_get_kind(jv_object_get(jv_copy(model), jv_string("ignore_merges"))) == JV_KIND_TRUE;
	vocab = jv_object_get(jv_copy(model), jv_string("vocab"));
	merges = jv_object_get(jv_copy(model), jv_string("merges"));
	added = jv_object_get(jv_copy(root), jv_string("added_tokens"));
	if (jv_get_kind(vocab) != JV_KIND_OBJECT || jv_get_kind(merges) != JV_KIND_ARRAY) {
		ca_err_why(why, CA_TOKENIZER_WHY, "%s: model.vocab or model.merges missing", file);
		goto out;
	}
	/* Size: the largest id in the vocabulary or the added tokens, plus one. */
	int maxid = vocab_max_id(vocab), added_max = read_added(t, added);
	if (added_max > maxid)
		maxid = added_max;
	if (maxid < 0 || maxid > 10000000) {
		ca_err_why(why, CA_TOKENIZER_WHY, "%s: bad vocabulary size", file);
		goto out;
	}
	t->size = maxid + 1;
	for (int i = 0; i < 324; i++)
		cp_to_byte[i] = -1;
	for (int b = 0; b < 256; b++)
		cp_to_byte[byte_to_cp(b)] = b;
	buf = ca_xmalloc(1 << 16);
	read_vocab(t, vocab, cp_to_byte, buf);
	if (find_byte_tokens(t, file, why) < 0 || read_merges(t, merges, cp_to_byte, buf, file, why) < 0)
		goto out;
	ok = 0;
out:
	free(buf);
	jv_free(vocab);
	jv_free(merges);
	jv_free(added);
	jv_free(model);
	return ok;
}

struct ca_tokenizer *ca_tokenizer_load(const char *path, char why[CA_TOKENIZER_WHY])
{
	char file[PATH_MAX];
	tokenizer_file(path, file, sizeof file);
	jv root = ca_json_read_object(file, why, CA_TOKENIZER_WHY);
	if (!jv_is_valid(root))
		return NULL;
	struct ca_tokenizer *t = ca_xcalloc(1, sizeof *t);
	int ok = load_bpe(t, root, file, why) == 0;
	jv_free(root);
	if (!ok) {
		ca_tokenizer_free(t);
		return NULL;
	}
	return t;
}

/* ---- chat formats ---- */

static void append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
	while (*len + n + 1 > *cap)
		*buf = ca_xrealloc(*buf, *cap = *cap ? 2 * *cap : 256);
	memcpy(*buf + *len, s, n);
	*len += n;
	(*buf)[*len] = 0;
}

#define APPEND(s) append(&out, &len, &cap, (s), strlen(s))

char *ca_tokenizer_chat(const struct ca_tokenizer *t, jv messages, int add_generation_prompt,
			int *stop_id, char why[CA_TOKENIZER_WHY])
{
	int chatml = ca_tokenizer_added_id(t, "<|im_start|>") >= 0;
	int llama3 = ca_tokenizer_added_id(t, "<|start_header_id|>") >= 0;
	if (!chatml && !llama3) {
		ca_err_why(why, CA_TOKENIZER_WHY, "the tokenizer has no chat tokens (<|im_start|> or <|start_header_id|>)");
		return NULL;
	}
	if (jv_get_kind(messages) != JV_KIND_ARRAY) {
		ca_err_why(why, CA_TOKENIZER_WHY, "messages is not an array");
		return NULL;
	}
	char *out = NULL;
	size_t len = 0, cap = 0;
	append(&out, &len, &cap, "", 0);
	if (llama3 && ca_tokenizer_added_id(t, "<|begin_of_text|>") >= 0)
		APPEND("<|begin_of_text|>");
	int n = jv_array_length(jv_copy(messages));
	for (int i = 0; i < n; i++) {
		jv m = jv_array_get(jv_copy(messages), i);
		jv role = jv_get_kind(m) == JV_KIND_OBJECT ? jv_object_get(jv_copy(m), jv_string("role")) : jv_invalid();
		jv content = jv_get_kind(m) == JV_KIND_OBJECT ? jv_object_get(jv_copy(m), jv_string("content")) : jv_invalid();
		int good = jv_get_kind(role) == JV_KIND_STRING && jv_get_kind(content) == JV_KIND_STRING;
		if (good && chatml) {
			APPEND("<|im_start|>");
			APPEND(jv_string_value(role));
			APPEND("\n");
			APPEND(jv_string_value(content));
			APPEND("<|im_end|>\n");
		} else if (good) {
			APPEND("<|start_header_id|>");
			APPEND(jv_string_value(role));
			APPEND("<|end_header_id|>\n\n");
			APPEND(jv_string_value(content));
			APPEND("<|eot_id|>");
		}
		jv_free(role);
		jv_free(content);
		jv_free(m);
		if (!good) {
			ca_err_why(why, CA_TOKENIZER_WHY, "message %d lacks a string role or content", i);
			free(out);
			return NULL;
		}
	}
	if (add_generation_prompt)
		APPEND(chatml ? "<|im_start|>assistant\n" : "<|start_header_id|>assistant<|end_header_id|>\n\n");
	*stop_id = ca_tokenizer_added_id(t, chatml ? "<|im_end|>" : "<|eot_id|>");
	return out;
}
