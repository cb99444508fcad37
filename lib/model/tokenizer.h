/*
 * tokenizer: the byte-level BPE of a Hugging Face tokenizer.json, as Qwen2
 * and Llama 3 use it (owner: policy engine, issue 6).
 *
 * Encoding: added/special tokens are cut out of the text first (longest
 * match); the rest is split by the pre-tokenizer regex (the Qwen2 pattern,
 * or the Llama 3 one which groups up to three digits), each piece's bytes
 * are mapped to the byte-level alphabet and merged by rank. The model's
 * ignore_merges flag (Llama 3) is honoured. An NFC normalizer (Qwen2
 * declares one) is applied to the text between added tokens, with the
 * tables of tokenizer_nfc.h; other normalizers are refused at load.
 * Decoding concatenates the tokens' bytes; the result need not be valid
 * UTF-8 when a sequence stops inside a character.
 */
#ifndef CA_TOKENIZER_H
#define CA_TOKENIZER_H

#include <stddef.h>

#include <jv.h>

#define CA_TOKENIZER_WHY 256

struct ca_tokenizer;

/* Load DIR/tokenizer.json (or the file itself when path is a file). */
struct ca_tokenizer *ca_tokenizer_load(const char *path, char why[CA_TOKENIZER_WHY]);
void ca_tokenizer_free(struct ca_tokenizer *t);
/* Number of ids (the largest id + 1, added tokens included). */
int ca_tokenizer_size(const struct ca_tokenizer *t);

/* Encode len bytes of UTF-8; returns the count and sets *ids (malloc'd). */
size_t ca_tokenizer_encode(const struct ca_tokenizer *t, const char *text, size_t len, int **ids);
/* Decode to bytes (malloc'd, NUL-terminated, *len without the NUL); unknown ids are skipped. */
char *ca_tokenizer_decode(const struct ca_tokenizer *t, const int *ids, size_t n, size_t *len);
/* Id of an added token by its content ("<|im_end|>"), or -1. */
int ca_tokenizer_added_id(const struct ca_tokenizer *t, const char *content);

/*
 * Render a conversation (borrowed jv array of {"role", "content"}) in the
 * tokenizer's chat format: ChatML (<|im_start|>, Qwen2) or the Llama 3
 * header format; with add_generation_prompt the assistant turn is opened.
 * Returns malloc'd text, or NULL with why set. *stop_id gets the id that
 * ends an assistant turn (<|im_end|> or <|eot_id|>).
 */
char *ca_tokenizer_chat(const struct ca_tokenizer *t, jv messages, int add_generation_prompt,
			int *stop_id, char why[CA_TOKENIZER_WHY]);

#endif
