/*
 * pylex: a Python tokenizer and a structural similarity measure on the
 * syntax of a task's Model class (owner: synthesis, engineer C).
 *
 * The fingerprint of a task is the token sequence of its `class Model`
 * block with INDENT/DEDENT/NEWLINE kept (a preorder serialisation of its
 * syntax tree), docstrings, comments and type annotations dropped, and
 * names the author chose (locals, parameters, self.attributes) replaced
 * by ID, numbers by NUM, strings by STR. Names of the library API stay:
 * keywords, builtins, module roots (torch, nn, F, math), attributes not
 * reached through self, and keyword-argument names. Similarity of two
 * fingerprints a, b is 2·LCS(a, b) / (|a| + |b|) in [0, 1]; ca-filter(1)
 * documents it for users.
 */
#ifndef CA_PYLEX_H
#define CA_PYLEX_H

#include <stddef.h>

enum ca_pylex_kind {
	CA_PY_NAME,
	CA_PY_NUMBER,
	CA_PY_STRING,
	CA_PY_OP,
	CA_PY_NEWLINE,
	CA_PY_INDENT,
	CA_PY_DEDENT,
	CA_PY_END,
};

struct ca_pylex_token {
	enum ca_pylex_kind kind;
	const char *text;  /* points into the source */
	size_t len;
	int line;
};

/*
 * Tokenize src[0..len). Returns 0 and a malloc'd array in *tokens (count in
 * *ntokens, last token CA_PY_END), or -1 with *why set (unterminated string,
 * inconsistent dedent). Comments and blank lines produce no tokens.
 */
int ca_pylex_tokenize(const char *src, size_t len, struct ca_pylex_token **tokens,
                      size_t *ntokens, const char **why);

enum {
	CA_PYLEX_KEEP_LITERALS = 1,  /* keep numbers and strings verbatim (dedup key) */
	CA_PYLEX_WHOLE_FILE = 2,     /* fingerprint the whole file, not class Model */
};

/*
 * The fingerprint of the Model class as space-separated tokens (malloc'd),
 * or NULL with *why set when the source does not tokenize or has no
 * `class Model`.
 */
char *ca_pylex_fingerprint(const char *src, size_t len, int flags, const char **why);

/* Similarity of two fingerprints (space-separated token strings). */
double ca_pylex_similarity(const char *fingerprint_a, const char *fingerprint_b);

/* A set of reference fingerprints searched for the most similar one. */
struct ca_pylex_index;
struct ca_pylex_index *ca_pylex_index_new(void);
void ca_pylex_index_free(struct ca_pylex_index *index);
/* Add a reference (both strings copied). */
void ca_pylex_index_add(struct ca_pylex_index *index, const char *name, const char *fingerprint);
size_t ca_pylex_index_size(const struct ca_pylex_index *index);
/*
 * Highest similarity of fingerprint to any reference: returns it and sets
 * *name to that reference's name (owned by the index); -1 when empty.
 */
double ca_pylex_index_best(struct ca_pylex_index *index, const char *fingerprint, const char **name);

#endif
