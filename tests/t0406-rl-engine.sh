#!/bin/sh
# Ready for an RL engine: policy-openai against a scripted OpenAI-compatible
# server on loopback (a URL and headers per trajectory, no sampling
# parameters, token ids and log-probs recorded with each assistant
# message), and ca-rollout --on-reward handing each trajectory's reward
# back (an evaluator fault as a fault). The server is a stand-in that
# plays a fixed episode: what a real vLLM, verl or Agent Lightning proxy
# does is not tested here.
. "$(dirname "$0")/test-lib.sh"
D=$TESTS_DIR/data/agent

if ! command -v python3 >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
	echo "# skipped: python3 and curl are needed for the scripted server"
	test_done
	exit 0
fi

# The server: 127.0.0.1 only, a free port written to a file, every
# request logged (path, headers, body) as one JSON line, and an episode
# played by the number of assistant turns in the request: write
# model_new.py, then done. Each answer carries OpenAI log-probs and
# vLLM-style token ids, different per turn.
cat >"$TRASH_BASE/server.py" <<'PY'
import http.server, json, sys
log = open(sys.argv[1], "a")
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        log.write(json.dumps({"path": self.path, "headers": dict(self.headers), "body": body}) + "\n")
        log.flush()
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn == 0:
            msg = {"role": "assistant", "content": "writing", "tool_calls": [{"id": "c1", "type": "function",
                   "function": {"name": "write", "arguments": json.dumps({"path": "model_new.py", "content": "FAST\n"})}}]}
        else:
            msg = {"role": "assistant", "content": "done"}
        ids = [100 + turn, 200 + turn]
        resp = {"id": "x", "object": "chat.completion", "prompt_token_ids": [1, 2, 3 + turn],
                "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if turn == 0 else "stop",
                             "token_ids": ids,
                             "logprobs": {"content": [{"token": "a%d" % turn, "logprob": -0.5, "bytes": None, "top_logprobs": []},
                                                      {"token": "b%d" % turn, "logprob": -0.25 - turn, "bytes": None, "top_logprobs": []}]}}],
                "usage": {"total_tokens": 10}}
        out = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[2], "w").write(str(s.server_address[1]))
s.timeout = 1
import time
end = time.time() + 120
while time.time() < end:
    s.handle_request()
