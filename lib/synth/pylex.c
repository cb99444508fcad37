/* pylex: see pylex.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "pylex.h"

/* How many times an API name (torch.relu's "relu") is counted. */
#define CA_PYLEX_API_WEIGHT 3

/* ---------------------------------------------------------------- tokenizer */

struct toks {
	struct ca_pylex_token *v;
	size_t n, cap;
};

static void push(struct toks *t, enum ca_pylex_kind kind, const char *text, size_t len, int line)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 256;
		t->v = ca_xrealloc(t->v, t->cap * sizeof *t->v);
	}
	t->v[t->n++] = (struct ca_pylex_token){kind, text, len, line};
}

static int is_name_start(unsigned char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

static int is_name_char(unsigned char c)
{
	return is_name_start(c) || (c >= '0' && c <= '9');
}

static int is_string_prefix(const char *s, size_t n)
{
	if (n == 0 || n > 2)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strchr("rRbBuUfF", s[i]))
			return 0;
	return 1;
}

static const char *const ops3[] = {"**=", "//=", ">>=", "<<=", "...", NULL};
static const char *const ops2[] = {"**", "//", "==", "!=", "<=", ">=", "->", "+=", "-=", "*=", "/=",
                                   "%=", "&=", "|=", "^=", "<<", ">>", ":=", "@=", NULL};

/* The tokenizer's state: the source, where it is, the tokens so far, the open indentation levels and brackets. */
struct lexer {
	const char *src;
	size_t len, i;
	struct toks t;
	int indents[256];
	int nindent, depth, line, at_line_start;
	const char *why;
};

enum { LINE_TOKENS, LINE_SKIPPED, LINE_END, LINE_FAIL };

/*
 * At the start of a logical line: a blank or comment-only line skipped
 * (LINE_SKIPPED), the end of the source (LINE_END), or the line's
 * indentation turned into INDENT or DEDENT tokens (LINE_TOKENS; LINE_FAIL
 * with x->why).
 */
static int line_start(struct lexer *x)
{
	const char *src = x->src;
	int col = 0;
	size_t j = x->i;
	while (j < x->len && (src[j] == ' ' || src[j] == '\t' || src[j] == '\f')) {
		col = src[j] == '\t' ? (col / 8 + 1) * 8 : src[j] == ' ' ? col + 1 : 0;
		j++;
	}
	if (j >= x->len)
		return LINE_END;
	if (src[j] == '#' || src[j] == '\n' || src[j] == '\r') {
		/* blank or comment-only line: no indentation change */
		while (j < x->len && src[j] != '\n')
			j++;
		x->i = j + 1;
		x->line++;
		return LINE_SKIPPED;
	}
	if (col > x->indents[x->nindent - 1]) {
		if (x->nindent == (int)(sizeof x->indents / sizeof x->indents[0])) {
			x->why = "indentation too deep";
			return LINE_FAIL;
		}
		x->indents[x->nindent++] = col;
		push(&x->t, CA_PY_INDENT, src + j, 0, x->line);
	} else {
		while (col < x->indents[x->nindent - 1]) {
			x->nindent--;
			push(&x->t, CA_PY_DEDENT, src + j, 0, x->line);
		}
		if (col != x->indents[x->nindent - 1]) {
			x->why = "unindent does not match any outer indentation level";
			return LINE_FAIL;
		}
	}
	x->i = j;
	x->at_line_start = 0;
	return LINE_TOKENS;
}

/* The end of the number that starts at src[i]. */
static size_t number_end(const char *src, size_t len, size_t i)
{
	int hex = src[i] == '0' && i + 1 < len && (src[i + 1] == 'x' || src[i + 1] == 'X');
	while (i < len) {
		char d = src[i];
		if (!hex && (d == 'e' || d == 'E') && i + 1 < len && (src[i + 1] == '+' || src[i + 1] == '-')) {
			i += 2;
			continue;
		}
		if (!(is_name_char((unsigned char)d) || d == '.'))
			break;
		i++;
	}
	return i;
}

