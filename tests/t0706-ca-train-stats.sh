#!/bin/sh
# scripts/ca-train's rollout record per step (mean reward, share of reward
# 3, trajectory length in turns and tokens, as ca-plot's training curves
# read them) and the paper's ablation switches.
. "$(dirname "$0")/test-lib.sh"

# Token records that look like scored agent trajectories: reward 3 for
# even prompts, 1 for odd ones, and a turn count.
setup='
	ca-toy init --seed 1 pol && ca-toy init --critic --seed 2 crit &&
	ca-toy prompts -n 40 --seed 3 >tasks &&
	rollout="jq -c \".tokens = .prompt_tokens + [3, 4, 5, 6] | .mask = [0, 0, 1, 1, 1, 1]
		| .reward = (if .prompt_tokens[0] % 2 == 0 then 3 else 1 end) | .turns = 7\""'

expect_success 'a rollout record per step with reward, share of reward 3, turns and tokens' '
	'"$setup"' &&
	ca-train -a pol -c crit -t tasks -o run --batch 8 --warmup-steps 0 --rft-steps 1 --value-steps 1 \
		--steps 2 --mini-batches 2 --rollout "$rollout" 2>log || { cat log; exit 4; }
	jq -c "select(.command == \"ca-train\")" run/stats.ndjson >r &&
	[ "$(jq -r "[.global_step, .stage] | @tsv" r | tr "\n" " ")" = "1	rft 3	ppo 4	ppo " ] &&
	jq -s -e "all(.[]; .records == 8 and .turns_mean == 7 and .tokens_mean == 6 and .policy_tokens_mean == 4
		and .reward_3_share >= 0 and .reward_3_share <= 1
		and (.reward_mean - (1 + 2 * .reward_3_share) | fabs) < 1e-9)" r &&
	ca-plot -o p training run/stats.ndjson 2>err &&
	awk -F "\t" "\$1 == 3 && \$8 == 7 && \$9 == 6 { ok = 1 } END { exit !ok }" p/training.tsv
'

expect_success 'a token record without turns counts one turn (a single completion)' '
	'"$setup"' &&
	ca-train -a pol -c crit -t tasks -o run --batch 4 --warmup-steps 1 --rft-steps 0 --value-steps 0 \
		--steps 0 --rollout "jq -c \".tokens = .prompt_tokens + [3] | .mask = [0, 0, 1] | .reward = 0.5\"" 2>log &&
	jq -s -e "map(select(.command == \"ca-train\")) | length == 1 and .[0].turns_mean == 1 and .[0].reward_3_share == 0" run/stats.ndjson
'

expect_success '--no-rft and --no-value-pretrain leave their stages out; value pretraining without RFT rolls out' '
	'"$setup"' &&
	ca-train -a pol -c crit -t tasks -o a --batch 4 --warmup-steps 0 --rft-steps 1 --value-steps 1 --steps 1 \
		--no-rft --rollout "$rollout" 2>log &&
	[ "$(jq -r "select(.command != \"ca-train\") | .stage" a/stats.ndjson | uniq | tr "\n" " ")" = "value ppo " ] &&
	jq -s -e "map(select(.stage == \"value\" and .command == \"ca-train\")) | length == 1" a/stats.ndjson &&
	! ls a/rft-*.ndjson 2>/dev/null &&
	ca-train -a pol -c crit -t tasks -o b --batch 4 --warmup-steps 0 --rft-steps 1 --value-steps 1 --steps 1 \
		--no-value-pretrain --rollout "$rollout" 2>log &&
	[ "$(jq -r ".stage" b/stats.ndjson | uniq | tr "\n" " ")" = "rft ppo " ]
'

expect_success '--no-agent-loop: every stage learns from the single-turn (warm-up) rollout' '
	'"$setup"' &&
	ca-train -a pol -c crit -t tasks -o run --batch 4 --warmup-steps 1 --rft-steps 0 --value-steps 0 --steps 2 \
		--no-agent-loop --rollout "false" --warmup-rollout "$rollout | jq -c \".turns = 1\"" 2>log &&
	jq -s -e "map(select(.command == \"ca-train\") | .turns_mean) == [1, 1, 1]" run/stats.ndjson
'
expect_status 2 '--no-agent-loop without a single-turn rollout is a usage error' '
	ca-train -a pol -c crit -t tasks -o run --no-agent-loop --rollout true
'

expect_success '--continuous-reward: rollouts see CA_REWARD=continuous; ca-rollout then scores with ca-reward --continuous' '
	'"$setup"' &&
	ca-train -a pol -c crit -t tasks -o run --batch 4 --warmup-steps 0 --rft-steps 0 --value-steps 0 --steps 1 \
		--continuous-reward --rollout "echo \$CA_REWARD >>seen; $rollout" 2>log &&
	[ "$(cat seen)" = continuous ] &&
	mkdir fake && printf "#!/bin/sh\necho \"\$@\" >>\"$PWD/reward-args\"\ncat\n" >fake/ca-reward && chmod +x fake/ca-reward &&
	printf "%s\n" "{\"id\":\"u\",\"code\":\"class Model: pass\\n\"}" >u.ndjson &&
	printf "#!/bin/sh\ncat\n" >fake/ca-profile && chmod +x fake/ca-profile &&
	mkdir r2 && jq -c ". + {trajectory: {id: \"u#1\", snapshots: [], final: {files: {\"model_new.py\": \"x\"}}}}" u.ndjson \
		>r2/trajectories.ndjson &&
	PATH=$PWD/fake:$PATH CA_REWARD=continuous ca-rollout --device cpu --policy true -o r2 u.ndjson 2>err &&
	grep -q -- "--continuous" reward-args
'
test_done
