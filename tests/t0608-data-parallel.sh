#!/bin/sh
# Data-parallel steps (issue 8) on CPUs: ranks started by ca-launch sum
# their gradients (lib/dist) and end with the weights one rank gets from
# the whole batch; rank 0 alone writes the checkpoint and the stats record.
. "$(dirname "$0")/test-lib.sh"

# Tolerances: the key bias's exact gradient is zero (softmax does not
# change when every score of a query moves alike), so what it learns is
# rounding and its relative error is the largest (about 1e-4 after four
# updates); every other tensor agrees within 1e-6.

# Six sequences of different lengths with advantages of both signs and
# on-policy old log-probs; values for the critic step.
make_batch='
	ca-toy init --seed 7 pol && ca-toy init --critic --seed 8 crit &&
	awk "BEGIN { srand(3); for (i = 0; i < 6; i++) { n = 4 + i * 3; t = \"\"; m = \"\";
		for (j = 0; j < n; j++) { t = t (j ? \",\" : \"\") int(rand() * 12); m = m (j ? \",\" : \"\") (j < 2 ? 0 : 1) }
		printf \"{\\\"id\\\":\\\"s%d\\\",\\\"tokens\\\":[%s],\\\"mask\\\":[%s],\\\"reward\\\":%d}\\n\", i, t, m, i % 3 }
	}" | ca-logprob -m pol |
	jq -c ".advantages = [.mask[] * (if (.id | ltrimstr(\"s\") | tonumber) % 2 == 0 then 1 else -0.5 end)]
		| .returns = [.mask[] * 0.7]" >batch'

for agg in token-mean seq-mean-token-mean seq-mean-token-sum seq-mean-token-sum-norm; do
	expect_success "ca-ppo-step --agg $agg: two and three ranks give one rank's weights" '
		'"$make_batch"' &&
		ca-ppo-step -m pol -o one --agg '$agg' --mini-batches 2 --epochs 2 --lr 1e-2 batch >s1 &&
		ca-launch -n 2 -- ca-ppo-step -m pol -o two --agg '$agg' --mini-batches 2 --epochs 2 --lr 1e-2 batch >s2 &&
		ca-launch -n 3 -- ca-ppo-step -m pol -o three --agg '$agg' --mini-batches 2 --epochs 2 --lr 1e-2 batch >s3 &&
		test $(wc -l <s2) = 1 && test $(wc -l <s3) = 1 &&
		test-st_compare two one 1e-4 && test-st_compare three one 1e-4 &&
		jq -s -e "(.[0].pg_loss - .[1].pg_loss | fabs) < 1e-6 and (.[0].grad_norm - .[1].grad_norm | fabs) < 1e-5
			and .[1].ranks == 2" s1 s2'
done

expect_success 'ca-sft-step and ca-value-step: two ranks give one rank'"'"'s weights' '
	'"$make_batch"' &&
	ca-sft-step -m pol -o one --lr 1e-2 batch >/dev/null &&
	ca-launch -n 2 -- ca-sft-step -m pol -o two --lr 1e-2 batch >/dev/null &&
	test-st_compare two one 1e-5 &&
	ca-value-step -m crit -o cone --lr 1e-2 batch >/dev/null &&
	ca-launch -n 2 -- ca-value-step -m crit -o ctwo --lr 1e-2 batch >/dev/null &&
	test-st_compare ctwo cone 1e-5'

expect_success 'more ranks than sequences: the idle ranks still take part' '
	'"$make_batch"' &&
	head -n 2 batch >small &&
	ca-ppo-step -m pol -o one --lr 1e-2 small >/dev/null &&
	ca-launch -n 3 -- ca-ppo-step -m pol -o three --lr 1e-2 small >/dev/null &&
	test-st_compare three one 1e-5'

expect_status 3 'a rank that fails stops the launch with its status' '
	'"$make_batch"' &&
	ca-launch -n 2 --timeout 20 -- sh -c "if [ \$CA_RANK = 1 ]; then exit 3; fi; exec ca-ppo-step -m pol -o x batch"'

expect_success 'a rank left alone reports the missing rank instead of waiting for ever' '
	'"$make_batch"' && mkdir meet &&
	! CA_RANK=0 CA_WORLD_SIZE=2 CA_DIST_DIR=$PWD/meet CA_DIST_TIMEOUT=1 ca-ppo-step -m pol -o x batch 2>err &&
	grep -q "rank 1 did not reach" err'
expect_success 'ca-train --launch "ca-launch -n 2 --": every stage data-parallel, the same checkpoints as one process' '
	ca-toy init --seed 1 pol && ca-toy init --critic --seed 2 crit &&
	ca-toy prompts -n 40 --seed 3 >tasks &&
	rollout="jq -c \".tokens = .prompt_tokens + [3, 4, 5, 6] | .mask = [0, 0, 1, 1, 1, 1]\" | ca-toy score" &&
	for run in one two; do
		launch=; [ $run = two ] && launch="ca-launch -n 2 --"
		ca-train -a pol -c crit -t tasks -o $run --batch 8 --warmup-steps 1 --rft-steps 1 --value-steps 1 \
			--steps 1 --mini-batches 2 --actor-lr 1e-2 --critic-lr 1e-2 --launch "$launch" \
			--rollout "$rollout" 2>log.$run || { cat log.$run; exit 1; }
	done &&
	jq -s -e "map(select(.command != \"ca-train\")) | length == 6 and all(.ranks == 2)" two/stats.ndjson &&
	test-st_compare two/ckpt/000004/actor one/ckpt/000004/actor 1e-3 &&
	test-st_compare two/ckpt/000004/critic one/ckpt/000004/critic 1e-3'
test_done