/*
 * The string whose quote is at x->i (its prefix, if any, from start):
 * pushed, x->i past it, lines counted. -1 with x->why when it does not end.
 */
static int string_token(struct lexer *x, size_t start)
{
	const char *src = x->src;
	size_t len = x->len, i = x->i;
	char q = src[i];
	int triple = i + 2 < len && src[i + 1] == q && src[i + 2] == q;
	i += triple ? 3 : 1;
	for (;;) {
		if (i >= len) {
			x->why = "unterminated string";
			return -1;
		}
		if (src[i] == '\\') {
			if (i + 1 < len && src[i + 1] == '\n')
				x->line++;
			i += 2;
			continue;
		}
		if (src[i] == '\n') {
			if (!triple) {
				x->why = "unterminated string";
				return -1;
			}
			x->line++;
		}
		if (src[i] == q) {
			if (!triple) {
				i++;
				break;
			}
			if (i + 2 < len && src[i + 1] == q && src[i + 2] == q) {
				i += 3;
				break;
			}
		}
		i++;
	}
	push(&x->t, CA_PY_STRING, src + start, i - start, x->line);
	x->i = i;
	return 0;
}

/* The operator or delimiter at x->i, pushed; brackets counted (a newline inside them joins lines). */
static void op_token(struct lexer *x)
{
	const char *src = x->src;
	size_t len = x->len, i = x->i, oplen = 1;
	for (int k = 0; ops3[k]; k++)
		if (i + 3 <= len && !memcmp(src + i, ops3[k], 3))
			oplen = 3;
	if (oplen == 1)
		for (int k = 0; ops2[k]; k++)
			if (i + 2 <= len && !memcmp(src + i, ops2[k], 2))
				oplen = 2;
	if (oplen == 1) {
		if (strchr("([{", src[i]))
			x->depth++;
		else if (strchr(")]}", src[i]) && x->depth > 0)
			x->depth--;
	}
	push(&x->t, CA_PY_OP, src + i, oplen, x->line);
	x->i = i + oplen;
}

/*
 * What needs no token at x->i (blanks, a comment, a backslash joining
 * lines, a newline: NEWLINE pushed at the end of a logical line),
 * skipped; 0 when there was none.
 */
static int skip_between(struct lexer *x)
{
	const char *src = x->src;
	unsigned char c = (unsigned char)src[x->i];
	if (c == ' ' || c == '\t' || c == '\f' || c == '\r') {
		x->i++;
		return 1;
	}
	if (c == '#') {
		while (x->i < x->len && src[x->i] != '\n')
			x->i++;
		return 1;
	}
	if (c == '\\' && x->i + 1 < x->len && (src[x->i + 1] == '\n' || src[x->i + 1] == '\r')) {
		x->i += src[x->i + 1] == '\r' && x->i + 2 < x->len && src[x->i + 2] == '\n' ? 3 : 2;
		x->line++;
		return 1;
	}
	if (c == '\n') {
		if (x->depth == 0) {
			struct toks *t = &x->t;
			if (t->n && t->v[t->n - 1].kind != CA_PY_NEWLINE && t->v[t->n - 1].kind != CA_PY_INDENT &&
			    t->v[t->n - 1].kind != CA_PY_DEDENT)
				push(t, CA_PY_NEWLINE, src + x->i, 1, x->line);
			x->at_line_start = 1;
		}
		x->line++;
		x->i++;
		return 1;
	}
	return 0;
}

