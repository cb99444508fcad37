#!/bin/sh
# The whole agent loop on a GPU: a replay policy solves KernelBench L1/14
# (upper triangular matmul) and L2/18 (linear, sum, max, mean, logsumexp)
# through ca-agent -- write the kernel and model_new.py, ca-build,
# ca-verify, ca-profile, done -- and each trajectory's best snapshot scores
# reward 3 through ca-profile --verify | ca-reward.
#
# Both tasks run in one ca-agent -j 2 and all their snapshots are scored in
# one ca-profile --verify, as ca-rollout does, so the Python workers start
# once and not once per candidate and command. With CA_GPU_LOG set, the trajectories
# and scored records are kept there (where the time went: t_s of every
# message, seconds of every trusted command).
. "$(dirname "$0")/../test-lib.sh"

# The problems and their solutions are the ones make demo ships (L1/1 left out).
KB=$ROOT/examples/kernelbench
SOL=$KB/solutions
TASKS=$TRASH_BASE/tasks.ndjson
jq -c 'select(.id == "kernelbench/L1/14" or .id == "kernelbench/L2/18")' "$KB/tasks.ndjson" >"$TASKS"
LOG=${CA_GPU_LOG:-$TRASH_BASE}
mkdir -p "$LOG"
export TASKS LOG

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

# One evaluation server (ca-profile --serve) keeps the workers warm for
# every trusted command of the test, as ca-rollout does (CA_TEST_SERVE=0:
# each command starts its own). On the H200 without it, each in-loop
# ca-verify or ca-profile paid 11-13 s of worker start-up and the test ran
# past 105 s; through a server the same calls took 1-2 s.
if [ "${CA_TEST_SERVE:-1}" = 1 ] && [ -z "${CA_EVAL_SERVER:-}" ]; then
	mkdir -m 700 "$TRASH_BASE/srv"
	CA_EVAL_SERVE_IDLE=300 ca-profile --serve "$TRASH_BASE/srv/eval.sock" 2>"$LOG/t0404-serve.log" &
	server=$!
	trap 'kill $server 2>/dev/null; rm -rf "$TRASH_BASE"' EXIT
	i=0
	while [ ! -S "$TRASH_BASE/srv/eval.sock" ] && [ $i -lt 60 ] && kill -0 $server 2>/dev/null; do sleep 1; i=$((i + 1)); done
	[ ! -S "$TRASH_BASE/srv/eval.sock" ] || { CA_EVAL_SERVER=$TRASH_BASE/srv/eval.sock; export CA_EVAL_SERVER; }
	echo "# evaluation server: ${CA_EVAL_SERVER:-did not start} ($i s)"
fi

# L1/14 is solved twice: a hand-written tiled kernel (build, verify,
# profile), then cuBLAS on the blocks that can be nonzero (build, then
# verify and profile in one ca-profile --verify); the best of the two counts.
{
	policy-replay --record --id kernelbench/L1/14 "$SOL/L1-14-v1" --run "ca-build,ca-profile --verify" "$SOL/L1-14-v2"
	policy-replay --record --id kernelbench/L2/18 "$SOL/L2-18"
} >"$TRASH_BASE/recording.ndjson"

expect_success 'L1/14 and L2/18: the replayed agent builds, verifies and profiles through the loop (ca-agent -j 2)' '
	ca-agent -j 2 --policy "policy-replay $TRASH_BASE/recording.ndjson" "$TASKS" >"$LOG/t0404-traj.ndjson" || true
	jq -c ".trajectory | {id, stop, turns, wall_s, trusted: [.snapshots[] | [.command, (.result.seconds // .result.verify.seconds // .result.profile.seconds)]]}" "$LOG/t0404-traj.ndjson"
	jq -e -s "length == 2 and all(.[]; .trajectory.stop == \"done\" and .trajectory.invalid_tool_calls == 0
			and ([.trajectory.snapshots[] | select(.command == \"ca-build\") | .result.ok] | all)
			and ([.trajectory.snapshots[] | .result.verify.ok] | any)
			and ([.trajectory.snapshots[] | select(.command == \"ca-profile\") | .result.profile.ok] | any))" "$LOG/t0404-traj.ndjson" &&
	jq -e -s "[.[].trajectory.snapshots[] | select(.args == [\"--verify\"])] | length == 1 and all(.[]; .result.verify.ok and .result.profile.ok)" "$LOG/t0404-traj.ndjson" ||
	{ jq -r ".trajectory.messages[] | select(.role == \"tool\") | .content" "$LOG/t0404-traj.ndjson" | tail -n 60; exit 1; }
'
expect_success 'each best snapshot scores reward 3 through one ca-profile --verify | ca-reward' '
	traj=$LOG/t0404-traj.ndjson &&
	ca-best --explode "$traj" >cands &&
	t0=$(date +%s) && { ca-profile --verify -v cands >profiled 2>"$LOG/t0404-phases.txt" || [ $? -eq 1 ]; } &&
	ca-reward profiled >"$LOG/t0404-scored.ndjson" && t1=$(date +%s) &&
	echo "scoring $(wc -l <cands) candidates: ca-profile --verify $((t1 - t0)) s" | tee "$LOG/t0404-scoring.txt" &&
	jq -c "{id: .snapshot.trajectory, index: .snapshot.index, verify_s: .verify.seconds, profile_s: .profile.seconds,
		baseline_cached: .profile.baseline_cached, reward: .reward.value}" "$LOG/t0404-scored.ndjson" | tee -a "$LOG/t0404-scoring.txt" &&
	ca-best --trajectories "$traj" "$LOG/t0404-scored.ndjson" >best &&
	jq -c "{id, reward, best, verify: {ok: .verify.ok, max_abs_err: .verify.max_abs_err},
		profile: {eager_us: .profile.eager_us, compile_us: .profile.compile_us, candidate_us: .profile.candidate_us}}" best &&
	jq -e -s "length == 2 and all(.[]; .reward.value == 3 and .best.correct >= 1)" best
'
test_done
