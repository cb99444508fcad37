/* A driver for lib/chat, for tests/t0408 to compare with policy-ca-sample's jq:
 * each line {"text", "turn"} becomes the reply ca_chat_reply reads from it,
 * each line {"messages", "tools"} the conversation ca_chat_render shows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "json.h"

int main(void)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int status = 0;
	while ((n = getline(&line, &cap, stdin)) > 0) {
		jv in = jv_parse_sized(line, (int)n), out;
		jv text = jv_get_kind(in) == JV_KIND_OBJECT ? ca_json_get(in, "text") : jv_invalid();
		if (jv_get_kind(text) == JV_KIND_STRING) {
			double turn = 0;
			ca_json_number(in, "turn", &turn);
			out = ca_chat_reply(jv_string_value(text), (size_t)jv_string_length_bytes(jv_copy(text)), (int)turn);
		} else if (jv_get_kind(in) == JV_KIND_OBJECT) {
			out = ca_chat_render(ca_json_get(in, "messages"), ca_json_get(in, "tools"));
		} else {
			fprintf(stderr, "test-chat: not a JSON object: %s", line);
			out = jv_null();
			status = 1;
		}
		jv_free(text);
		jv_free(in);
		jv s = jv_dump_string(out, 0);
		printf("%s\n", jv_string_value(s));
		jv_free(s);
	}
	free(line);
	return status;
}
