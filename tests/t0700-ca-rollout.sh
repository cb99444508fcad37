#!/bin/sh
# ca-rollout: tasks through ca-agent with a policy, snapshots scored, the
# best per trajectory; resume after an interruption; the no-GPU line.
# The agent runs unconfined with fake-eval, the scoring is scores.jq: the
# pipeline's plumbing is what is tested here, not the evaluation.
. "$(dirname "$0")/test-lib.sh"
D=$TESTS_DIR/data/agent

# A policy that writes model_new.py (FAST: fake-eval calls it correct), runs ca-verify, then stops.
cat >"$TRASH_BASE/policy" <<'POLICY'
#!/bin/sh
case $CA_TURN in
1) jq -cn '{role: "assistant", content: "w", tool_calls: [{id: "c1", type: "function",
	function: {name: "write", arguments: ({path: "model_new.py", content: "FAST\n"} | tojson)}}]}' ;;
2) jq -cn '{role: "assistant", content: "v", tool_calls: [{id: "c2", type: "function",
	function: {name: "bash", arguments: ({command: "ca-verify"} | tojson)}}]}' ;;
*) echo '{"role": "assistant", "content": "done"}' ;;
esac
POLICY
chmod +x "$TRASH_BASE/policy"
POLICY=$TRASH_BASE/policy
export POLICY D
AGENT="--unconfined --verify-cmd '$D/fake-eval verify'"
DASH=$(command -v dash || echo sh)
export AGENT DASH
tasks() { i=1; while [ "$i" -le "$1" ]; do printf '{"id":"t%d","level":%d,"code":"class Model: pass\\n"}\n' "$i" $((i % 3 + 1)); i=$((i + 1)); done; }

expect_success 'usage is printed by --help' 'ca-rollout --help | grep -q "^usage: ca-rollout"'
expect_status 2 'a policy is required' 'ca-rollout -o run </dev/null'
expect_status 2 'an unknown option is a usage error' 'ca-rollout --bogus --policy x -o run </dev/null'
expect_status 3 'a task without an id is bad input' 'echo "{\"code\": \"x\"}" | ca-rollout --policy "$POLICY" -o run'
expect_status 3 'duplicate ids are bad input' 'tasks 2 >t && tasks 1 >>t && ca-rollout --policy "$POLICY" -o run t'

expect_success 'every task gets a trajectory and a best record; counts match' '
	tasks 4 >t &&
	${DASH:-sh} "$ROOT/scripts/ca-rollout" --agent-opts "$AGENT" --policy "$POLICY" --score "jq -c -f $D/scores.jq" -o run t 2>err &&
	[ $(wc -l <run/trajectories.ndjson) -eq 4 ] && [ $(wc -l <run/best.ndjson) -eq 4 ] &&
	[ $(wc -l <run/scored.ndjson) -eq $(wc -l <run/candidates.ndjson) ] &&
	jq -e -s "map(.best.snapshots == 1 and .verify.ok == true and .reward.value == 1) | all" run/best.ndjson &&
	jq -r .id run/best.ndjson | tr "\n" " " | grep -q "^t1 t2 t3 t4 $" &&
	grep -q "4 of 4 tasks to roll out" err'

expect_success 'a rerun skips what is done; new tasks and a partial line from a kill are handled' '
	tasks 3 >t &&
	ca-rollout --agent-opts "$AGENT" --policy "$POLICY" --score "jq -c -f $D/scores.jq" -o run t 2>/dev/null &&
	cp run/trajectories.ndjson before &&
	printf "{\"id\":\"t9\",\"trajec" >>run/trajectories.ndjson &&
	tasks 5 >t &&
	ca-rollout --agent-opts "$AGENT" --policy "$POLICY" --score "jq -c -f $D/scores.jq" -o run t 2>err &&
	grep -q "2 of 5 tasks to roll out" err && grep -q "2 of 5 candidates to score" err &&
	head -n 3 run/trajectories.ndjson | cmp - before &&
	[ $(wc -l <run/best.ndjson) -eq 5 ] &&
	ca-rollout --agent-opts "$AGENT" --policy "$POLICY" --score "jq -c -f $D/scores.jq" -o run t 2>err &&
	grep -q "0 of 5 tasks to roll out" err && grep -q "0 of 5 candidates to score" err'