/* The next token at x->i (a name, number, string or operator), pushed. -1 with x->why. */
static int next_token(struct lexer *x)
{
	const char *src = x->src;
	size_t start = x->i;
	unsigned char c = (unsigned char)src[start];
	if (is_name_start(c)) {
		while (x->i < x->len && is_name_char((unsigned char)src[x->i]))
			x->i++;
		if (x->i < x->len && (src[x->i] == '"' || src[x->i] == '\'') && is_string_prefix(src + start, x->i - start))
			return string_token(x, start);
		push(&x->t, CA_PY_NAME, src + start, x->i - start, x->line);
		return 0;
	}
	if ((c >= '0' && c <= '9') || (c == '.' && start + 1 < x->len && src[start + 1] >= '0' && src[start + 1] <= '9')) {
		x->i = number_end(src, x->len, start);
		push(&x->t, CA_PY_NUMBER, src + start, x->i - start, x->line);
		return 0;
	}
	if (c == '"' || c == '\'')
		return string_token(x, start);
	op_token(x);
	return 0;
}

int ca_pylex_tokenize(const char *src, size_t len, struct ca_pylex_token **tokens,
                      size_t *ntokens, const char **why)
{
	struct lexer x = {.src = src, .len = len, .nindent = 1, .line = 1, .at_line_start = 1};
	x.indents[0] = 0;
	while (x.i < len) {
		if (x.at_line_start && x.depth == 0) {
			int r = line_start(&x);
			if (r == LINE_END)
				break;
			if (r == LINE_SKIPPED)
				continue;
			if (r == LINE_FAIL)
				goto fail;
		}
		if (skip_between(&x))
			continue;
		if (next_token(&x) != 0)
			goto fail;
	}
	struct toks *t = &x.t;
	if (t->n && t->v[t->n - 1].kind != CA_PY_NEWLINE && t->v[t->n - 1].kind != CA_PY_DEDENT &&
	    t->v[t->n - 1].kind != CA_PY_INDENT)
		push(t, CA_PY_NEWLINE, src + len, 0, x.line);
	while (x.nindent > 1) {
		x.nindent--;
		push(t, CA_PY_DEDENT, src + len, 0, x.line);
	}
	push(t, CA_PY_END, src + len, 0, x.line);
	*tokens = t->v;
	*ntokens = t->n;
	return 0;
fail:
	*why = x.why;
	free(x.t.v);
	return -1;
}

/* ---------------------------------------------------------------- fingerprint */

static int tok_is(const struct ca_pylex_token *t, enum ca_pylex_kind kind, const char *text)
{
	return t->kind == kind && t->len == strlen(text) && !memcmp(t->text, text, t->len);
}

static int in_list(const struct ca_pylex_token *t, const char *const *list)
{
	for (int k = 0; list[k]; k++)
		if (t->len == strlen(list[k]) && !memcmp(t->text, list[k], t->len))
			return 1;
	return 0;
}

static const char *const kept_names[] = {
	/* keywords */
	"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
	"def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
	"is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
	/* builtins and conventions */
	"self", "super", "range", "len", "int", "float", "bool", "tuple", "list", "dict", "isinstance",
	"min", "max", "sum", "abs", "print", "enumerate", "zip", "getattr", "setattr", "str",
	/* module roots */
	"torch", "nn", "F", "functional", "math", "np", "numpy", NULL,
};

struct buf {
	char *s;
	size_t n, cap;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->n + n + 2 > b->cap) {
		b->cap = (b->n + n + 2) * 2;
		b->s = ca_xrealloc(b->s, b->cap);
	}
	if (b->n)
		b->s[b->n++] = ' ';
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = '\0';
}

