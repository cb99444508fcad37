#!/bin/sh
# ca-sample --serve: our engine behind an OpenAI-compatible chat endpoint on
# loopback. lib/chat reads replies and renders conversations as
# policy-ca-sample does; ca-agent with policy-openai against the server on
# a tiny random checkpoint records the token ids and log-probs the engine
# sampled, and they are exactly what ca-sample (through policy-ca-sample)
# samples for the same conversation and seed, and what ca-logprob scores;
# bad requests get 4xx with a JSON error; ca-rollout --checkpoint starts
# and stops the server.
. "$(dirname "$0")/test-lib.sh"

# policy-ca-sample with a stand-in ca-sample: it keeps the record it was
# given (sample-in.json) and completes with $CHAT_TEXT.
mkdir -p "$TRASH_BASE/fake"
cat >"$TRASH_BASE/fake/ca-sample" <<'SH'
#!/bin/sh
cat >sample-in.json
jq -nc --arg t "$CHAT_TEXT" '{completion: {text: $t, tokens: [1], prompt_tokens: 1}}'
SH
chmod +x "$TRASH_BASE/fake/ca-sample"
FAKE=$TRASH_BASE/fake
export FAKE

cat >"$TRASH_BASE/texts" <<'EOF_TEXTS'
"plain answer \n"
"Looking.\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"echo hi\"}}\n</tool_call>\n<tool_call>not json</tool_call>"
"<tool_call>{\"name\":\"write\",\"arguments\":\"{\\\"path\\\":\\\"a\\\"}\"}</tool_call>"
"<tool_call>[1,2]</tool_call> and <tool_call>{\"arguments\":{\"x\":1}}</tool_call>"
"a <tool_call> b <tool_call>{\"name\":\"x\"}</tool_call> tail </tool_call> end"
"unclosed <tool_call>{\"name\":\"x\"}"
"\n\t <tool_call>{\"name\":\"read\",\"arguments\":null}</tool_call>\n"
"é ü <tool_call>{\"name\": \"grep\", \"arguments\": {\"pattern\": \"ä\"}}</tool_call>"
"<tool_call>{\"name\": 7}</tool_call>"
EOF_TEXTS

expect_success 'lib/chat reads a reply as policy-ca-sample does' '
	echo "{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}], \"tools\": []}" >conv &&
	while IFS= read -r t; do
		CHAT_TEXT=$(printf "%s" "$t" | jq -r .) && export CHAT_TEXT &&
		PATH="$FAKE:$PATH" CA_TURN=3 policy-ca-sample ckpt <conv | jq -c ".choices[0].message" >want &&
		printf "%s" "$t" | jq -c "{text: ., turn: 3}" | test-chat >got &&
		cmp_output want got || exit 1
	done <"$TRASH_BASE/texts"
'

