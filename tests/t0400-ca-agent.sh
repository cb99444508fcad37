#!/bin/sh
# ca-agent: the policy protocol, every tool, write-before-read refusal,
# confinement of paths, budgets, garbage policies, trusted evaluation
# snapshots, -j and the record contract. Runs unconfined (--unconfined)
# except where a test says it checks the sandbox.
. "$(dirname "$0")/test-lib.sh"

FAKE=$TESTS_DIR/data/agent/fake-eval
TASK='{"id":"t/1","code":"import torch\nclass Model(torch.nn.Module):\n    pass\n"}'

# call NAME ARGS-JSON: one assistant message with one tool call.
call() {
	jq -cn --arg n "$1" --arg a "$2" \
		'{role: "assistant", content: null, tool_calls: [{id: "c1", type: "function", function: {name: $n, arguments: $a}}]}'
}
# agent [OPTIONS]: run the turns in ./turns on one task, record in ./out.
agent() {
	printf "%s\n" "$TASK" | ca-agent --unconfined --build-cmd "$FAKE build" --verify-cmd "$FAKE verify" \
		--profile-cmd "$FAKE profile" --policy "policy-replay turns" "$@" >out
}
# obs N: the content of the N-th tool message (from 0).
obs() { jq -r "[.trajectory.messages[] | select(.role == \"tool\")][$1].content" out; }
err() { jq -r "[.trajectory.messages[] | select(.role == \"tool\")][$1].is_error // false" out; }

expect_success 'usage is printed by --help' 'ca-agent --help | grep -q "^usage: ca-agent"'
expect_status 2 'a policy is required' 'printf "%s\n" "$TASK" | ca-agent --unconfined'
expect_status 2 'a bad number is a usage error' 'ca-agent --max-turns x --policy true </dev/null'

