#!/bin/sh
# ca as an Agent Lightning agent, against a scripted engine on loopback:
# policy-openai under AGL_OPENAI_BASE_URL and AGL_KEY (the URL as given,
# the bearer key, no sampling parameters, 429 waited out), finish_reason
# "length" ending the episode, and scripts/ca-agl-reward posting ca's
# reward as a reward event (an evaluator fault as a failure, no event).
# The engine here is a stand-in that follows the contract as read from
# Agent Lightning's runner and example agents; the real agl-server is not
# run (see ca-rollout(1), TRAINING WITH AN EXTERNAL RL ENGINE).
. "$(dirname "$0")/test-lib.sh"
D=$TESTS_DIR/data/agent

if ! command -v python3 >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
	echo "# skipped: python3 and curl are needed for the scripted engine"
	test_done
	exit 0
fi

# The engine: 127.0.0.1 only, a free port written to a file, at most 200
# requests in 120 s, each logged (path, headers, body, the status given)
# as one JSON line. Without "Bearer sekrit" it answers 401. Its OpenAI
# proxy is /proxy/rollout/R/attempt/A/mode/train/openai/v1 and plays an
# episode by the number of assistant turns (write model_new.py, then
# done); rollout "busy" answers 429 (Retry-After: 1) to its first four
# requests, rollout "cut" stops turn 0 at the token limit. Its event
# endpoint is /api/rollouts/R/attempt/A/events.
cat >"$TRASH_BASE/engine.py" <<'PY'
import http.server, json, sys, time
log = open(sys.argv[1], "a")
busy = {"n": 0}
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def answer(self, code, obj, extra=()):
        out = json.dumps(obj).encode()
        self.send_response(code)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        return code
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"null")
        code = self.route(body)
        log.write(json.dumps({"path": self.path, "headers": dict(self.headers), "body": body, "code": code}) + "\n")
        log.flush()
    def route(self, body):
        if self.headers.get("Authorization") != "Bearer sekrit":
            return self.answer(401, {"detail": "bad key"})
        parts = self.path.split("/")
        if self.path.startswith("/api/rollouts/") and self.path.endswith("/events"):
            if not isinstance(body, dict) or body.get("event_type") != "reward":
                return self.answer(422, {"detail": "not a reward event"})
            return self.answer(200, {"ok": True})
        if not (self.path.startswith("/proxy/rollout/") and self.path.endswith("/openai/v1/chat/completions")):
            return self.answer(404, {"detail": "no such path"})
        rollout = parts[3]
        if rollout == "busy" and busy["n"] < 4:
            busy["n"] += 1
            return self.answer(429, {"detail": "paused"}, [("Retry-After", "1")])
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn == 0:
            msg = {"role": "assistant", "content": "writing", "tool_calls": [{"id": "c1", "type": "function",
                   "function": {"name": "write", "arguments": json.dumps({"path": "model_new.py", "content": "FAST\n"})}}]}
            finish = "tool_calls"
            if rollout == "cut":
                msg["tool_calls"][0]["function"]["arguments"] = '{"path": "model_new.py", "cont'
                finish = "length"
        else:
            msg, finish = {"role": "assistant", "content": "done"}, "stop"
        return self.answer(200, {"id": "x", "object": "chat.completion", "prompt_token_ids": [1, 2],
                                 "choices": [{"index": 0, "message": msg, "finish_reason": finish,
                                              "token_ids": [100 + turn]}],
                                 "usage": {"total_tokens": 10}})
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(sys.argv[2], "w").write(str(s.server_address[1]))
s.timeout = 1
end, n = time.time() + 120, 0
while time.time() < end and n < 200:
    s.handle_request()
    n += 1