if command -v setsid >/dev/null 2>&1; then
	expect_success 'killed mid-run (the whole process group), a rerun finishes without losing or repeating a task' '
		tasks 6 >t &&
		printf "#!/bin/sh\nsleep 1\nexec \"%s\"\n" "$POLICY" >slow && chmod +x slow &&
		setsid sh -c "exec ca-rollout --agent-opts \"$AGENT\" --policy ./slow --score \"jq -c -f $D/scores.jq\" -o run t" 2>/dev/null &
		# Killed once the first trajectory is out (a fixed sleep was too short on a busy machine).
		pid=$! && i=0 &&
		while [ "$(cat run/trajectories.ndjson 2>/dev/null | wc -l)" -lt 1 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
		kill -TERM -$pid; wait $pid
		# Every process of the group gone (an agent may finish its line on TERM) before counting.
		i=0 && while kill -0 -$pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
		n=$(wc -l <run/trajectories.ndjson) && echo "# $n of 6 trajectories out when killed" &&
		[ "$n" -ge 1 ] && [ "$n" -lt 6 ] &&
		ca-rollout --agent-opts "$AGENT" --policy "$POLICY" --score "jq -c -f $D/scores.jq" -o run t 2>err &&
		grep -q "$((6 - n)) of 6 tasks to roll out" err &&
		[ "$(jq -r .id run/trajectories.ndjson | sort | uniq -c | awk "\$1 != 1" | wc -l)" -eq 0 ] &&
		[ $(wc -l <run/best.ndjson) -eq 6 ] && [ $(wc -l <run/scored.ndjson) -eq 6 ]'
else
	skip 'killed mid-run' 'no setsid here'
fi

expect_success '--retry: trajectories that stopped with a policy error are rolled out again, with their scores' '
	tasks 3 >t &&
	printf "#!/bin/sh\n[ \"\$CA_TASK_ID\" = t2 ] && [ ! -f \"%s/ok\" ] && exit 7\nexec \"%s\"\n" "$PWD" "$POLICY" >flaky && chmod +x flaky &&
	ca-rollout --agent-opts "$AGENT" --policy ./flaky --score "jq -c -f $D/scores.jq" -o run t 2>/dev/null; s=$?
	[ $s -eq 4 ] && jq -e -s "map(select(.id == \"t2\"))[0].trajectory.stop == \"policy_error\"" run/best.ndjson >/dev/null &&
	touch ok &&
	ca-rollout --retry policy_error,crashed --agent-opts "$AGENT" --policy ./flaky --score "jq -c -f $D/scores.jq" -o run t 2>err &&
	grep -q "1 trajectories stopped with policy_error,crashed" err && grep -q "1 of 3 tasks to roll out" err &&
	jq -e -s "length == 3 and all(.[]; .trajectory.stop == \"done\" and .reward.value == 1)" run/best.ndjson &&
	[ $(wc -l <run/scored.ndjson) -eq 3 ]'

expect_success 'without a GPU the scoring is skipped with one line and the trajectories are kept' '
	mkdir nogpu && printf "#!/bin/sh\nexit 9\n" >nogpu/nvidia-smi && chmod +x nogpu/nvidia-smi &&
	tasks 2 >t &&
	PATH=$PWD/nogpu:$PATH ca-rollout --agent-opts "$AGENT" --policy "$POLICY" -o run t 2>err &&
	grep -q "scoring (ca-verify, ca-profile) needs a GPU" err &&
	[ $(wc -l <run/best.ndjson) -eq 2 ] && [ ! -s run/scored.ndjson ] &&
	jq -e -s "map(.best.snapshots == 0) | all" run/best.ndjson'

expect_success 'a scoring command that loses records fails the count check' '
	tasks 3 >t &&
	ca-rollout --agent-opts "$AGENT" --policy "$POLICY" --score "head -n 1" -o run t 2>err; s=$?
	[ $s -eq 4 ] && grep -q "count check: 2 of 3 candidates came back unscored" err'

expect_success '--no-score keeps the rollout only' '
	tasks 2 >t && ca-rollout --no-score --agent-opts "$AGENT" --policy "$POLICY" -o run t 2>err &&
	grep -q "scoring skipped" err && [ $(wc -l <run/best.ndjson) -eq 2 ]'

expect_success "the script is dash-clean" "$(command -v dash || echo sh) -n \"\$ROOT/scripts/ca-rollout\""
test_done
