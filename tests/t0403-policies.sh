#!/bin/sh
# The shipped policies: policy-openai (request shape, response passing,
# errors) and policy-replay (plays back a recorded trajectory).
. "$(dirname "$0")/test-lib.sh"

TASK='{"id":"p1","code":"class Model: pass\n"}'
CONV='{"task_id":"p1","turn":2,"tools":[{"type":"function","function":{"name":"bash"}}],"messages":[
 {"role":"system","content":"s","turn":0,"t_s":0},
 {"role":"assistant","content":"bad","invalid":true,"turn":1},
 {"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"bash","arguments":"{}"}}],"reasoning_content":"r"},
 {"role":"tool","tool_call_id":"x","name":"bash","content":"o","is_error":true,"turn":1}]}'

expect_status 2 'policy-openai: URL and MODEL are required' 'policy-openai </dev/null'

expect_success 'policy-openai: the request has the chat API fields only, an assistant message as the model gave it' '
	printf "%s" "$CONV" | policy-openai -n -m 64 -t 0.7 http://host:8000/v1 my-model >req &&
	jq -e ".model == \"my-model\" and .max_tokens == 64 and .temperature == 0.7 and (.tools | length) == 1
		and .messages[0] == {role: \"system\", content: \"s\"}
		and .messages[2] == {role: \"assistant\", content: null, tool_calls: [{id: \"x\", type: \"function\", function: {name: \"bash\", arguments: \"{}\"}}], reasoning_content: \"r\"}
		and .messages[3] == {role: \"tool\", tool_call_id: \"x\", content: \"o\"}" req
'

expect_success 'policy-openai drives ca-agent (a canned response through file://)' '
	echo "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"all done\"}}],\"usage\":{\"total_tokens\":12}}" >resp.json &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "policy-openai file://$PWD/resp.json m" >out &&
	jq -e ".trajectory.stop == \"done\" and .trajectory.messages[-1].content == \"all done\"" out
'

expect_success 'policy-openai: an unreachable endpoint is a policy_error' '
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "policy-openai http://127.0.0.1:9/v1 m" >out 2>/dev/null;
	jq -e ".trajectory.stop == \"policy_error\" and (.trajectory.stop_detail | test(\"policy-openai\"))" out
'

expect_success 'policy-openai: an error object from the endpoint is a policy_error' '
	echo "{\"error\":{\"message\":\"model not found\"}}" >resp.json &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "policy-openai file://$PWD/resp.json m" >out 2>/dev/null;
	jq -e ".trajectory.stop == \"policy_error\"" out
'

expect_success 'policy-replay: replays a recorded trajectory record, then says done' '
	jq -cn "{role: \"assistant\", content: \"one\", tool_calls: [{id: \"a\", type: \"function\", function: {name: \"bash\", arguments: \"{\\\"command\\\":\\\"echo hi >f\\\"}\"}}]}" >turns &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "policy-replay turns" >first &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "policy-replay first" >second &&
	jq -e ".trajectory.stop == \"done\" and .trajectory.final.files.f == \"hi\n\"
		and .trajectory.messages[2].content == \"one\" and .trajectory.turns == 2" second
'

expect_success 'policy-replay: picks the recording whose task id matches' '
	{ echo "{\"id\": \"other\", \"trajectory\": {\"messages\": [{\"role\": \"assistant\", \"content\": \"wrong\"}]}}";
	  echo "{\"id\": \"p1\", \"trajectory\": {\"messages\": [{\"role\": \"assistant\", \"content\": \"right\"}]}}"; } >rec &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --policy "policy-replay rec" >out &&
	jq -e ".trajectory.messages[2].content == \"right\"" out
'

expect_success 'policy-replay --record: the turns that write two versions of a workspace and check each' '
	mkdir -p v1/kernels v2/kernels && echo a >v1/kernels/a.cu && echo m1 >v1/model_new.py &&
	echo b >v2/kernels/b.cu && echo m2 >v2/model_new.py &&
	policy-replay --record --id p1 v1 --run "ca-build,ca-profile --verify" v2 >rec &&
	jq -r ".trajectory.messages[] | [.tool_calls[0].function.name // \"done\", (.tool_calls[0].function.arguments // \"{}\" | fromjson | .path // .command // \"\")] | join(\" \")" rec >got &&
	printf "%s\n" "read model.py" "write kernels/a.cu" "write model_new.py" "bash ca-build" "bash ca-verify" "bash ca-profile" \
		"write kernels/b.cu" "read model_new.py" "write model_new.py" "bash ca-build" "bash ca-profile --verify" "done " >want &&
	cmp_output want got &&
	printf "%s\n" "$TASK" | ca-agent --unconfined --build-cmd "echo {\\\"ok\\\":true}; :" --verify-cmd true --profile-cmd true \
		--policy "policy-replay rec" >out &&
	jq -e ".trajectory.stop == \"done\" and .trajectory.invalid_tool_calls == 0 and .trajectory.final.files == {\"kernels/a.cu\": \"a\n\", \"kernels/b.cu\": \"b\n\", \"model_new.py\": \"m2\n\"}" out
'

expect_status 2 'policy-replay --record: a directory without model_new.py is a usage error' '
	mkdir d && policy-replay --record d
'

expect_success 'policy-ca-sample: renders tools and calls for ca-sample, parses <tool_call> blocks' '
	mkdir fakebin && ln -s "$TESTS_DIR/data/agent/fake-ca-sample" fakebin/ca-sample &&
	printf "%s\n" "$TASK" | PATH="$PWD/fakebin:$PATH" ca-agent --unconfined --policy "policy-ca-sample -t 0 ckpt" >out &&
	jq -e ".trajectory.stop == \"done\" and .trajectory.turns == 2 and .trajectory.invalid_tool_calls == 1
		and .trajectory.messages[2].tool_calls[0].function == {name: \"bash\", arguments: \"{\\\"command\\\":\\\"echo hi\\\"}\"}
		and .trajectory.messages[3].content == \"hi\" and .trajectory.messages[-1].content == \"Finished.\"" out &&
	jq -e ".messages[0].content | test(\"<tools>\")" sample-in.json &&
	jq -e ".messages[2].content | test(\"<tool_call>\")" sample-in.json &&
	jq -e ".messages[3].role == \"user\" and (.messages[3].content | test(\"<tool_response>\\nhi\\n</tool_response>\"))" sample-in.json
'

test_done
