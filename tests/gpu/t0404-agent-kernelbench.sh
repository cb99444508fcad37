#!/bin/sh
# The whole agent loop on a GPU: a replay policy solves KernelBench L1/14
# (upper triangular matmul) and L2/18 (linear, sum, max, mean, logsumexp)
# through ca-agent -- write the kernel and model_new.py, ca-build,
# ca-verify, ca-profile, done -- and the trajectory's best snapshot scores
# reward 3 through ca-verify | ca-profile | ca-reward.
. "$(dirname "$0")/../test-lib.sh"

D=$TESTS_DIR/data/agent
TASKS=$D/kernelbench-tasks.ndjson

# turns DIR [DIR...]: the recorded assistant turns of an agent that reads
# the task, writes the files of DIR, builds, verifies and profiles, then
# does the same for each further DIR (a later version: a file written
# before is read before it is replaced), and says it is done.
turns() {
	call() { jq -cn --arg n "$1" --arg a "$2" --arg c "$3" \
		'{role: "assistant", content: $c, tool_calls: [{id: "call_\($n)", type: "function", function: {name: $n, arguments: $a}}]}'; }
	call read '{"path": "model.py"}' "Reading the reference."
	written=" "
	for dir; do
		for f in $(cd "$dir" && find kernels -type f | sort) model_new.py; do
			[ -f "$dir/$f" ] || continue
			case $written in
			*" $f "*) call read "$(jq -cn --arg p "$f" '{path: $p}')" "Reading $f before changing it." ;;
			esac
			args=$(jq -cn --arg p "$f" --rawfile c "$dir/$f" '{path: $p, content: $c}')
			call write "$args" "Writing $f."
			written="$written$f "
		done
		call bash '{"command": "ca-build"}' "Building."
		call bash '{"command": "ca-verify"}' "Checking correctness."
		call bash '{"command": "ca-profile"}' "Timing against eager and torch.compile."
	done
	jq -cn '{role: "assistant", content: "Done: the kernel is correct and faster than torch.compile."}'
}

if ! has_gpu; then
	skip 'replayed agent solves KernelBench L1/14 and L2/18 with reward 3' 'no GPU here'
	test_done
	exit 0
fi
if ! has_torch; then
	skip 'replayed agent solves KernelBench L1/14 and L2/18 with reward 3' 'no torch for the Python runner'
	test_done
	exit 0
fi

# L1/14 is solved twice: a hand-written tiled kernel, then cuBLAS on the
# blocks that can be nonzero; the best of the two counts.
for t in "l1-14:kernelbench/L1/14:kb-l1-14 kb-l1-14-v2" "l2-18:kernelbench/L2/18:kb-l2-18"; do
	name=${t%%:*} rest=${t#*:}
	id=${rest%%:*} dirs=${rest#*:}
	expect_success "$id: the replayed agent builds, verifies and profiles through the loop" '
		turns $(for d in '"$dirs"'; do echo "$D/$d"; done) >turns &&
		jq -c "select(.id == \"'"$id"'\")" "$TASKS" >task &&
		ca-agent --policy "policy-replay turns" task >traj &&
		jq -e ".trajectory.stop == \"done\" and .trajectory.invalid_tool_calls == 0
			and ([.trajectory.snapshots[].command] | length) % 3 == 0
			and ([.trajectory.snapshots[] | select(.command == \"ca-build\") | .result.ok] | all)
			and ([.trajectory.snapshots[] | select(.command == \"ca-verify\") | .result.verify.ok] | any)" traj ||
		{ jq -r ".trajectory.messages[] | select(.role == \"tool\") | .content" traj | tail -n 60; exit 1; }
		cp traj "$TRASH_BASE/traj-'"$name"'"
	'
	expect_success "$id: the best snapshot scores reward 3 through ca-verify | ca-profile | ca-reward" '
		traj=$TRASH_BASE/traj-'"$name"' &&
		ca-best --explode "$traj" | ca-verify | ca-profile | ca-reward | ca-best --trajectories "$traj" >best &&
		jq -c "{reward, best, verify: {ok: .verify.ok, max_abs_err: .verify.max_abs_err},
			profile: {eager_us: .profile.eager_us, compile_us: .profile.compile_us, candidate_us: .profile.candidate_us}}" best &&
		jq -e ".reward.value == 3 and .best.correct >= 1" best
	'
done

test_done