expect_success 'lib/chat renders a conversation with tools as policy-ca-sample does' '
	jq -cn "def call(id; n; a): {id: id, type: \"function\", function: {name: n, arguments: a}};
		{tools: [{type: \"function\", function: {name: \"bash\", description: \"Run\", parameters: {type: \"object\",
			properties: {command: {type: \"string\"}}, required: [\"command\"]}}}],
		 messages: [{role: \"system\", content: \"You write kernels.\"}, {role: \"user\", content: \"Task\"},
			{role: \"assistant\", content: \"Two calls.\", tool_calls: [call(\"a\"; \"bash\"; \"{\\\"command\\\": \\\"ls\\\"}\"),
				call(\"b\"; \"read\"; \"not json\")]},
			{role: \"tool\", tool_call_id: \"a\", content: \"x.py\"}, {role: \"tool\", tool_call_id: \"b\", content: \"error: no\"},
			{role: \"assistant\", content: null, tool_calls: [call(\"c\"; \"bash\"; \"{}\")]},
			{role: \"tool\", tool_call_id: \"c\", content: \"\"}]}" >conv &&
	CHAT_TEXT=done PATH="$FAKE:$PATH" policy-ca-sample ckpt <conv >/dev/null &&
	jq -c .messages sample-in.json >want &&
	test-chat <conv >got && cmp_output want got
'

if ! has_torch || ! "$(ca_python)" -c 'import transformers, tokenizers' >/dev/null 2>&1 ||
	! command -v curl >/dev/null 2>&1; then
	skip 'ca-sample --serve' 'torch/transformers (make deps) or curl not installed'
	test_done
	exit 0
fi
M=$TRASH_BASE/model
if ! TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 "$(ca_python)" "$ROOT/lib/py/ca_hf.py" \
	sample-fixture "$M" "$TESTS_DIR/data/t0503-corpus.txt" >"$TRASH_BASE/fixture.log" 2>&1; then
	cat "$TRASH_BASE/fixture.log"
	skip 'ca-sample --serve' 'building the fixture failed'
	test_done
	exit 0
fi
# Rotary positions: the tiny model takes the agent's few thousand prompt tokens.
jq ".max_position_embeddings = 8192" "$M/config.json" >"$M/c" && mv "$M/c" "$M/config.json"
# A one-line skill keeps the system prompt (and the test) short.
mkdir -p "$TRASH_BASE/skill" "$TRASH_BASE/wd" && echo "Write the kernel in kernels/." >"$TRASH_BASE/skill/SKILL.md"

ca-sample --serve 127.0.0.1:0 --max-request 1048576 --max-tokens 24 -m "$M" \
	>"$TRASH_BASE/serve.out" 2>"$TRASH_BASE/serve.err" &
server=$!
trap 'kill "$server" 2>/dev/null; rm -rf "$TRASH_BASE"' EXIT
i=0
while ! grep -q serve "$TRASH_BASE/serve.out" 2>/dev/null && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
URL=$(head -n 1 "$TRASH_BASE/serve.out" | jq -r .serve.url)
# The first turn gets a tool call added (a random model writes none), so
# that the second turn's request carries a call and its result.
cat >"$TRASH_BASE/inject" <<'SH'
#!/bin/sh
"$@" | jq -c 'if env.CA_TURN == "1" then .choices[0].finish_reason = "tool_calls" | .choices[0].message.tool_calls =
	[{id: "w", type: "function", function: {name: "write", arguments: "{\"path\": \"model_new.py\", \"content\": \"x = 1\\n\"}"}}]
	else . end'
SH
chmod +x "$TRASH_BASE/inject"
# A wrapper that asks the real ca-sample for the token record too, and keeps it.
mkdir -p "$TRASH_BASE/record"
cat >"$TRASH_BASE/record/ca-sample" <<'SH'
#!/bin/sh
"$CA_BIN/ca-sample" --token-record "$@" | tee -a "$SAMPLED"
SH
chmod +x "$TRASH_BASE/record/ca-sample"
# One work directory: the system prompt names the workspace, and both runs must see the same prompt.
AGENT="ca-agent --unconfined --skill $TRASH_BASE/skill --workdir $TRASH_BASE/wd"
INJECT=$TRASH_BASE/inject RECORD=$TRASH_BASE/record SERVED=$TRASH_BASE/served
export URL M AGENT INJECT RECORD SERVED
tasks() { printf '{"id":"kb/L1/%d","code":"class Model: pass\\n"}\n' "$@"; }

expect_success 'the server listens on loopback and lists the model' '
	case $URL in http://127.0.0.1:*/v1) ;; *) exit 1 ;; esac &&
	curl -sS "$URL/models" | jq -e ".object == \"list\" and .data[0].id == \"model\""
'

expect_success 'ca-agent with policy-openai records the token ids and log-probs the server sampled' '
	tasks 1 2 | $AGENT --policy "$INJECT policy-openai -L -s 5 -t 1 -m 24 $URL model" >"$SERVED" &&
	jq -e -s "length == 2 and all(.trajectory.messages | map(select(.role == \"assistant\")) | length == 2)" "$SERVED" &&
	jq -e -s "[.[].trajectory.messages[] | select(.role == \"assistant\") | .completion]
		| length == 4 and all((.token_ids | length) > 0 and (.token_ids | length) <= 24
			and (.logprobs | length) == (.token_ids | length) and (.tokens | length) == (.token_ids | length)
			and all(.logprobs[]; . <= 0) and (.prompt_token_ids | length) > 100)" "$SERVED" &&
	jq -e -s "[.[].trajectory.messages[] | select(.role == \"tool\")] | length == 2 and all(.is_error | not)" "$SERVED"
'

expect_success 'they are what ca-sample samples for the same conversation and seed (policy-ca-sample)' '
	SAMPLED=$PWD/sampled && export SAMPLED &&
	tasks 1 2 | PATH="$RECORD:$PATH" $AGENT --policy "$INJECT policy-ca-sample -s 5 -t 1 -m 24 $M" >direct &&
	[ $(wc -l <sampled) -eq 4 ] &&
	jq -c "[.trajectory.messages[] | select(.role == \"assistant\") | {content, tool_calls}]" "$SERVED" >a &&
	jq -c "[.trajectory.messages[] | select(.role == \"assistant\") | {content, tool_calls}]" direct >b &&
	cmp_output a b &&
	jq -n --slurpfile s "$SERVED" --slurpfile d sampled -e "
		[\$s[].trajectory.messages[] | select(.role == \"assistant\") | .completion] as \$c
		| [range(0; 4) as \$i | \$c[\$i] as \$x | \$d[\$i] as \$y
			| (\$x.prompt_token_ids + \$x.token_ids) == \$y.tokens and \$x.token_ids == \$y.completion.tokens
			  and \$x.logprobs == \$y.completion.logprobs and (\$x.prompt_token_ids | length) == \$y.completion.prompt_tokens]
		| length == 4 and all"
'

expect_success 'ca-logprob scores the served tokens as the server did (temperature 1)' '
	jq -c "select(.role == \"assistant\") | .completion
		| {tokens: (.prompt_token_ids + .token_ids), mask: ([.prompt_token_ids[] | 0] + [.token_ids[] | 1]),
		   served: .logprobs, n: (.prompt_token_ids | length)}" <<-X >records
	$(jq -c ".trajectory.messages[]" "$SERVED")
	X
	[ $(wc -l <records) -eq 4 ] &&
	ca-logprob -m "$M" records >scored &&
	jq -s "[.[] | . as \$r | range(0; \$r.served | length) as \$j
		| (\$r.served[\$j] - \$r.logprobs[\$r.n + \$j]) | fabs] | max" scored >err &&
	cat err && awk "{ exit !(\$1 < 1e-4) }" err
'

# post BODY-FILE: the status and the body, on two lines.
post() { curl -sS -o body -w "%{http_code}\n" -H "Content-Type: application/json" --data-binary "@$1" "$URL/chat/completions"; }
expect_success 'bad requests get 4xx and an OpenAI error body; the server goes on' '
	printf "{\"messages\": [" >bad && [ "$(post bad)" = 400 ] &&
	jq -e ".error.message | test(\"not JSON\")" body &&
	echo "{\"model\": \"m\"}" >bad && [ "$(post bad)" = 400 ] && jq -e ".error.message == \"messages is missing\"" body &&
	echo "[1]" >bad && [ "$(post bad)" = 400 ] && jq -e ".error.type == \"invalid_request_error\"" body &&
	echo "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}" >bad && [ "$(post bad)" = 400 ] &&
	echo "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": true}" >bad && [ "$(post bad)" = 400 ] &&
	echo "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"n\": 2}" >bad && [ "$(post bad)" = 400 ] &&
	echo "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": -1}" >bad && [ "$(post bad)" = 400 ] &&
	head -c 2000000 /dev/zero >big && [ "$(post big)" = 413 ] &&
	jq -e ".error.message | test(\"over the limit\")" body &&
	[ "$(curl -sS -o body -w "%{http_code}" -H "Expect:" --data-binary @big "$URL/chat/completions")" = 413 ] &&
	[ "$(curl -sS -o body -w "%{http_code}" "$URL/nothing")" = 404 ] &&
	[ "$(curl -sS -o body -w "%{http_code}" "$URL/chat/completions")" = 405 ] &&
	echo "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 3}" >good && [ "$(post good)" = 200 ] &&
	jq -e ".choices[0].finish_reason == \"length\" and (.choices[0].token_ids | length) == 3 and .usage.completion_tokens == 3" body
'

expect_success 'a bad request is a policy error in the trajectory, not a crash' '
	tasks 3 | $AGENT --policy "policy-openai -t 1 -p 2 $URL model" >out;
	jq -e ".trajectory.stop == \"policy_error\" and (.trajectory.stop_detail | test(\"top_p\"))" out
'

expect_success 'ca-rollout --checkpoint serves the checkpoint for the rollout and stops it' '
	tasks 4 >t &&
	ca-rollout --checkpoint "$M" --sample-opts "--max-tokens 8" \
		--agent-opts "--unconfined --skill $TRASH_BASE/skill" --no-score -o run t 2>err &&
	grep -q "policy server up" err &&
	jq -e ".trajectory.messages[] | select(.role == \"assistant\") | .completion.token_ids | length > 0" \
		run/trajectories.ndjson &&
	pid=$(head -n 1 run/policy-serve.ndjson | jq .serve.pid) && ! kill -0 "$pid" 2>/dev/null &&
	jq -e -s "map(select(.request.path == \"/v1/chat/completions\")) | length > 0 and all(.request.status == 200)" \
		run/policy-serve.ndjson
'
test_done
