/*
 * tokenizer: a test driver for lib/tokenizer.
 *
 *   test-tokenizer DIR < texts.ndjson
 *
 * For each {"text": s} writes {"ids": encode(s), "text": decode(encode(s))},
 * which the test compares with the tokenizers library's output.
 */
#include <stdio.h>
#include <stdlib.h>

#include "err.h"
#include "json.h"
#include "ndjson.h"
#include "tokenizer.h"

int main(int argc, char **argv)
{
	ca_err_init(argv[0]);
	if (argc != 2)
		ca_err_die(CA_EXIT_USAGE, "usage: test-tokenizer DIR < texts.ndjson");
	char why[CA_TOKENIZER_WHY];
	struct ca_tokenizer *t = ca_tokenizer_load(argv[1], why);
	if (!t)
		ca_err_die(CA_EXIT_DATA, "%s", why);
	struct ca_ndjson_reader *r = ca_ndjson_open(0, NULL);
	jv rec;
	while (ca_ndjson_next(r, &rec) == CA_NDJSON_RECORD) {
		jv text = ca_json_get(rec, "text");
		jv_free(rec);
		if (jv_get_kind(text) != JV_KIND_STRING)
			ca_err_die(CA_EXIT_DATA, "record without text");
		int *ids;
		size_t n = ca_tokenizer_encode(t, jv_string_value(text), (size_t)jv_string_length_bytes(jv_copy(text)), &ids);
		jv_free(text);
		jv a = jv_array();
		for (size_t i = 0; i < n; i++)
			a = jv_array_append(a, jv_number(ids[i]));
		size_t len;
		char *back = ca_tokenizer_decode(t, ids, n, &len);
		jv out = jv_object_set(jv_object(), jv_string("ids"), a);
		out = jv_object_set(out, jv_string("text"), jv_string_sized(back, (int)len));
		ca_ndjson_write(out);
		free(back);
		free(ids);
	}
	ca_ndjson_close(r);
	ca_tokenizer_free(t);
	return ca_err_finish(0);
}
