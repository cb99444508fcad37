/*
 * chat: a conversation with tools as a chat model that calls tools in text
 * sees it, and its reply read back as a chat message (owner: policy
 * engine, issues 6 and 22).
 *
 * The tools' schemas go into the system message; an earlier call is
 * written as <tool_call>{"name", "arguments"}</tool_call> after the
 * assistant's text; results come back as <tool_response> blocks in a user
 * turn. Every <tool_call> block of a reply becomes a tool call.
 * scripts/policy-ca-sample does the same in jq; ca-rft-filter --tokens and
 * ca-sample --serve use this module. Keep the three in step (tests/t0402
 * and t0408 compare them).
 */
#ifndef CA_CHAT_H
#define CA_CHAT_H

#include <stddef.h>
#include <jv.h>

/*
 * The messages (consumed; OpenAI chat form) as the model is shown them:
 * an array of {"role", "content"} with string contents, ready for
 * ca_tokenizer_chat. tools (consumed) is the request's array of
 * {"type": "function", "function": {...}}. A content that is a list of
 * text parts is joined; any other non-string content is empty.
 */
jv ca_chat_render(jv messages, jv tools);

/*
 * The assistant message a completion's text[0..len) says: "content" is the
 * text without its <tool_call> blocks, trimmed; "tool_calls" (left out when
 * there are none) has one call per block, with id call_TURN_K. A block that
 * is not a JSON object becomes a call without a name whose arguments are
 * the block's text (ca-agent answers it with an error and counts it).
 */
jv ca_chat_reply(const char *text, size_t len, int turn);

#endif
