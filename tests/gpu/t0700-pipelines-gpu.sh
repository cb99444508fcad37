#!/bin/sh
# The pipelines on a GPU: ca-eval runs two KernelBench problems (L1/14,
# L2/18) through the agent loop (-j 2) with a replayed policy that writes
# real kernels, scores every snapshot with ca-profile --verify | ca-reward and
# prints Table 1; a rerun resumes with nothing to do; the same through the
# Slurm scripts with the fake sbatch; ca-synth with the GPU workload check;
# ca-train's stages with every step command on the GPU.
. "$(dirname "$0")/../test-lib.sh"
# The problems and their solutions are the ones make demo ships (L1/1 left out).
KB=$ROOT/examples/kernelbench
SOL=$KB/solutions
TASKS=$TRASH_BASE/tasks.ndjson
jq -c 'select(.id == "kernelbench/L1/14" or .id == "kernelbench/L2/18")' "$KB/tasks.ndjson" >"$TASKS"
PATH=$TESTS_DIR/fake-slurm:$PATH
FAKE_SLURM_STATE=$TRASH_BASE/slurm-state
export TASKS PATH FAKE_SLURM_STATE

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

# The recorded turns of an agent that writes the solution's files (for
# L1/14 the second version with the first one's kernel beside it), builds
# and says it is done: one candidate per task. tests/gpu/t0404 runs verify
# and profile inside the loop; here the pipeline's scoring does them.
REC=$TRASH_BASE/recording.ndjson
cp -R "$SOL/L1-14-v1" "$TRASH_BASE/L1-14" && cp -R "$SOL/L1-14-v2/." "$TRASH_BASE/L1-14/"
{
	policy-replay --record --id kernelbench/L1/14 --run ca-build "$TRASH_BASE/L1-14"
	policy-replay --record --id kernelbench/L2/18 --run ca-build "$SOL/L2-18"
} >"$REC"
export REC

expect_success 'ca-eval: both problems solved through the loop, reward 3, Table 1 per level' '
	ca-eval -j 2 --tasks "$TASKS" --policy "policy-replay $REC" -o "$TRASH_BASE/eval" >table 2>err; s=$?
	if [ -n "${CA_GPU_LOG:-}" ]; then
		mkdir -p "$CA_GPU_LOG"
		cp err "$CA_GPU_LOG/t0700-eval.err"; cp "$TRASH_BASE/eval/rollout/serve.log" "$CA_GPU_LOG/t0700-serve.log"
		jq -c "{id: .snapshot.trajectory, verify_s: .verify.seconds, profile_s: .profile.seconds, reward: .reward.value,
			phases: .profile.phases}" "$TRASH_BASE/eval/rollout/scored.ndjson" >"$CA_GPU_LOG/t0700-scored.ndjson"
	fi 2>/dev/null
	[ $s -eq 0 ] || { cat err; exit 1; }
	cat table &&
	jq -c "{id, reward, best}" "$TRASH_BASE/eval/results.ndjson" &&
	jq -e -s "length == 2 and all(.[]; .reward.value == 3 and .verify.ok == true)" "$TRASH_BASE/eval/results.ndjson" &&
	grep -q "^all  *2  *0  *1.000 " table && { ! { echo "set terminal png" | gnuplot; } >/dev/null 2>&1 || [ -s "$TRASH_BASE/eval/table1.png" ]; }'

expect_success 'ca-eval again: resumes with nothing to roll out or score, same table' '
	cp "$TRASH_BASE/eval/table.txt" before &&
	ca-eval -j 2 --tasks "$TASKS" --policy "policy-replay $REC" -o "$TRASH_BASE/eval" >table 2>err &&
	grep -q "0 of 2 tasks to roll out" err && grep -q "0 of [0-9]* candidates to score" err &&
	cmp table before'

if [ -f "$CA_BIN/libca-model-cuda.so" ]; then
	expect_success 'ca-train --device cuda: RFT, value pretraining and PPO steps on the GPU, stats per step' '
		ca-toy init --hidden 256 --layers 2 --seed 1 pol && ca-toy init --critic --hidden 256 --layers 2 --seed 2 crit &&
		ca-toy prompts -n 16 --seed 3 >tasks &&
		ca-train --device cuda -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 1 --rft-steps 1 --value-steps 1 \
			--steps 2 --mini-batches 2 --actor-lr 1e-3 --critic-lr 1e-3 \
			--rollout "ca-sample --device \$CA_DEVICE -m \$CA_POLICY --seed \$CA_SEED --max-tokens 6 --token-record | ca-toy score" \
			2>log || { cat log; exit 1; }
		[ "$(cat run/latest)" = 5 ] &&
		[ "$(jq -r "select(.command != \"ca-train\") | .stage" run/stats.ndjson | uniq | tr "\n" " ")" = "warmup rft value ppo " ] &&
		jq -s -e "map(select(.command == \"ca-ppo-step\") | .loss | isnan | not) | all" run/stats.ndjson &&
		ca-plot -o run training run/stats.ndjson 2>/dev/null && [ $(wc -l <run/training.tsv) -eq 5 ]'
else
	skip 'ca-train --device cuda' 'libca-model-cuda.so not built (make model-cuda)'
fi
expect_success 'ca-synth on the GPU: the workload check runs (eager and compile times)' '
	ca-synth -n 4 --no-crawl --seed 3 -j 2 -o synth 2>err || { cat err; exit 1; }
	cat synth/stats.txt &&
	[ $(wc -l <synth/filtered.ndjson) -eq 4 ] &&
	jq -e -s "any(.[]; .filter.checks.workload != null and .filter.device != \"cpu\")" synth/filtered.ndjson'
expect_success 'the same on Slurm (fake sbatch): two shards, merged, tabulated' '
	"$ROOT/scripts/slurm/submit" -K 2 -o slurm eval "$TASKS" -- --policy "policy-replay $REC" 2>err &&
	cat slurm-*.out | tail -n 20 &&
	jq -e -s "length == 2 and all(.[]; .reward.value == 3)" slurm/results.ndjson && grep -q "^all  *2 " slurm/table.txt'
test_done