char *ca_pylex_fingerprint(const char *src, size_t len, int flags, const char **why)
{
	struct ca_pylex_token *t;
	size_t n;
	if (ca_pylex_tokenize(src, len, &t, &n, why) < 0)
		return NULL;
	size_t from = 0, to = n - 1;  /* [from, to) */
	if (!(flags & CA_PYLEX_WHOLE_FILE)) {
		int level = 0, found = 0;
		for (size_t i = 0; i + 1 < n; i++) {
			if (t[i].kind == CA_PY_INDENT)
				level++;
			else if (t[i].kind == CA_PY_DEDENT)
				level--;
			else if (level == 0 && tok_is(&t[i], CA_PY_NAME, "class") && tok_is(&t[i + 1], CA_PY_NAME, "Model")) {
				from = i;
				found = 1;
				break;
			}
		}
		if (!found) {
			free(t);
			*why = "no class Model";
			return NULL;
		}
		int lv = 0;
		for (to = from; to < n - 1; to++) {
			if (t[to].kind == CA_PY_INDENT)
				lv++;
			else if (t[to].kind == CA_PY_DEDENT && --lv == 0) {
				to++;
				break;
			}
		}
	}
	struct buf b = {0};
	int depth = 0;
	for (size_t i = from; i < to; i++) {
		const struct ca_pylex_token *k = &t[i];
		const struct ca_pylex_token *prev = i > from ? &t[i - 1] : NULL;
		if (k->kind == CA_PY_OP && k->len == 1) {
			if (strchr("([{", k->text[0]))
				depth++;
			else if (strchr(")]}", k->text[0]) && depth > 0)
				depth--;
		}
		/* Docstrings: a string that is a whole statement. */
		if (k->kind == CA_PY_STRING && (!prev || prev->kind == CA_PY_NEWLINE || prev->kind == CA_PY_INDENT ||
		                                prev->kind == CA_PY_DEDENT) && t[i + 1].kind == CA_PY_NEWLINE) {
			i++;
			continue;
		}
		/* Scaffolding every task shares carries no structure: the class
		 * header, parameter lists (with their annotations) and the
		 * super().__init__() call are left out. */
		if (i == from && tok_is(k, CA_PY_NAME, "class")) {
			while (i + 1 < to && t[i + 1].kind != CA_PY_NEWLINE)
				i++;
			i++;
			continue;
		}
		if (tok_is(k, CA_PY_NAME, "def") && i + 1 < to) {
			put(&b, "def", 3);
			put(&b, t[i + 1].text, t[i + 1].len);
			i += 2;
			int d = 0;
			for (; i < to; i++) {
				if (t[i].kind == CA_PY_OP && t[i].len == 1 && strchr("([{", t[i].text[0]))
					d++;
				else if (t[i].kind == CA_PY_OP && t[i].len == 1 && strchr(")]}", t[i].text[0]))
					d--;
				else if (d == 0 && tok_is(&t[i], CA_PY_OP, ":"))
					break;
			}
			if (i + 1 < to && t[i + 1].kind == CA_PY_NEWLINE)
				i++;
			continue;
		}
		if (tok_is(k, CA_PY_NAME, "super") && (!prev || prev->kind == CA_PY_NEWLINE || prev->kind == CA_PY_INDENT)) {
			while (i < to && t[i].kind != CA_PY_NEWLINE)
				i++;
			continue;
		}
		switch (k->kind) {
		case CA_PY_NAME:
			if (in_list(k, kept_names)) {
				put(&b, k->text, k->len);
			} else if (prev && tok_is(prev, CA_PY_OP, ".") && !(i >= from + 2 && tok_is(&t[i - 2], CA_PY_NAME, "self"))) {
				/* an API name: it carries what the code does, so it weighs more */
				for (int w = 0; w < CA_PYLEX_API_WEIGHT; w++)
					put(&b, k->text, k->len);
			} else if (depth > 0 && tok_is(&t[i + 1], CA_PY_OP, "="))
				put(&b, k->text, k->len);
			else
				put(&b, "ID", 2);
			break;
		case CA_PY_NUMBER:
		case CA_PY_STRING:
			if (flags & CA_PYLEX_KEEP_LITERALS)
				put(&b, k->text, k->len);
			else
				put(&b, k->kind == CA_PY_NUMBER ? "NUM" : "STR", 3);
			break;
		case CA_PY_OP: put(&b, k->text, k->len); break;
		case CA_PY_NEWLINE: put(&b, ";", 1); break;
		case CA_PY_INDENT: put(&b, "{", 1); break;
		case CA_PY_DEDENT: put(&b, "}", 1); break;
		case CA_PY_END: break;
		}
	}
	free(t);
	if (!b.s)
		b.s = ca_xstrdup("");
	return b.s;
}

