#!/bin/sh
# scripts/ca-train: the stage schedule, checkpoints per step, stats records,
# and resuming after a kill without losing or repeating a step. The rollout
# here replays fixed completions, so no sampler is needed.
. "$(dirname "$0")/test-lib.sh"

setup='
	ca-toy init --seed 1 pol && ca-toy init --critic --seed 2 crit &&
	ca-toy prompts -n 40 --seed 3 >tasks &&
	rollout="jq -c \".tokens = .prompt_tokens + [3, 4, 5, 6] | .mask = [0, 0, 1, 1, 1, 1]\" | ca-toy score"'

expect_success 'all four stages in order, one stats record per step command' '
	'"$setup"' &&
	ca-train -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 2 --rft-steps 1 --value-steps 2 \
		--steps 3 --mini-batches 2 --rollout "$rollout" 2>log || { cat log; exit 4; }
	jq -r "[.global_step, .stage, .command] | @tsv" run/stats.ndjson >got &&
	printf "%s\n" "1	warmup	ca-ppo-step" "1	warmup	ca-value-step" "1	warmup	ca-train" "2	warmup	ca-ppo-step" \
		"2	warmup	ca-value-step" "2	warmup	ca-train" "3	rft	ca-sft-step" "3	rft	ca-train" \
		"4	value	ca-value-step" "5	value	ca-value-step" \
		"6	ppo	ca-ppo-step" "6	ppo	ca-value-step" "6	ppo	ca-train" "7	ppo	ca-ppo-step" "7	ppo	ca-value-step" \
		"7	ppo	ca-train" "8	ppo	ca-ppo-step" "8	ppo	ca-value-step" "8	ppo	ca-train" >want &&
	cmp_output want got &&
	test "$(cat run/latest)" = 8 && test -f run/ckpt/000008/actor/model.safetensors &&
	test -f run/ckpt/000008/critic/optimizer.safetensors && ! test -d run/ckpt/000006 &&
	jq -s -e "map(select(.command == \"ca-ppo-step\") | .sequences == 8) | all" run/stats.ndjson &&
	kept=$(cat run/rft-*.ndjson | wc -l) && test "$kept" -gt 0 &&
	jq -s -e --argjson k "$kept" "map(select(.stage == \"value\") | .sequences == \$k) | all" run/stats.ndjson &&
	test -f pol/model.safetensors && ! test -f pol/optimizer.safetensors'

expect_success 'the paper defaults: batch 1024, lr 3e-6 and 6e-6, 150 PPO steps' '
	grep -q "^batch=1024 actor_lr=3e-6 critic_lr=6e-6 steps=150 gamma=1 lambda=0.95" "$ROOT/scripts/ca-train"'

expect_success 'a run extended with more steps continues where it stopped' '
	'"$setup"' &&
	ca-train -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 0 --rft-steps 0 --value-steps 0 \
		--steps 2 --rollout "$rollout" 2>log &&
	ca-train -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 0 --rft-steps 0 --value-steps 0 \
		--steps 4 --rollout "$rollout" 2>log &&
	jq -s -e "map(select(.command == \"ca-ppo-step\") | .global_step) == [1, 2, 3, 4]" run/stats.ndjson &&
	jq -s -e "map(select(.command == \"ca-ppo-step\") | .step) == [4, 8, 12, 16]" run/stats.ndjson'

expect_success 'killed in the middle of steps, a rerun loses and repeats nothing' '
	'"$setup"' &&
	slow="sleep 0.3; $rollout" &&
	for i in 1 2 3; do
		# In its own process group, so the kill takes the whole pipeline down.
		setsid ca-train -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 0 --rft-steps 0 \
			--value-steps 0 --steps 6 --rollout "$slow" 2>log & pid=$!
		sleep 0.$((4 + i * 2)); kill -9 -- -$pid 2>/dev/null; wait $pid 2>/dev/null
	done
	ca-train -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 0 --rft-steps 0 --value-steps 0 \
		--steps 6 --rollout "$rollout" 2>log &&
	jq -s -e "map(select(.command == \"ca-ppo-step\") | .global_step) == [1, 2, 3, 4, 5, 6]" run/stats.ndjson &&
	jq -s -e "map(select(.command == \"ca-ppo-step\") | .step) == [4, 8, 12, 16, 20, 24]" run/stats.ndjson'

expect_success 'rollout records the evaluator failed on (reward null) are left out, not trained on as -1' '
	'"$setup"' &&
	faulty="$rollout | jq -c \"if (.id | tostring | test(\\\"[05]$\\\")) then .reward = {value: null, evaluator_fault: true} else . end\"" &&
	ca-train -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 0 --rft-steps 0 --value-steps 0 \
		--steps 1 --rollout "$faulty" 2>log || { cat log; exit 1; }
	grep -q "rollout record(s) without a reward (evaluator faults) left out" log &&
	jq -s -e "map(select(.command == \"ca-ppo-step\"))[0].sequences < 8" run/stats.ndjson'
expect_status 4 'a failing step stops the run with exit 4' '
	'"$setup"' &&
	ca-train -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 0 --rft-steps 0 --value-steps 0 \
		--steps 2 --rollout "true" 2>log; s=$?
	grep -q "the rollout gave no records" log; exit $s'

expect_status 2 'usage errors' 'ca-train -a x 2>err'

test_done