expect_success 'protocol: the policy gets messages and tools, a message without calls ends the task' '
	cat >policy <<-\EOF &&
	#!/bin/sh
	cat >conv.json
	echo "{\"role\": \"assistant\", \"content\": \"nothing to do\"}"
	EOF
	chmod +x policy &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy ./policy >out &&
	jq -e ".messages[0].role == \"system\" and .messages[1].role == \"user\" and (.tools | length) == 9
		and ([.tools[].function.name] | sort) == [\"bash\",\"bash_output\",\"edit\",\"glob\",\"grep\",\"kill_bash\",\"multiedit\",\"read\",\"write\"]
		and .turn == 1 and .max_turns == 150 and .task_id == \"t/1\"" conv.json &&
	jq -e ".id == \"t/1\" and .code != null and .trajectory.stop == \"done\" and .trajectory.turns == 1
		and .trajectory.id == \"t/1#1\" and (.trajectory.messages | length) == 3
		and .trajectory.messages[2].content == \"nothing to do\"" out
'

expect_success 'protocol: an OpenAI chat completion response is accepted too' '
	cat >policy <<-\EOF &&
	#!/bin/sh
	cat >/dev/null
	echo "{\"choices\": [{\"message\": {\"role\": \"assistant\", \"content\": \"ok\"}}], \"usage\": {\"total_tokens\": 777}}"
	EOF
	chmod +x policy &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy ./policy >out &&
	jq -e ".trajectory.stop == \"done\" and .trajectory.tokens >= 777" out
'

expect_success 'the workspace holds model.py (the task code, read-only), SKILL.md and kernels/' '
	call bash "{\"command\": \"ls; cat model.py; stat -c %a model.py\"}" >turns &&
	agent && obs 0 >o && grep -q "^SKILL.md$" o && grep -q "^kernels$" o && grep -q "^class Model" o && grep -q "^444$" o
'

expect_success 'bash: directory and exported variables persist, output and status come back' '
	{ call bash "{\"command\": \"mkdir -p sub && cd sub && export GREETING=hello && X=local\"}"
	  call bash "{\"command\": \"pwd; echo \$GREETING; echo err >&2; exit 3\"}"; } >turns &&
	agent && obs 1 >o && grep -q "/workspace/sub$" o && grep -q "^hello$" o && grep -q "^err$" o &&
	grep -q "exit status 3" o
'

expect_success 'bash: a command past its timeout is killed and says so' '
	call bash "{\"command\": \"sleep 30\", \"timeout\": 1}" >turns &&
	start=$(date +%s) && agent && end=$(date +%s) && [ $((end - start)) -lt 15 ] &&
	obs 0 | grep -q "limit and was killed"
'

expect_success 'bash: long output is truncated with a note' '
	call bash "{\"command\": \"seq 1 100000\"}" >turns &&
	agent --max-output 2000 && obs 0 >o && [ $(wc -c <o) -lt 2600 ] && grep -q "omitted" o &&
	head -1 o | grep -q "^1$" && tail -1 o | grep -q "^100000$"
'

expect_success 'bash: output over the capture limit (8 MiB) keeps its real end and counts what went' '
	call bash "{\"command\": \"seq 1 2000000\"}" >turns &&
	agent --max-output 2000 && obs 0 >o && head -1 o | grep -q "^1$" && tail -1 o | grep -q "^2000000$" &&
	grep -q "^\[\.\.\. 14886895 bytes of output omitted \.\.\.\]$" o
'

expect_success 'bash_output: a long new output keeps its real end' '
	{ call bash "{\"command\": \"seq 1 300000\", \"run_in_background\": true}"
	  call bash "{\"command\": \"sleep 1\"}"
	  call bash_output "{\"id\": 1}"; } >turns &&
	agent --max-output 2000 && obs 2 >o && head -1 o | grep -q "^1$" &&
	grep -q "^300000$" o && tail -1 o | grep -q "finished with status 0" && grep -q "omitted" o
'

expect_success 'bash: background commands, bash_output and kill_bash' '
	{ call bash "{\"command\": \"echo started; sleep 60\", \"run_in_background\": true}"
	  call bash "{\"command\": \"sleep 1\"}"
	  call bash_output "{\"id\": 1}"
	  call kill_bash "{\"id\": 1}"
	  call bash_output "{\"id\": 1}"
	  call bash_output "{\"id\": 7}"; } >turns &&
	agent && obs 0 | grep -q "background command 1" && obs 2 | grep -q "^started" &&
	obs 2 | grep -q "still running" && obs 3 | grep -q "killed background command 1" &&
	obs 4 | grep -q "finished" && [ "$(err 5)" = true ]
'

expect_success 'read: numbered lines, offset and limit' '
	{ call bash "{\"command\": \"seq 1 10 >ten\"}"
	  call read "{\"path\": \"ten\", \"offset\": 3, \"limit\": 2}"; } >turns &&
	agent && obs 1 >o && grep -q "^     3	3$" o && grep -q "^     4	4$" o && ! grep -q "	5$" o &&
	grep -q "showing lines 3-4 of 10" o
'

expect_success 'write: creates files and directories; refuses to overwrite a file not read first' '
	{ call write "{\"path\": \"kernels/a/k.cu\", \"content\": \"one\"}"
	  call bash "{\"command\": \"echo two >other\"}"
	  call write "{\"path\": \"other\", \"content\": \"three\"}"
	  call read "{\"path\": \"other\"}"
	  call write "{\"path\": \"other\", \"content\": \"four\"}"
	  call bash "{\"command\": \"cat kernels/a/k.cu other\"}"; } >turns &&
	agent && obs 0 | grep -q "created kernels/a/k.cu" && [ "$(err 2)" = true ] &&
	obs 2 | grep -q "read it first" && obs 4 | grep -q overwrote && [ "$(obs 5)" = "onefour" ]
'

expect_success 'write and edit refuse the evaluation files' '
	{ call read "{\"path\": \"model.py\"}"
	  call write "{\"path\": \"model.py\", \"content\": \"x\"}"
	  call edit "{\"path\": \"SKILL.md\", \"old_string\": \"a\", \"new_string\": \"b\"}"; } >turns &&
	agent && obs 1 | grep -q "read-only" && obs 2 | grep -q "read-only"
'

expect_success 'paths outside the workspace are refused, symlinks included' '
	{ call read "{\"path\": \"/etc/passwd\"}"
	  call read "{\"path\": \"../../../../etc/passwd\"}"
	  call bash "{\"command\": \"ln -s /etc escape && ln -s /etc/hostname host\"}"
	  call read "{\"path\": \"escape/passwd\"}"
	  call write "{\"path\": \"escape/new\", \"content\": \"x\"}"
	  call read "{\"path\": \"host\"}"
	  call glob "{\"pattern\": \"*\", \"path\": \"/etc\"}"
	  call grep "{\"pattern\": \"root\", \"path\": \"/etc\"}"; } >turns &&
	agent && for i in 0 1 3 4 5 6 7; do obs $i | grep -q "outside the workspace" || exit 1; done
'

expect_success 'edit: a unique replacement; not found and ambiguous are errors; replace_all' '
	{ call write "{\"path\": \"f\", \"content\": \"a b a c\"}"
	  call edit "{\"path\": \"f\", \"old_string\": \"b\", \"new_string\": \"B\"}"
	  call edit "{\"path\": \"f\", \"old_string\": \"a\", \"new_string\": \"A\"}"
	  call edit "{\"path\": \"f\", \"old_string\": \"zz\", \"new_string\": \"y\"}"
	  call edit "{\"path\": \"f\", \"old_string\": \"a\", \"new_string\": \"A\", \"replace_all\": true}"
	  call bash "{\"command\": \"cat f\"}"
	  call edit "{\"path\": \"new\", \"old_string\": \"a\", \"new_string\": \"b\"}"; } >turns &&
	agent && obs 1 | grep -q "1 replacement" && obs 2 | grep -q "occurs 2 times" &&
	obs 3 | grep -q "not found" && obs 4 | grep -q "2 replacements" && [ "$(obs 5)" = "A B A c" ] &&
	[ "$(err 6)" = true ]
'

expect_success 'edit needs the file read first' '
	{ call bash "{\"command\": \"echo abc >g\"}"
	  call edit "{\"path\": \"g\", \"old_string\": \"b\", \"new_string\": \"B\"}"; } >turns &&
	agent && obs 1 | grep -q "read it first"
'

expect_success 'multiedit: all edits or none' '
	{ call write "{\"path\": \"m\", \"content\": \"one two three\"}"
	  call multiedit "{\"path\": \"m\", \"edits\": [{\"old_string\": \"one\", \"new_string\": \"1\"}, {\"old_string\": \"nope\", \"new_string\": \"x\"}]}"
	  call bash "{\"command\": \"cat m\"}"
	  call multiedit "{\"path\": \"m\", \"edits\": [{\"old_string\": \"one\", \"new_string\": \"1\"}, {\"old_string\": \"1 two\", \"new_string\": \"1 2\"}]}"
	  call bash "{\"command\": \"cat m\"}"; } >turns &&
	agent && obs 1 | grep -q "edit 2 of 2" && obs 1 | grep -q "no edit was applied" &&
	[ "$(obs 2)" = "one two three" ] && obs 3 | grep -q "applied 2 edits" && [ "$(obs 4)" = "1 2 three" ]
'

expect_success 'glob: * stays in one directory, ** crosses them' '
	{ call bash "{\"command\": \"mkdir -p kernels/x && touch a.cu kernels/b.cu kernels/x/c.cu kernels/d.h\"}"
	  call glob "{\"pattern\": \"*.cu\"}"
	  call glob "{\"pattern\": \"**/*.cu\"}"
	  call glob "{\"pattern\": \"*.h\", \"path\": \"kernels\"}"
	  call glob "{\"pattern\": \"*.zz\"}"; } >turns &&
	agent && [ "$(obs 1)" = "a.cu" ] &&
	[ "$(obs 2 | tr "\n" " ")" = "a.cu kernels/b.cu kernels/x/c.cu " ] &&
	[ "$(obs 3)" = "kernels/d.h" ] && obs 4 | grep -q "no files match"
'

expect_success 'grep: regex, file filter, context lines, case and modes' '
	{ call bash "{\"command\": \"printf \\\"a\\\\nb\\\\nHIT one\\\\nc\\\\nd\\\\n\\\" >x.cu; printf \\\"hit two\\\\n\\\" >y.py\"}"
	  call grep "{\"pattern\": \"HIT|hit\", \"glob\": \"*.cu\", \"context\": 1}"
	  call grep "{\"pattern\": \"hit\", \"case_insensitive\": true, \"output_mode\": \"files_with_matches\"}"
	  call grep "{\"pattern\": \"hit\", \"output_mode\": \"count\"}"
	  call grep "{\"pattern\": \"(\"}"; } >turns &&
	agent && [ "$(obs 1 | tr "\n" "|")" = "x.cu-2-b|x.cu:3:HIT one|x.cu-4-c|" ] &&
	[ "$(obs 2 | tr "\n" " ")" = "x.cu y.py " ] && [ "$(obs 3)" = "y.py:1" ] && obs 4 | grep -q "bad regular expression"
'

expect_success 'invalid tool calls are answered with an error and counted' '
	printf "%s\n" \
	  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"rm_rf\",\"arguments\":\"{}\"}}]}" \
	  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{not json\"}}]}" \
	  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{}\"}}]}" \
	  "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[42, {\"function\": {}}]}" >turns &&
	agent && jq -e ".trajectory.invalid_tool_calls == 5 and .trajectory.tool_calls == 5 and .trajectory.stop == \"done\"" out &&
	obs 0 | grep -q "unknown tool rm_rf" && obs 1 | grep -q "not a JSON object" && obs 2 | grep -q "needs a string argument" &&
	[ "$(err 3)" = true ] && [ "$(err 4)" = true ]
'

expect_success 'missing and mistyped arguments are invalid calls, counted; failed calls are not' '
	jq -cn "{role: \"assistant\", content: null, tool_calls: ([
		[\"read\", {}], [\"read\", {path: 5}], [\"write\", {path: \"a\"}],
		[\"edit\", {path: \"a\", old_string: \"x\", new_string: \"y\", replace_all: \"yes\"}],
		[\"multiedit\", {path: \"a\", edits: [{old_string: 1}]}], [\"glob\", {pattern: \"*\", path: 3}],
		[\"grep\", {pattern: \"x\", output_mode: \"lines\"}], [\"grep\", {pattern: \"x\", context: \"many\"}],
		[\"grep\", {pattern: \"x\", case_insensitive: 1}], [\"bash\", {command: 5}],
		[\"bash\", {command: \"true\", timeout: \"soon\"}], [\"bash\", {command: \"true\", run_in_background: \"yes\"}],
		[\"bash_output\", {}], [\"kill_bash\", {id: \"x\"}],
		[\"read\", {path: \"missing\"}], [\"bash_output\", {id: 9}], [\"bash\", {command: \"exit 1\"}]
	] | to_entries | map({id: \"c\(.key)\", type: \"function\",
		function: {name: .value[0], arguments: (.value[1] | tojson)}}))}" >turns &&
	agent && jq -e ".trajectory.invalid_tool_calls == 14 and .trajectory.tool_calls == 17" out &&
	for i in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do [ "$(err $i)" = true ] || { echo "call $i not an error"; exit 1; }; done &&
	obs 14 | grep -q "^error: read missing" && [ "$(err 16)" = false ] && obs 16 | grep -q "exit status 1"
'

expect_success 'a tool call id used twice in a message is an invalid call; every tool message has its own id' '
	jq -cn "{role: \"assistant\", content: null, tool_calls: [
		{type: \"function\", function: {name: \"bash\", arguments: ({command: \"echo first >one\"} | tojson)}},
		{id: \"x\", type: \"function\", function: {name: \"bash\", arguments: ({command: \"echo x\"} | tojson)}},
		{id: \"x\", type: \"function\", function: {name: \"bash\", arguments: ({command: \"echo again >two\"} | tojson)}},
		{id: \"call_1_0\", type: \"function\", function: {name: \"glob\", arguments: ({pattern: \"*\"} | tojson)}}]}" >turns &&
	agent && jq -e "[.trajectory.messages[] | select(.role == \"tool\") | .tool_call_id] as \$ids
		| (\$ids | length) == 4 and (\$ids | unique | length) == 4
		and [.trajectory.messages[] | select(.role == \"assistant\") | .tool_calls[]?.id] == \$ids
		and .trajectory.invalid_tool_calls == 1 and (.trajectory.final.files | has(\"two\") | not)
		and .trajectory.final.files.one == \"first\n\"" out &&
	[ "$(err 2)" = true ] && obs 2 | grep -q "used by an earlier call" && obs 1 | grep -q "^x$" &&
	[ "$(err 3)" = false ]
'

expect_success 'a policy writing random bytes yields a clean trajectory with a stop reason' '
	printf "%s\n" "$TASK" | ca-agent --unconfined --max-invalid 3 --policy "head -c 300 /dev/urandom" >out &&
	[ $(wc -l <out) -eq 1 ] &&
	jq -e ".trajectory.stop == \"invalid_output\" and .trajectory.invalid_outputs == 3 and .trajectory.turns == 3
		and ([.trajectory.messages[] | select(.invalid)] | length) == 3" out
'

expect_success 'garbage JSON shapes are invalid outputs, not crashes' '
	for g in "[1,2]" "\"text\"" "{\"foo\": 1}" "{\"content\": 5}" "{\"tool_calls\": \"x\"}" "{\"choices\": []}" ""; do
		printf "%s\n" "$TASK" | ca-agent --unconfined --max-invalid 1 --policy "echo '\''$g'\''" >out || exit 1
		jq -e ".trajectory.stop == \"invalid_output\"" out >/dev/null || { echo "not invalid: $g"; exit 1; }
	done
'

expect_success 'a message of another role is an invalid output, not the assistant'\''s turn' '
	for r in "\"user\"" "\"system\"" "\"tool\"" "null" "5"; do
		printf "%s\n" "$TASK" | ca-agent --unconfined --max-invalid 1 \
			--policy "echo '\''{\"role\": $r, \"content\": \"done, says the user\"}'\''" >out || exit 1
		jq -e ".trajectory.stop == \"invalid_output\" and .trajectory.invalid_outputs == 1
			and ([.trajectory.messages[] | select(.is_error)][0].content | test(\"role\"))" out >/dev/null ||
			{ echo "taken as the assistant: role $r"; exit 1; }
	done &&
	printf "%s\n" "$TASK" | ca-agent --unconfined \
		--policy "echo '\''{\"role\": \"assistant\", \"content\": \"done\"}'\''" >out &&
	jq -e ".trajectory.stop == \"done\" and .trajectory.invalid_outputs == 0" out
'

expect_status 4 'a failing policy stops the task with policy_error (exit 4), record still written' '
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "echo boom >&2; exit 9" >out; s=$?
	jq -e ".trajectory.stop == \"policy_error\" and (.trajectory.stop_detail | test(\"boom\"))" out >/dev/null && exit $s
'

expect_success 'a 9 MB policy message is read whole; the end of a long standard error is kept' '
	cat >policy <<-\EOF &&
	#!/bin/sh
	cat >/dev/null
	printf "{\"role\": \"assistant\", \"content\": \""
	head -c 9437184 /dev/zero | tr "\0" a
	printf "\"}\n"
	EOF
	chmod +x policy &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy ./policy >out &&
	jq -e ".trajectory.stop == \"done\" and .trajectory.invalid_outputs == 0
		and (.trajectory.messages[-1].content | length) == 9437184" out &&
	printf "%s\n" "$TASK" | ca-agent --unconfined \
		--policy "head -c 9437184 /dev/zero | tr \"\\\\0\" x >&2; echo the real end >&2; exit 9" >out
	jq -e ".trajectory.stop == \"policy_error\" and (.trajectory.stop_detail | endswith(\"the real end\n\"))" out
'

expect_success 'a policy past --policy-time stops with policy_timeout' '
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy-time 1 --policy "sleep 20" >out; 
	jq -e ".trajectory.stop == \"policy_timeout\"" out
'

expect_success 'budget: --max-turns' '
	call bash "{\"command\": \"true\"}" >one && for i in 1 2 3 4 5 6; do cat one; done >turns &&
	agent --max-turns 4 && jq -e ".trajectory.stop == \"max_turns\" and .trajectory.turns == 4" out
'

expect_success 'budget: --max-context (tokens)' '
	call bash "{\"command\": \"seq 1 3000\"}" >one && for i in 1 2 3 4 5 6; do cat one; done >turns &&
	agent --max-context 8000 && jq -e ".trajectory.stop == \"context\" and .trajectory.turns < 6" out
'

expect_success 'budget: --max-time (wall clock)' '
	call bash "{\"command\": \"sleep 1\"}" >one && for i in 1 2 3 4 5 6; do cat one; done >turns &&
	agent --max-time 1.5 && jq -e ".trajectory.stop == \"wall_clock\" and .trajectory.turns < 4" out
'

expect_success 'ca-build, ca-verify, ca-profile typed alone run outside on a snapshot' '
	{ call write "{\"path\": \"model_new.py\", \"content\": \"slow\"}"
	  call bash "{\"command\": \"ca-build\"}"
	  call bash "{\"command\": \"ca-verify -H .\"}"
	  call read "{\"path\": \"model_new.py\"}"
	  call write "{\"path\": \"model_new.py\", \"content\": \"FAST\"}"
	  call write "{\"path\": \"kernels/k.cu\", \"content\": \"// k\"}"
	  call bash "{\"command\": \"./ca-verify\"}"
	  call bash "{\"command\": \"ca-profile\"}"
	  call bash "{\"command\": \"cd kernels && ca-verify\"}"; } >turns &&
	agent && jq -e "(.trajectory.snapshots | length) == 4
		and ([.trajectory.snapshots[].command] == [\"ca-build\", \"ca-verify\", \"ca-verify\", \"ca-profile\"])
		and .trajectory.snapshots[1].args == [\"-H\"]
		and .trajectory.snapshots[1].files == {\"model_new.py\": \"slow\"}
		and .trajectory.snapshots[1].result.verify.ok == false
		and .trajectory.snapshots[2].files == {\"kernels/k.cu\": \"// k\", \"model_new.py\": \"FAST\"}
		and .trajectory.snapshots[2].result.verify.ok == true
		and .trajectory.snapshots[3].result.profile.candidate_us == 50
		and .trajectory.final.files[\"model_new.py\"] == \"FAST\"
		and .candidate.files == .trajectory.final.files" out &&
	obs 1 | grep -q "model.py" && obs 6 | grep -q "\"ok\": true" && obs 8 | grep -q "typed alone"
'

expect_status 4 'a trusted command whose result is not one line of JSON is an error, not a silent null' '
	{ call bash "{\"command\": \"ca-verify\"}"
	  call bash "{\"command\": \"ca-verify -H\"}"
	  call bash "{\"command\": \"ca-build\"}"; } >turns &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --verify-cmd "jq -n \"{verify: {ok: true}}\"; :" \
		--build-cmd "echo built; :" --policy "policy-replay turns" >out 2>err; s=$?
	cat err && [ $(wc -l <err) -eq 2 ] && grep -q "verify-cmd .*spread over several lines" err &&
	grep -q "build-cmd .*not a JSON object" err &&
	jq -e "[.trajectory.snapshots[] | .result] == [null, null, null]
		and (.trajectory.snapshots[0].error | test(\"one line of JSON\"))
		and (.trajectory.snapshots[1] | has(\"error\") | not)
		and (.trajectory.snapshots[2].error | test(\"not a JSON object\"))" out >/dev/null &&
	obs 0 | grep -q "\"ok\": true" && exit $s
'

expect_success 'snapshots take no symbolic links, hidden files or build outputs' '
	{ call bash "{\"command\": \"mkdir -p kernels build && ln -s /etc/passwd leak.txt && ln -s /etc kernels/etc && echo x >.hidden && echo o >build/out && echo k >kernels/k.cu && echo so >kernels/libk.so\"}"
	  call bash "{\"command\": \"ca-build\"}"; } >turns &&
	agent && jq -e ".trajectory.snapshots[0].files == {\"kernels/k.cu\": \"k\n\"}" out
'

expect_success 'only harmless options reach the trusted commands' '
	{ call bash "{\"command\": \"ca-verify --no-sandbox\"}"
	  call bash "{\"command\": \"ca-verify --allow-torch .\"}"
	  call bash "{\"command\": \"ca-verify --checks\"}"
	  call bash "{\"command\": \"ca-build -H=1\"}"
	  call bash "{\"command\": \"ca-verify --checks=3 --seed 7\"}"
	  call bash "{\"command\": \"ca-profile --iters 5 -H\"}"
	  call bash "{\"command\": \"ca-profile --verify\"}"; } >turns &&
	agent && obs 0 | grep -q "not an option the agent may give" && obs 1 | grep -q "allow-torch" &&
	obs 2 | grep -q "needs a number" && [ "$(err 3)" = true ] &&
	jq -e "[.trajectory.snapshots[].args] == [[\"--checks\", \"3\", \"--seed\", \"7\"], [\"--iters\", \"5\", \"-H\"], [\"--verify\"]]" out
'

expect_success 'the snapshot gets the task code as model.py, whatever the workspace holds' '
	{ call bash "{\"command\": \"ca-build\"}"; } >turns &&
	agent && jq -e ".trajectory.snapshots[0].result.files | test(\"./model.py\")" out &&
	jq -e ".trajectory.snapshots[0].files | has(\"model.py\") | not" out
'

expect_success '-j runs tasks in parallel, keeps input order, count in = count out' '
	cat >policy <<-\EOF &&
	#!/bin/sh
	cat >/dev/null
	sleep 1
	echo "{\"role\": \"assistant\", \"content\": \"$CA_TASK_ID\"}"
	EOF
	chmod +x policy &&
	for i in 1 2 3 4; do printf "{\"id\": \"task%s\", \"code\": \"x = 1\\\\n\"}\n" $i; done >tasks &&
	start=$(date +%s) && ca-agent --unconfined -j 4 --policy ./policy tasks >out && end=$(date +%s) &&
	[ $((end - start)) -lt 4 ] &&
	[ "$(jq -r ".trajectory.messages[-1].content" out | tr "\n" " ")" = "task1 task2 task3 task4 " ]
'

expect_success 'streaming: -j keeps input order when later tasks finish first' '
	cat >policy <<-\EOF &&
	#!/bin/sh
	cat >/dev/null
	case $CA_TASK_ID in task1) sleep 2 ;; esac
	echo "{\"role\": \"assistant\", \"content\": \"$CA_TASK_ID\"}"
	EOF
	chmod +x policy &&
	for i in 1 2 3 4 5; do printf "{\"id\": \"task%s\", \"code\": \"x = 1\\\\n\"}\n" $i; done >tasks &&
	ca-agent --unconfined -j 3 --policy ./policy tasks >out &&
	[ "$(jq -r ".trajectory.messages[-1].content" out | tr "\n" " ")" = "task1 task2 task3 task4 task5 " ]
'

expect_status 3 'streaming: each task starts as it arrives and with -u its record leaves at once (a coprocess)' '
	mkfifo in && : >out &&
	{ ca-agent -u --unconfined --policy "echo {\\\"content\\\":\\\"x\\\"}" <in >out 2>err & } &&
	exec 3>in &&
	# lines N: wait up to 10 s for N records
	lines() { i=0; while [ $(wc -l <out) -lt $1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done; [ $(wc -l <out) -eq $1 ]; }
	printf "%s\n" "$TASK" >&3 && lines 1 && printf "{oops\n" >&3 && lines 2 && printf "%s\n" "$TASK" >&3 && lines 3 ||
		{ echo "no record before the next line came"; exec 3>&-; wait; exit 1; }
	exec 3>&-
	wait $!; s=$?
	jq -e -s "length == 3 and .[0].trajectory.stop == \"done\" and .[1].error.line == 2
		and .[2].trajectory.id == \"t/1#3\"" out >/dev/null && exit $s
'

expect_success 'streaming: --progress reports on standard error, nothing without it when not a terminal' '
	printf "%s\n" "$TASK" "$TASK" | ca-agent --unconfined --progress --policy "echo {\\\"content\\\":\\\"x\\\"}" >out 2>err &&
	grep -q "ca-agent: 2 records, done" err &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "echo {\\\"content\\\":\\\"x\\\"}" >out 2>err &&
	[ ! -s err ]
'

expect_status 3 'a malformed line becomes an error record; a task without code a setup_error' '
	{ printf "%s\n" "$TASK"; echo "{oops"; echo "{\"id\": \"nocode\"}"; } >tasks &&
	ca-agent --unconfined --policy "echo {\\\"content\\\":\\\"x\\\"}" tasks >out 2>err; s=$?
	jq -e -s "length == 3 and .[1].error.line == 2 and .[0].trajectory.stop == \"done\"
		and .[2].id == \"nocode\" and .[2].trajectory.stop == \"setup_error\"" out >/dev/null &&
	grep -q "tasks:2:" err && exit $s
'

expect_success 'writing to a full disk fails with status 4 and says why' '
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "echo {\\\"content\\\":\\\"x\\\"}" >/dev/full 2>err
	[ $? -eq 4 ] && grep -q "^ca-agent: write error on stdout: No space left on device$" err &&
	[ $(grep -c "write error" err) -eq 1 ]
'

expect_status 3 'an id holding a newline cannot forge a diagnostic line' '
	printf "%s\n" "{\"id\": \"x\\nca-agent: forged\", \"no\": \"code\"}" |
		ca-agent --unconfined --policy true >out 2>err; s=$?
	cat err && [ $(wc -l <err) -eq 1 ] && ! grep -q "^ca-agent: forged" err &&
	jq -e ".trajectory.stop == \"setup_error\"" out >/dev/null && exit $s
'

expect_success 'killing ca-agent stops its workers and their policies, and cleans up' '
	marker=$((3000 + $$ % 1000)).5 && mkdir tmp &&
	{ printf "%s\n" "$TASK" | TMPDIR=$PWD/tmp ca-agent --unconfined --policy "sleep $marker; true" >/dev/null 2>err & } &&
	pid=$! && sleep 1 && kill $pid && sleep 1 &&
	! pgrep -f "sleep $marker" >/dev/null && [ -z "$(ls tmp)" ] && grep -q "stopped by signal 15" err
'

expect_success 'workspaces are removed unless --keep' '
	mkdir wd && printf "%s\n" "$TASK" | ca-agent --unconfined --workdir wd --policy "echo {\\\"content\\\":\\\"x\\\"}" >out &&
	[ -z "$(ls wd)" ] &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --keep --workdir wd --policy "echo {\\\"content\\\":\\\"x\\\"}" >out 2>/dev/null &&
	ws=$(jq -r .trajectory.workspace out) && [ -f "$ws/model.py" ]
'

# The sandbox: the agent's shell as an unprivileged user, no network, no
# writes outside its workspace, evaluation files read-only.
if ! command -v ca-sandbox >/dev/null 2>&1; then
	skip 'confined bash' 'ca-sandbox is not built'
else
	expect_success 'confined: bash cannot write outside, cannot touch model.py, has no network' '
		mkdir outside && chmod 777 outside &&
		call bash "{\"command\": \"touch $PWD/outside/x; chmod u+w model.py; echo y >>model.py; echo ok >mine; cat mine; (exec 3<>/dev/tcp/1.1.1.1/80) 2>&1 | head -1; id -u\"}" >turns &&
		printf "%s\n" "$TASK" | ca-agent --build-cmd "$FAKE build" --policy "policy-replay turns" >out &&
		jq -e ".trajectory.confined == true" out && [ ! -e outside/x ] &&
		obs 0 >o && grep -q "^ok$" o && ! grep -q "^0$" o &&
		jq -e ".trajectory.final.files.mine == \"ok\n\"" out
	'
	expect_success 'confined: other tasks'\''s directories, later ones too, and our own state are out of reach' '
		W=$(mktemp -d /var/tmp/ca-agent-test.XXXXXX) && chmod 755 "$W" &&
		printf "{\"id\": \"%s\", \"code\": \"x\\\\n\"}\n" a b c >tasks &&
		{ call bash "{\"command\": \"ca-build\"}"
		  jq -cn --arg c "case \$PWD in */000001-a/workspace) sleep 3 ;; esac
			find $W -name workspace 2>/dev/null | wc -l; find $W -path \"*/state/*\" 2>/dev/null | wc -l; echo end" \
			"{role: \"assistant\", content: null, tool_calls: [{id: \"c\", type: \"function\",
			  function: {name: \"bash\", arguments: ({command: \$c} | tojson)}}]}"; } >turns &&
		ca-agent -j 2 --workdir "$W" --build-cmd "$FAKE build" --policy "policy-replay turns" tasks >out; s=$?; rm -rf "$W"
		[ $s -eq 0 ] && [ $(wc -l <out) -eq 3 ] && jq -e "(.trajectory.snapshots | length) == 1" out >/dev/null &&
		[ "$(head -n 1 out | jq -r ".trajectory.messages[5].content" | tr "\n" " ")" = "1 0 end " ]
	'
	expect_success 'confined: the per-command time limit kills the whole tree' '
		call bash "{\"command\": \"sleep 100 & sleep 100; echo never\", \"timeout\": 1}" >turns &&
		start=$(date +%s) && printf "%s\n" "$TASK" | ca-agent --policy "policy-replay turns" >out && end=$(date +%s) &&
		[ $((end - start)) -lt 20 ] && obs 0 | grep -q "killed" && ! obs 0 | grep -q never
	'
fi

expect_success 'an evaluator fault is shown as the evaluator failing, not the kernel' '
	{ call write "{\"path\": \"model_new.py\", \"content\": \"EVALFAULT\"}"
	  call bash "{\"command\": \"ca-verify\"}"; } >turns &&
	agent && obs 1 >seen && cat seen | sed "s/^/# /" &&
	grep -q "the evaluator itself failed, not your kernel" seen && grep -q "exit status 4" seen
'
test_done