/* ---------------------------------------------------------------- similarity */

struct symtab {
	char **key;
	int *id;
	size_t cap, n;
};

static uint64_t hash_str(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

/* Id of symbol s[0..n), adding it when add is set; -1 when absent. */
static int sym_id(struct symtab *st, const char *s, size_t n, int add)
{
	if (st->cap == 0) {
		if (!add)
			return -1;
		st->cap = 1024;
		st->key = ca_xcalloc(st->cap, sizeof *st->key);
		st->id = ca_xcalloc(st->cap, sizeof *st->id);
	}
	size_t h = hash_str(s, n) & (st->cap - 1);
	while (st->key[h]) {
		if (strlen(st->key[h]) == n && !memcmp(st->key[h], s, n))
			return st->id[h];
		h = (h + 1) & (st->cap - 1);
	}
	if (!add)
		return -1;
	if (2 * (st->n + 1) > st->cap) {
		struct symtab bigger = {0};
		bigger.cap = st->cap * 2;
		bigger.key = ca_xcalloc(bigger.cap, sizeof *bigger.key);
		bigger.id = ca_xcalloc(bigger.cap, sizeof *bigger.id);
		for (size_t j = 0; j < st->cap; j++) {
			if (!st->key[j])
				continue;
			size_t g = hash_str(st->key[j], strlen(st->key[j])) & (bigger.cap - 1);
			while (bigger.key[g])
				g = (g + 1) & (bigger.cap - 1);
			bigger.key[g] = st->key[j];
			bigger.id[g] = st->id[j];
		}
		bigger.n = st->n;
		free(st->key);
		free(st->id);
		*st = bigger;
		return sym_id(st, s, n, add);
	}
	char *k = ca_xmalloc(n + 1);
	memcpy(k, s, n);
	k[n] = '\0';
	st->key[h] = k;
	st->id[h] = (int)st->n++;
	return st->id[h];
}

/* Split a fingerprint into symbol ids (-1 for symbols unknown when !add). */
static int *symbols(struct symtab *st, const char *fp, size_t *count, int add)
{
	size_t cap = 64, n = 0;
	int *v = ca_xmalloc(cap * sizeof *v);
	const char *p = fp;
	while (*p) {
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		const char *e = p;
		while (*e && *e != ' ')
			e++;
		if (n == cap)
			v = ca_xrealloc(v, (cap *= 2) * sizeof *v);
		v[n++] = sym_id(st, p, (size_t)(e - p), add);
		p = e;
	}
	*count = n;
	return v;
}

struct reference {
	char *name;
	int *sym;
	size_t len, words;
	/* masks[slot[s] * words ...]: positions of symbol s in the reference */
	int *slot;      /* per global symbol id, -1 when absent (built by freeze) */
	uint64_t *masks;
};

struct ca_pylex_index {
	struct symtab st;
	struct reference *refs;
	size_t n, cap;
	size_t frozen_syms;  /* symbols known when slots were built */
	int frozen;
};

struct ca_pylex_index *ca_pylex_index_new(void)
{
	return ca_xcalloc(1, sizeof(struct ca_pylex_index));
}

void ca_pylex_index_free(struct ca_pylex_index *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->n; i++) {
		free(x->refs[i].name);
		free(x->refs[i].sym);
		free(x->refs[i].slot);
		free(x->refs[i].masks);
	}
	free(x->refs);
	for (size_t j = 0; j < x->st.cap; j++)
		free(x->st.key[j]);
	free(x->st.key);
	free(x->st.id);
	free(x);
}