PY
timeout 150 python3 "$TRASH_BASE/engine.py" "$TRASH_BASE/requests.ndjson" "$TRASH_BASE/port" &
engine=$!
trap 'kill "$engine" 2>/dev/null; rm -rf "$TRASH_BASE"' EXIT
i=0
while [ ! -s "$TRASH_BASE/port" ] && [ "$i" -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
PORT=$(cat "$TRASH_BASE/port")
REQS=$TRASH_BASE/requests.ndjson
# What the engine's runner gives one rollout.
agl() {
	AGL_OPENAI_BASE_URL="http://127.0.0.1:$PORT/proxy/rollout/$1/attempt/a0/mode/train/openai/v1"
	AGL_EVENT_URL="http://127.0.0.1:$PORT/api/rollouts/$1/attempt/a0/events"
	AGL_KEY=sekrit
	export AGL_OPENAI_BASE_URL AGL_EVENT_URL AGL_KEY
}
tasks() { printf '{"id":"kb/L1/%d","code":"class Model: pass\\n"}\n' "$@"; }
events() { jq -c 'select(.path | endswith("/events"))' "$REQS"; }
export PORT REQS D

expect_success 'the scripted engine is up' '[ -n "$PORT" ]'

expect_success 'AGL_OPENAI_BASE_URL is the URL as given, AGL_KEY the bearer key, and no sampling parameters go' '
	: >"$REQS" && agl r1 &&
	tasks 1 | ca-agent --unconfined --policy "policy-openai -t 0.7 -p 0.9 auto" >out &&
	jq -e ".trajectory.stop == \"done\"" out &&
	jq -e -s "length == 2 and all(.code == 200 and .path == \"/proxy/rollout/r1/attempt/a0/mode/train/openai/v1/chat/completions\"
		and .headers.Authorization == \"Bearer sekrit\")" "$REQS" &&
	jq -e -s "all(.body | (has(\"temperature\") or has(\"top_p\")) | not)" "$REQS"'

expect_success 'HTTP 429 is waited out (Retry-After), past curl'"'"'s own retries' '
	: >"$REQS" && agl busy &&
	tasks 2 | ca-agent --unconfined --policy "policy-openai auto" >out &&
	jq -e ".trajectory.stop == \"done\"" out &&
	jq -e -s "map(.code) == [429, 429, 429, 429, 200, 200]" "$REQS"'

expect_success 'finish_reason "length" ends the episode: the message kept as returned, its cut tool call not run' '
	: >"$REQS" && agl cut &&
	tasks 3 | ca-agent --unconfined --policy "policy-openai auto" >out &&
	jq -e ".trajectory.stop == \"length\" and .trajectory.turns == 1" out &&
	jq -e ".trajectory.messages[-1] | .role == \"assistant\" and
		.tool_calls[0].function.arguments == \"{\\\"path\\\": \\\"model_new.py\\\", \\\"cont\"" out &&
	jq -e "[.trajectory.messages[] | select(.role == \"tool\")] | length == 0" out &&
	[ $(wc -l <"$REQS") -eq 1 ]'

# ca-rollout with a scoring stand-in (no GPU): kb/L1/2 is an evaluator fault.
cat >"$TRASH_BASE/score.jq" <<'JQ'
if .snapshot.trajectory | startswith("kb/L1/2#") then .verify = {ok: null} | .reward = {value: null, evaluator_fault: true}
else .verify = {ok: true} | .reward = {value: 2, speedup_compile: 1.2} end
JQ
SCORE="jq -c -f $TRASH_BASE/score.jq"
export SCORE

expect_success 'ca-rollout --on-reward ca-agl-reward posts ca'"'"'s reward as a reward event, with the key' '
	: >"$REQS" && agl r4 &&
	tasks 4 >t &&
	ca-rollout --agent-opts "--unconfined --verify-cmd \"$D/fake-eval verify\"" \
		--policy "policy-openai auto" --score "$SCORE" --on-reward ca-agl-reward -o run t 2>err &&
	events >ev && [ $(wc -l <ev) -eq 1 ] &&
	jq -e ".path == \"/api/rollouts/r4/attempt/a0/events\" and .code == 200 and
		.headers.Authorization == \"Bearer sekrit\" and
		.body.event_type == \"reward\" and .body.data.value == 2 and
		.body.data.metadata.trajectory == \"kb/L1/4#1\" and .body.data.metadata.correct == true" ev'

expect_success 'a completed episode with reward -1 (scored or unscored) is posted and exits 0' '
	: >"$REQS" && agl r5 &&
	echo "{\"reward\": {\"value\": -1}, \"verify\": {\"ok\": false}}" |
		CA_TRAJECTORY_ID=kb/L1/5#1 CA_REWARD_STATUS=scored CA_REWARD=-1 ca-agl-reward &&
	echo "{\"reward\": {\"value\": null}}" |
		CA_TRAJECTORY_ID=kb/L1/5#2 CA_REWARD_STATUS=unscored CA_REWARD= ca-agl-reward &&
	events | jq -e -s "map(.body.data.value) == [-1, -1] and all(.code == 200)"'

expect_success 'an evaluator fault posts no event and exits 4; ca-rollout fails with it' '
	: >"$REQS" && agl r6 &&
	st=0 && { echo "{\"reward\": {\"value\": null, \"evaluator_fault\": true}}" |
		CA_TRAJECTORY_ID=kb/L1/2#1 CA_REWARD_STATUS=fault CA_REWARD= ca-agl-reward 2>err || st=$?; } &&
	[ "$st" -eq 4 ] && grep -q "evaluator fault" err && [ ! -s "$REQS" ] &&
	tasks 2 >t &&
	st=0 && { ca-rollout --agent-opts "--unconfined --verify-cmd \"$D/fake-eval verify\"" \
		--policy "policy-openai auto" --score "$SCORE" --on-reward ca-agl-reward -o run t 2>err || st=$?; } &&
	[ "$st" -eq 4 ] && grep -q "kb/L1/2#1: evaluator fault" err && [ -z "$(events)" ] && [ ! -s run/handed.ndjson ]'

expect_success 'a wrong key: the engine refuses the event and the hook exits 4' '
	: >"$REQS" && agl r7 && AGL_KEY=wrong &&
	st=0 && { echo "{\"reward\": {\"value\": 1}}" |
		CA_TRAJECTORY_ID=kb/L1/7#1 CA_REWARD_STATUS=scored CA_REWARD=1 ca-agl-reward 2>err || st=$?; } &&
	[ "$st" -eq 4 ] && events | jq -e -s "length == 1 and .[0].code == 401"'

test_done
