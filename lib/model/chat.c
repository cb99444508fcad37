/*
 * chat: conversations with tools rendered for a chat model that calls
 * tools in text, and its replies read back; see chat.h.
 */
#include <string.h>

#include "chat.h"
#include "json.h"

static jv get(jv obj, const char *key)
{
	jv v = jv_get_kind(obj) == JV_KIND_OBJECT ? ca_json_get(obj, key) : jv_invalid();
	if (!jv_is_valid(v)) {
		jv_free(v);
		return jv_null();
	}
	return v;
}

/* A message's content as text (consumed): a string, text parts joined, else empty. */
static jv content_text(jv content)
{
	if (jv_get_kind(content) == JV_KIND_STRING)
		return content;
	jv text = jv_string("");
	if (jv_get_kind(content) == JV_KIND_ARRAY) {
		jv_array_foreach(content, i, part) {
			jv t = get(part, "text");
			if (jv_get_kind(t) == JV_KIND_STRING)
				text = jv_string_concat(text, t);
			else
				jv_free(t);
			jv_free(part);
		}
	}
	jv_free(content);
	return text;
}

/* What the system message gains: the tools' schemas and how to call them (consumes tools). */
static jv tools_text(jv tools)
{
	jv schemas = jv_string("");
	if (jv_get_kind(tools) == JV_KIND_ARRAY) {
		jv_array_foreach(tools, i, tool) {
			schemas = jv_string_append_str(schemas, i ? "\n" : "");
			schemas = jv_string_concat(schemas, jv_dump_string(get(tool, "function"), 0));
			jv_free(tool);
		}
	}
	jv_free(tools);
	jv text = jv_string_fmt("\n\n# Tools\n\nThese functions can be called; their parameters are JSON schema:\n"
		"<tools>\n%s\n</tools>\n\nTo call a function, write its name and arguments as a JSON object between"
		" <tool_call> and </tool_call>, one block per call, for example:\n<tool_call>\n"
		"{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>\n"
		"Results come back between <tool_response> and </tool_response>.", jv_string_value(schemas));
	jv_free(schemas);
	return text;
}

/* text (consumed) followed by a <tool_call> block for each call (borrowed). */
static jv with_calls(jv text, jv calls)
{
	if (jv_get_kind(calls) != JV_KIND_ARRAY)
		return text;
	jv_array_foreach(calls, k, call) {
		jv fn = get(call, "function");
		jv name = get(fn, "name"), args = get(fn, "arguments");
		jv parsed = jv_get_kind(args) == JV_KIND_STRING ? jv_parse(jv_string_value(args)) : jv_copy(args);
		if (!jv_is_valid(parsed)) {
			jv_free(parsed);
			parsed = jv_copy(args);
		}
		jv block = jv_object_set(jv_object(), jv_string("name"), name);
		block = jv_object_set(block, jv_string("arguments"), parsed);
		text = jv_string_append_str(text, "\n<tool_call>\n");
		text = jv_string_concat(text, jv_dump_string(block, 0));
		text = jv_string_append_str(text, "\n</tool_call>");
		jv_free(args);
		jv_free(fn);
		jv_free(call);
	}
	return text;
}

static jv turn(const char *role, jv content)
{
	return jv_object_set(jv_object_set(jv_object(), jv_string("role"), jv_string(role)), jv_string("content"),
			     content);
}

/* Append a tool result to out (consumed): to the user turn of results just before it, or as a new one. */
static jv add_response(jv out, jv text)
{
	jv response = jv_string_fmt("<tool_response>\n%s\n</tool_response>", jv_string_value(text));
	jv_free(text);
	int n = jv_array_length(jv_copy(out));
	jv last = n > 0 ? jv_array_get(jv_copy(out), n - 1) : jv_null();
	jv role = get(last, "role"), content = get(last, "content");
	if (jv_get_kind(role) == JV_KIND_STRING && !strcmp(jv_string_value(role), "user") &&
	    jv_get_kind(content) == JV_KIND_STRING && !strncmp(jv_string_value(content), "<tool_response>", 15)) {
		content = jv_string_append_str(content, "\n");
		content = jv_string_concat(content, response);
		out = jv_array_set(out, n - 1, jv_object_set(last, jv_string("content"), content));
	} else {
		jv_free(last);
		jv_free(content);
		out = jv_array_append(out, turn("user", response));
	}
	jv_free(role);
	return out;
}