void ca_pylex_index_add(struct ca_pylex_index *x, const char *name, const char *fp)
{
	if (x->n == x->cap) {
		x->cap = x->cap ? 2 * x->cap : 64;
		x->refs = ca_xrealloc(x->refs, x->cap * sizeof *x->refs);
	}
	struct reference *r = &x->refs[x->n++];
	memset(r, 0, sizeof *r);
	r->name = ca_xstrdup(name);
	r->sym = symbols(&x->st, fp, &r->len, 1);
	x->frozen = 0;
}

size_t ca_pylex_index_size(const struct ca_pylex_index *x)
{
	return x->n;
}

static void freeze(struct ca_pylex_index *x)
{
	size_t nsyms = x->st.n;
	for (size_t i = 0; i < x->n; i++) {
		struct reference *r = &x->refs[i];
		free(r->slot);
		free(r->masks);
		r->slot = ca_xmalloc((nsyms + 1) * sizeof *r->slot);
		for (size_t s = 0; s <= nsyms; s++)
			r->slot[s] = -1;
		r->words = (r->len + 63) / 64;
		size_t distinct = 0;
		for (size_t p = 0; p < r->len; p++)
			if (r->slot[r->sym[p]] < 0)
				r->slot[r->sym[p]] = (int)distinct++;
		r->masks = ca_xcalloc(distinct * r->words + 1, sizeof *r->masks);
		for (size_t p = 0; p < r->len; p++)
			r->masks[(size_t)r->slot[r->sym[p]] * r->words + p / 64] |= 1ull << (p % 64);
	}
	x->frozen_syms = nsyms;
	x->frozen = 1;
}

/* Length of the longest common subsequence, bit-parallel (Hyyrö's form). */
static size_t lcs(const struct reference *r, const int *b, size_t nb, uint64_t *v)
{
	size_t w = r->words;
	if (r->len == 0 || nb == 0)
		return 0;
	for (size_t k = 0; k < w; k++)
		v[k] = ~0ull;
	for (size_t j = 0; j < nb; j++) {
		if (b[j] < 0 || r->slot[b[j]] < 0)
			continue;
		const uint64_t *m = r->masks + (size_t)r->slot[b[j]] * w;
		uint64_t carry = 0;
		for (size_t k = 0; k < w; k++) {
			uint64_t u = v[k] & m[k];
			uint64_t sum = v[k] + u;
			uint64_t c1 = sum < v[k];
			uint64_t sum2 = sum + carry;
			uint64_t c2 = sum2 < sum;
			carry = c1 | c2;
			v[k] = sum2 | (v[k] & ~m[k]);
		}
	}
	size_t ones = 0;
	for (size_t k = 0; k < w; k++) {
		uint64_t x = v[k];
		if (k == w - 1 && r->len % 64)
			x &= (1ull << (r->len % 64)) - 1;
		ones += (size_t)__builtin_popcountll(x);
	}
	return r->len - ones;
}

double ca_pylex_index_best(struct ca_pylex_index *x, const char *fp, const char **name)
{
	if (x->n == 0)
		return -1;
	if (!x->frozen)
		freeze(x);
	size_t nb;
	int *b = symbols(&x->st, fp, &nb, 0);
	size_t maxw = 1;
	for (size_t i = 0; i < x->n; i++)
		if (x->refs[i].words > maxw)
			maxw = x->refs[i].words;
	uint64_t *v = ca_xmalloc(maxw * sizeof *v);
	double best = -1;
	for (size_t i = 0; i < x->n; i++) {
		const struct reference *r = &x->refs[i];
		double sim = r->len + nb ? 2.0 * (double)lcs(r, b, nb, v) / (double)(r->len + nb) : 1.0;
		if (sim > best) {
			best = sim;
			*name = r->name;
		}
	}
	free(v);
	free(b);
	return best;
}

double ca_pylex_similarity(const char *a, const char *b)
{
	struct ca_pylex_index *x = ca_pylex_index_new();
	const char *name;
	ca_pylex_index_add(x, "a", a);
	double s = ca_pylex_index_best(x, b, &name);
	ca_pylex_index_free(x);
	return s;
}