PY
timeout 150 python3 "$TRASH_BASE/server.py" "$TRASH_BASE/requests.ndjson" "$TRASH_BASE/port" &
server=$!
trap 'kill "$server" 2>/dev/null; rm -rf "$TRASH_BASE"' EXIT
i=0
while [ ! -s "$TRASH_BASE/port" ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
PORT=$(cat "$TRASH_BASE/port")
BASE="http://127.0.0.1:$PORT"
REQS=$TRASH_BASE/requests.ndjson
export BASE REQS D
tasks() { printf '{"id":"kb/L1/%d","code":"class Model: pass\\n"}\n' "$@"; }

expect_success 'the scripted server is up' '[ -n "$PORT" ]'

expect_success 'URL template and headers are expanded per trajectory; no sampling parameters with -S' '
	: >"$REQS" &&
	tasks 1 2 | CA_OPENAI_BASE_URL="$BASE/rollout/{id}/v1" CA_OPENAI_HEADERS="X-Task: fixed" \
		ca-agent --unconfined -j 2 --policy "policy-openai -S -t 0.7 -p 0.9 -H \"X-Rollout-Id: {id}\" m" >out &&
	jq -e -s "length == 2 and all(.trajectory.stop == \"done\")" out &&
	[ $(wc -l <"$REQS") -eq 4 ] &&
	jq -e -s "map(.path) | sort == [\"/rollout/kb%2FL1%2F1%231/v1/chat/completions\", \"/rollout/kb%2FL1%2F1%231/v1/chat/completions\",
		\"/rollout/kb%2FL1%2F2%232/v1/chat/completions\", \"/rollout/kb%2FL1%2F2%232/v1/chat/completions\"]" "$REQS" &&
	jq -e -s "all(.headers[\"X-Rollout-Id\"] as \$h | .path | test(\$h | @uri)) and
		(map(.headers[\"X-Rollout-Id\"]) | unique == [\"kb/L1/1#1\", \"kb/L1/2#2\"]) and
		all(.headers[\"X-Task\"] == \"fixed\")" "$REQS" &&
	jq -e -s "all(.body | has(\"temperature\") or has(\"top_p\") | not)" "$REQS"'

expect_success 'without -S the sampling parameters are sent; -L asks for log-probs and token ids' '
	: >"$REQS" &&
	tasks 3 | ca-agent --unconfined --policy "policy-openai -L -t 0.7 -p 0.9 $BASE/v1 m" >out &&
	jq -e -s "all(.body.temperature == 0.7 and .body.top_p == 0.9 and .body.logprobs == true and .body.return_token_ids == true)" "$REQS"'

expect_success 'token ids and log-probs are recorded with each assistant message, and not sent back' '
	: >"$REQS" &&
	tasks 4 | ca-agent --unconfined --policy "policy-openai $BASE/v1 m" >out &&
	jq -e "[.trajectory.messages[] | select(.role == \"assistant\") | .completion] == [
		{logprobs: [-0.5, -0.25], tokens: [\"a0\", \"b0\"], token_ids: [100, 200], prompt_token_ids: [1, 2, 3], finish_reason: \"tool_calls\"},
		{logprobs: [-0.5, -1.25], tokens: [\"a1\", \"b1\"], token_ids: [101, 201], prompt_token_ids: [1, 2, 4], finish_reason: \"stop\"}]" out &&
	jq -e -s "all(.body.messages[] | has(\"completion\") | not)" "$REQS"'

expect_success 'a policy that writes a bare message cannot forge token ids' '
	tasks 5 | ca-agent --unconfined --policy "echo \"{\\\"content\\\": \\\"x\\\", \\\"completion\\\": {\\\"token_ids\\\": [1]}}\"" >out &&
	jq -e ".trajectory.messages[-1] | has(\"completion\") | not" out'

expect_fail '{id} without CA_TRAJECTORY_ID is refused' '
	echo "{\"messages\": [], \"tools\": []}" | policy-openai "$BASE/rollout/{id}/v1" m'

# --on-reward: once per trajectory after scoring, with the record on stdin;
# kb/L1/2 is an evaluator fault (reward null), handed back as a fault.
cat >"$TRASH_BASE/score.jq" <<'JQ'
if .snapshot.trajectory | startswith("kb/L1/2#") then .verify = {ok: null} | .reward = {value: null, evaluator_fault: true}
else .verify = {ok: true} | .reward = {value: 1, speedup_compile: 0.5} end
JQ
cat >"$TRASH_BASE/hook" <<'HOOK'
#!/bin/sh
# What an engine's hook does: a fault is a failed rollout, never -1.
jq -c --arg id "$CA_TRAJECTORY_ID" --arg r "$CA_REWARD" --arg s "$CA_REWARD_STATUS" \
	'{id: $id, reward: $r, status: $s, record_reward: .reward, verify: .verify}' >>"$HANDED"
HOOK
chmod +x "$TRASH_BASE/hook"
HOOK=$TRASH_BASE/hook SCORE="jq -c -f $TRASH_BASE/score.jq"
export HOOK SCORE

expect_success 'ca-rollout --on-reward hands each scored trajectory back once; a fault as a fault' '
	HANDED=$PWD/handed && export HANDED &&
	tasks 1 2 3 >t &&
	ca-rollout --agent-opts "--unconfined --verify-cmd \"$D/fake-eval verify\"" \
		--policy "policy-openai $BASE/v1 m" --score "$SCORE" --on-reward "$HOOK" -o run t 2>err &&
	[ $(wc -l <handed) -eq 3 ] &&
	jq -e -s "sort_by(.id) == [
		{id: \"kb/L1/1#1\", reward: \"1\", status: \"scored\", record_reward: {value: 1, speedup_compile: 0.5}, verify: {ok: true}},
		{id: \"kb/L1/2#2\", reward: \"\", status: \"fault\", record_reward: {value: null, evaluator_fault: true}, verify: {ok: null}},
		{id: \"kb/L1/3#3\", reward: \"1\", status: \"scored\", record_reward: {value: 1, speedup_compile: 0.5}, verify: {ok: true}}]" handed &&
	jq -e -s "map(.status) | sort == [\"fault\", \"scored\", \"scored\"]" run/handed.ndjson &&
	ca-rollout --agent-opts "--unconfined" --policy "policy-openai $BASE/v1 m" --score "$SCORE" --on-reward "$HOOK" -o run t 2>err &&
	[ $(wc -l <handed) -eq 3 ] && grep -q "0 trajectories to hand back" err'

expect_success 'a failing hook makes ca-rollout fail (status 4) and is retried on the next run' '
	HANDED=$PWD/handed && export HANDED &&
	tasks 6 >t &&
	st=0; ca-rollout --agent-opts "--unconfined --verify-cmd \"$D/fake-eval verify\"" \
		--policy "policy-openai $BASE/v1 m" --score "$SCORE" --on-reward "false" -o run t 2>err || st=$? &&
	[ "$st" -eq 4 ] && grep -q "on-reward exited with status 1" err && [ ! -s run/handed.ndjson ] &&
	ca-rollout --policy "policy-openai $BASE/v1 m" --score "$SCORE" --on-reward "$HOOK" -o run t 2>err &&
	jq -e -s "length == 1 and .[0].id == \"kb/L1/6#1\" and .[0].status == \"scored\"" handed'

expect_success 'without scoring, nothing is handed back (a reward is not final yet)' '
	HANDED=$PWD/handed && export HANDED &&
	tasks 7 >t &&
	ca-rollout --agent-opts "--unconfined" --policy "policy-openai $BASE/v1 m" --no-score --on-reward "$HOOK" -o run t 2>err &&
	[ ! -e handed ] && grep -q "rewards not handed back" err'

test_done
