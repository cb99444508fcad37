#!/bin/sh
# ca-rft-filter: keep trajectories with positive reward and no degenerate
# pattern; --keep-marked keeps all and says why.
. "$(dirname "$0")/test-lib.sh"

# traj REWARD [JQ-EDIT]: a trajectory record with the given outcome reward.
traj() {
	jq -nc --argjson r "$1" '
	def call(id; a): {id: id, type: "function", function: {name: "bash", arguments: a}};
	{id: "t", reward: {value: $r}, trajectory: {id: "t#1", stop: "done", invalid_tool_calls: 0, invalid_outputs: 0,
	  messages: [{role: "system", content: "s"}, {role: "user", content: "u"},
	    {role: "assistant", content: null, tool_calls: [call("a"; "{\"command\":\"ls\"}")]},
	    {role: "tool", tool_call_id: "a", content: "x"},
	    {role: "assistant", content: "done"}]}}' | jq -c "${2:-.}"
}
# Append n turns that each make the same call; failing ones get is_error.
repeat='def rep(n; err): reduce range(n) as $i (.; .trajectory.messages += [
	{role: "assistant", content: null, tool_calls: [{id: "r\($i)", type: "function", function: {name: "bash", arguments: "{\"command\":\"make\"}"}}]},
	{role: "tool", tool_call_id: "r\($i)", content: "error: x", is_error: err}]);'

expect_success 'usage is printed by --help' 'ca-rft-filter --help | grep -q "^usage: ca-rft-filter"'

expect_success 'a clean trajectory with reward 3 is kept and marked' '
	traj 3 | ca-rft-filter 2>e | jq -e ".rft.keep == true and .rft.reasons == []" && grep -q "kept 1 of 1" e
'

expect_success 'reward -1, 0 and a missing reward are dropped' '
	{ traj -1; traj 0; traj 1 "del(.reward)"; traj 2; } | ca-rft-filter 2>e >o &&
	[ $(wc -l <o) -eq 1 ] && jq -e ".reward.value == 2" o && grep -q "kept 1 of 4" e
'

