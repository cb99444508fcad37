#!/bin/sh
# The pipelines on a GPU: ca-eval runs two KernelBench problems (L1/14,
# L2/18) through the agent loop with a replayed policy that writes a real
# kernel, scores every snapshot with ca-verify | ca-profile | ca-reward and
# prints Table 1; a rerun resumes with nothing to do; the same through the
# Slurm scripts with the fake sbatch; ca-synth with the GPU workload check.
. "$(dirname "$0")/../test-lib.sh"
D=$TESTS_DIR/data/agent
TASKS=$D/kernelbench-tasks.ndjson
PATH=$TESTS_DIR/fake-slurm:$PATH
FAKE_SLURM_STATE=$TRASH_BASE/slurm-state
export D TASKS PATH FAKE_SLURM_STATE

if ! has_gpu; then
	skip 'pipelines on the GPU (ca-eval, ca-rollout, ca-synth, slurm)' 'no GPU here'
	test_done
	exit 0
fi
if ! has_torch; then
	skip 'pipelines on the GPU (ca-eval, ca-rollout, ca-synth, slurm)' 'no torch for the Python runner'
	test_done
	exit 0
fi

# The recorded turns of tests/gpu/t0404: write the solution's files, build,
# verify, profile, done; one trajectory record per task for policy-replay.
turns() {
	dir=$1
	call() { jq -cn --arg n "$1" --arg a "$2" --arg c "$3" \
		'{role: "assistant", content: $c, tool_calls: [{id: "call_\($n)", type: "function", function: {name: $n, arguments: $a}}]}'; }
	call read '{"path": "model.py"}' "Reading the reference."
	for f in $(cd "$dir" && find kernels -type f | sort) model_new.py; do
		args=$(jq -cn --arg p "$f" --rawfile c "$dir/$f" '{path: $p, content: $c}')
		call write "$args" "Writing $f."
	done
	call bash '{"command": "ca-build"}' "Building."
	call bash '{"command": "ca-verify"}' "Checking correctness."
	call bash '{"command": "ca-profile"}' "Timing against eager and torch.compile."
	jq -cn '{role: "assistant", content: "Done."}'
}
REC=$TRASH_BASE/recording.ndjson
for t in l1-14:kernelbench/L1/14 l2-18:kernelbench/L2/18; do
	turns "$D/kb-${t%%:*}" | jq -cs --arg id "${t#*:}" '{id: $id, trajectory: {messages: .}}'
done >"$REC"
export REC

expect_success 'ca-eval: both problems solved through the loop, reward 3, Table 1 per level' '
	ca-eval --tasks "$TASKS" --policy "policy-replay $REC" -o "$TRASH_BASE/eval" >table 2>err ||
		{ cat err; exit 1; }
	cat table &&
	jq -c "{id, reward, best}" "$TRASH_BASE/eval/results.ndjson" &&
	jq -e -s "length == 2 and all(.[]; .reward.value == 3 and .verify.ok == true)" "$TRASH_BASE/eval/results.ndjson" &&
	grep -q "^all  *2  *0  *1.000 " table && { ! { echo "set terminal png" | gnuplot; } >/dev/null 2>&1 || [ -s "$TRASH_BASE/eval/table1.png" ]; }'

expect_success 'ca-eval again: resumes with nothing to roll out or score, same table' '
	cp "$TRASH_BASE/eval/table.txt" before &&
	ca-eval --tasks "$TASKS" --policy "policy-replay $REC" -o "$TRASH_BASE/eval" >table 2>err &&
	grep -q "0 of 2 tasks to roll out" err && grep -q "0 of [0-9]* candidates to score" err &&
	cmp table before'

expect_success 'the same on Slurm (fake sbatch): two shards, merged, tabulated' '
	"$ROOT/scripts/slurm/submit" -K 2 -o slurm eval "$TASKS" -- --policy "policy-replay $REC" 2>err &&
	cat slurm-*.out | tail -n 20 &&
	jq -e -s "length == 2 and all(.[]; .reward.value == 3)" slurm/results.ndjson && grep -q "^all  *2 " slurm/table.txt'

expect_success 'ca-synth on the GPU: the workload check runs (eager and compile times)' '
	ca-synth -n 4 --no-crawl --seed 3 -j 2 -o synth 2>err || { cat err; exit 1; }
	cat synth/stats.txt &&
	[ $(wc -l <synth/filtered.ndjson) -eq 4 ] &&
	jq -e -s "any(.[]; .filter.checks.workload != null and .filter.device != \"cpu\")" synth/filtered.ndjson'
test_done