jv ca_chat_render(jv messages, jv tools)
{
	jv extra = tools_text(tools);
	jv out = jv_array();
	if (jv_get_kind(messages) == JV_KIND_ARRAY) {
		jv_array_foreach(messages, i, m) {
			jv role = get(m, "role");
			const char *r = jv_get_kind(role) == JV_KIND_STRING ? jv_string_value(role) : "user";
			jv text = content_text(get(m, "content"));
			if (!strcmp(r, "tool")) {
				out = add_response(out, text);
			} else {
				if (!strcmp(r, "system")) {
					text = jv_string_concat(text, jv_copy(extra));
				} else if (!strcmp(r, "assistant")) {
					jv calls = get(m, "tool_calls");
					text = with_calls(text, calls);
					jv_free(calls);
				}
				out = jv_array_append(out, turn(r, text));
			}
			jv_free(role);
			jv_free(m);
		}
	}
	jv_free(messages);
	jv_free(extra);
	return out;
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* One tool call from the text of a <tool_call> block, as policy-ca-sample reads it. */
static jv call_from_block(const char *block, size_t len, int turn, int k)
{
	jv parsed = ca_json_parse(block, len);
	jv name = jv_string(""), args;
	if (jv_get_kind(parsed) == JV_KIND_OBJECT) {
		jv n = get(parsed, "name");
		if (jv_get_kind(n) != JV_KIND_NULL && jv_get_kind(n) != JV_KIND_FALSE) {
			jv_free(name);
			name = n;
		} else {
			jv_free(n);
		}
		args = get(parsed, "arguments");
		if (jv_get_kind(args) == JV_KIND_NULL || jv_get_kind(args) == JV_KIND_FALSE) {
			jv_free(args);
			args = jv_object();
		}
		if (jv_get_kind(args) != JV_KIND_STRING)
			args = jv_dump_string(args, 0);
	} else {
		args = jv_string_sized(block, (int)len);
	}
	jv_free(parsed);
	jv fn = jv_object_set(jv_object_set(jv_object(), jv_string("name"), name), jv_string("arguments"), args);
	jv call = jv_object_set(jv_object(), jv_string("id"), jv_string_fmt("call_%d_%d", turn, k));
	call = jv_object_set(call, jv_string("type"), jv_string("function"));
	return jv_object_set(call, jv_string("function"), fn);
}

jv ca_chat_reply(const char *text, size_t len, int turn)
{
	static const char open[] = "<tool_call>", close[] = "</tool_call>";
	jv content = jv_string(""), calls = jv_array();
	size_t at = 0;
	int k = 0;
	/* Each block runs from a <tool_call> to the first </tool_call> after it (jq's "<tool_call>(.*?)</tool_call>"). */
	while (at < len) {
		const char *start = memmem(text + at, len - at, open, sizeof open - 1);
		const char *body = start ? start + sizeof open - 1 : NULL;
		const char *end = body ? memmem(body, (size_t)(text + len - body), close, sizeof close - 1) : NULL;
		if (!end)
			break;
		content = jv_string_append_buf(content, text + at, (int)(start - (text + at)));
		calls = jv_array_append(calls, call_from_block(body, (size_t)(end - body), turn, k++));
		at = (size_t)(end + sizeof close - 1 - text);
	}
	content = jv_string_append_buf(content, text + at, (int)(len - at));
	const char *c = jv_string_value(content);
	size_t b = 0, e = (size_t)jv_string_length_bytes(jv_copy(content));
	while (b < e && is_space(c[b]))
		b++;
	while (e > b && is_space(c[e - 1]))
		e--;
	jv trimmed = jv_string_sized(c + b, (int)(e - b));
	jv_free(content);
	jv message = jv_object_set(jv_object(), jv_string("role"), jv_string("assistant"));
	message = jv_object_set(message, jv_string("content"), trimmed);
	if (jv_array_length(jv_copy(calls)) > 0)
		message = jv_object_set(message, jv_string("tool_calls"), calls);
	else
		jv_free(calls);
	return message;
}