expect_success '--keep-marked keeps every record and says why' '
	{ traj -1; traj 3 ".trajectory.invalid_tool_calls = 2"; } | ca-rft-filter --keep-marked 2>/dev/null >o &&
	jq -e -s "length == 2 and .[0].rft.keep == false and (.[0].rft.reasons[0] | test(\"reward -1\"))
		and (.[1].rft.reasons[0] | test(\"2 invalid\"))" o
'

expect_success 'the same failing call repeated --max-repeats times is degenerate' '
	traj 3 "$repeat rep(3; true)" | ca-rft-filter --keep-marked --max-loop 100 2>/dev/null |
		jq -e "(.rft.reasons | length) == 1 and (.rft.reasons[0] | test(\"same failing tool call 3 times: bash\"))" &&
	traj 3 "$repeat rep(2; true)" | ca-rft-filter --keep-marked 2>/dev/null | jq -e ".rft.keep"
'

expect_success 'a run of turns repeating earlier calls is a loop' '
	traj 3 "$repeat rep(6; false)" | ca-rft-filter --keep-marked 2>/dev/null |
		jq -e "(.rft.reasons | length) == 1 and (.rft.reasons[0] | test(\"5 turns in a row\"))" &&
	traj 3 "$repeat rep(6; false)" | ca-rft-filter --max-loop 6 2>/dev/null | jq -e ".rft.keep"
'

expect_success '--require-done drops trajectories cut by a budget; --min-reward raises the bar' '
	traj 3 ".trajectory.stop = \"max_turns\"" | ca-rft-filter --require-done --keep-marked 2>/dev/null |
		jq -e ".rft.reasons[0] | test(\"max_turns\")" &&
	traj 2 | ca-rft-filter --min-reward 2 2>/dev/null | wc -l | grep -q "^0$"
'

expect_status 3 'a malformed line and a record without trajectory are reported' '
	{ echo "{bad"; echo "{\"reward\": {\"value\": 3}}"; traj 3; } | ca-rft-filter --keep-marked >o 2>e; s=$?
	jq -e -s "length == 3 and .[0].error.line == 1 and .[1].rft.reasons == [\"no trajectory\"] and .[2].rft.keep" o >/dev/null &&
	grep -q "stdin:2: record has no trajectory" e && exit $s
'

expect_success 'kept records pass their fields through as written; the count is of trajectories' '
	{ traj 3 | sed "s/^{/{\"n\":12345678901234567890123,\"z\":-0.0,/"; echo "{bad"; traj 0; } |
		ca-rft-filter >o 2>e; test $? = 3 &&
	[ $(wc -l <o) -eq 2 ] && sed -n 1p o | grep -qF "{\"n\":12345678901234567890123,\"z\":-0.0," &&
	sed -n 2p o | jq -e ".error.line == 2" >/dev/null && grep -q "kept 1 of 2 trajectories" e
'

# --tokens: the conversation as policy-ca-sample renders it, in the chat
# format of a tokenizer (a small Qwen2-style one trained by the test).
if "$(ca_python)" -c 'import tokenizers' >/dev/null 2>&1 &&
	"$(ca_python)" "$ROOT/lib/py/ca_hf.py" tokenizer-fixture "$TRASH_BASE/fx" "$TESTS_DIR/data/t0503-corpus.txt" \
		>"$TRASH_BASE/fixture.log" 2>&1; then
	FX=$TRASH_BASE/fx PY=$(ca_python)
	export FX PY
	expect_success '--tokens: token record of the conversation policy-ca-sample shows, mask on what the assistant wrote' '
		jq -cn "def call(id; n; a): {id: id, type: \"function\", function: {name: n, arguments: a}};
			[{role: \"assistant\", content: \"Reading.\", tool_calls: [call(\"a\"; \"read\"; \"{\\\"path\\\": \\\"model.py\\\"}\"),
				call(\"b\"; \"bash\"; \"{\\\"command\\\": \\\"echo hi\\\"}\")]},
			 {role: \"assistant\", content: null, tool_calls: [call(\"c\"; \"nope\"; \"not json\")]},
			 {role: \"assistant\", content: \"Done.\"}][]" >turns &&
		printf "%s\n" "{\"id\":\"p1\",\"code\":\"x = 1\\n\"}" |
			ca-agent --unconfined --policy "policy-replay turns" | jq -c ". + {reward: {value: 3}}" >traj &&
		printf "%s\n" "{\"id\":\"p1\",\"code\":\"x = 1\\n\"}" |
			ca-agent --unconfined --policy "cat >conv.json; echo {\\\"content\\\":\\\"done\\\"}" >/dev/null &&
		mkdir fakebin && ln -s "$TESTS_DIR/data/agent/fake-ca-sample" fakebin/ca-sample &&
		jq -c --slurpfile t traj "{tools, messages: \$t[0].trajectory.messages}" conv.json |
			PATH="$PWD/fakebin:$PATH" policy-ca-sample ckpt >/dev/null &&
		ca-rft-filter --max-invalid 1 --tokens "$FX/tok-qwen2" traj >out 2>err &&
		jq -e "(.tokens | length) == (.mask | length) and .reward == 3 and (.mask | add) > 0" out &&
		"$PY" -c "
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1] + \"/tokenizer.json\")
rec = json.load(open(\"out\"))
shown = json.load(open(\"sample-in.json\"))[\"messages\"]
want = \"\".join(\"<|im_start|>%s\n%s<|im_end|>\n\" % (m[\"role\"], m[\"content\"]) for m in shown)
got = tok.decode(rec[\"tokens\"], skip_special_tokens=False)
assert got == want, (got, want)
spans, cur = [], []
for t, m in zip(rec[\"tokens\"], rec[\"mask\"]):
    if m: cur.append(t)
    elif cur: spans.append(cur); cur = []
if cur: spans.append(cur)
said = [tok.decode(s, skip_special_tokens=False) for s in spans]
assert len(said) == 3 and all(s.endswith(\"<|im_end|>\") for s in said), said
assert said[0].startswith(\"Reading.\\n<tool_call>\\n{\\\"name\\\":\\\"read\\\"\") and said[2] == \"Done.<|im_end|>\", said
assert \"not json\" in said[1], said
" "$FX/tok-qwen2"
	'
	expect_success '--tokens with --keep-marked: rejected trajectories too, an unscored one with reward -1' '
		jq -cn "{id: \"t\", trajectory: {messages: [{role: \"user\", content: \"u\"}, {role: \"assistant\", content: \"a\"}]}}" |
			ca-rft-filter --keep-marked --tokens "$FX/tok-llama3" >out 2>/dev/null;
		jq -e ".rft.keep == false and .reward == -1 and (.mask | add) > 0" out
	'
	expect_success '--tokens with --keep-marked: a trajectory the evaluator failed on has reward null, not -1' '
		jq -cn "{id: \"t\", trajectory: {messages: [{role: \"user\", content: \"u\"}, {role: \"assistant\", content: \"a\"}]},
			reward: {value: null, evaluator_fault: true}}" |
			ca-rft-filter --keep-marked --tokens "$FX/tok-llama3" >out 2>/dev/null;
		jq -e ".rft.keep == false and .reward == null" out
	'
else
	skip '--tokens' 'the tokenizers library is not installed (make deps)'
fi
expect_status 4 '--tokens: a directory without tokenizer.json is a system error' '
	mkdir empty && ca-rft-filter --tokens empty </dev/null
'
test_done
