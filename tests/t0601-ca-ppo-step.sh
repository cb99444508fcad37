#!/bin/sh
# ca-ppo-step: one PPO update on a tiny checkpoint built here (ca-toy init).
# On-policy old log-probs from ca-logprob give ratio 1 exactly where the
# alignment of records and engine agree; the step moves log-probs the way
# the advantages say; errors are reported, the stats record still comes.
. "$(dirname "$0")/test-lib.sh"

# A batch: two records, policy tokens after the prompt, old log-probs from
# ca-logprob, advantages +1 on the first record and -1 on the second.
make_batch='
	ca-toy init --seed 7 pol &&
	printf "%s\n" "{\"id\":\"a\",\"tokens\":[0,3,3,4,5,6],\"mask\":[0,0,1,1,1,1],\"reward\":1}" \
		"{\"id\":\"b\",\"tokens\":[0,4,9,9,2],\"mask\":[0,0,1,1,1],\"reward\":0}" |
	ca-logprob -m pol |
	jq -c "if .id == \"a\" then .advantages = [0,0,1,1,1,1] else .advantages = [0,0,-1,-1,-1] end" >batch'

expect_success 'on-policy step: ratio 1, pg_loss = -token-mean(A), stats fields' '
	'"$make_batch"' &&
	ca-ppo-step -m pol -o pol2 --lr 1e-3 <batch >stats &&
	test $(wc -l <stats) = 1 &&
	jq -e ".command == \"ca-ppo-step\" and .step == 1 and .sequences == 2 and .tokens == 7 and .updates == 1" stats &&
	jq -e ".ratio_min > 0.99999 and .ratio_max < 1.00001 and .pg_clipfrac == 0 and (.approx_kl | fabs) < 1e-6" stats &&
	jq -e "(.pg_loss - (-(4 - 3) / 7)) | fabs < 1e-6" stats &&
	jq -e ".entropy > 2 and .grad_norm > 0 and .reward_mean == 0.5 and .reward_3_share == 0 and .lr == 0.001" stats &&
	test -f pol2/model.safetensors && test -f pol2/optimizer.safetensors && test -f pol2/config.json &&
	! test -f pol/optimizer.safetensors'

expect_success 'the update raises log-probs of positive-advantage tokens and lowers the others' '
	'"$make_batch"' &&
	ca-ppo-step -m pol -o pol2 --lr 1e-2 <batch >stats &&
	ca-logprob -m pol2 <batch | jq -c "[.logprobs[2:]]" >new &&
	jq -c "[.logprobs[2:]]" batch >old &&
	paste -d" " old new | jq -s -e "
		(.[0][0] | add) < (.[1][0] | add) and (.[2][0] | add) > (.[3][0] | add)"'

expect_success 'checkpoint updated in place without -o; the optimizer step counts across calls' '
	'"$make_batch"' &&
	ca-ppo-step -m pol <batch >s1 && ca-ppo-step -m pol <batch >s2 &&
	jq -e ".step == 1" s1 && jq -e ".step == 2" s2 &&
	test -f pol/optimizer.safetensors && ! ls -d pol.tmp.* pol.old.* 2>/dev/null'

expect_success 'a second update on the same batch is off-policy: ratios move, clipping counts' '
	'"$make_batch"' &&
	ca-ppo-step -m pol --lr 5e-2 --epochs 3 <batch >stats &&
	jq -e ".updates == 3 and .ratio_max > 1.01 and .ratio_min < 0.99 and .pg_clipfrac >= 0" stats'

expect_success 'mini-batches, aggregation modes, dual clip, entropy and KL terms run' '
	'"$make_batch"' &&
	jq -c ".ref_logprobs = .logprobs" batch >b2 &&
	for agg in token-mean seq-mean-token-mean seq-mean-token-sum seq-mean-token-sum-norm; do
		ca-ppo-step -m pol -o out --agg $agg --mini-batches 2 --dual-clip 3 --entropy-coef 0.01 \
			--kl-coef 0.1 --kl-type low_var_kl <b2 >stats || exit 1
		jq -e ".updates == 2 and .agg == \"$agg\" and .kl != null" stats || exit 1
	done
	ca-ppo-step -m pol -o out --agg seq-mean-token-sum <batch >stats &&
	jq -e "(.pg_loss - (-(4 - 3) / 2)) | fabs < 1e-6" stats &&
	ca-ppo-step -m pol -o out --agg seq-mean-token-sum-norm <batch >stats &&
	jq -e "(.pg_loss - (-(4 - 3) / 2 / 5)) | fabs < 1e-6" stats &&
	ca-ppo-step -m pol -o out --agg seq-mean-token-sum-norm --loss-scale-factor 8 <batch >stats &&
	jq -e "(.pg_loss - (-(4 - 3) / 2 / 8)) | fabs < 1e-6" stats'

expect_success '--whiten normalises the advantages over the batch' '
	'"$make_batch"' &&
	jq -c ".advantages |= map(. * 10 + 5)" batch >b2 &&
	ca-ppo-step -m pol -o o1 --whiten <batch >s1 && ca-ppo-step -m pol -o o2 --whiten <b2 >s2 &&
	jq -s -e "(.[0].pg_loss - .[1].pg_loss) | fabs < 1e-6" s1 s2'

expect_status 3 '--whiten with one policy token is bad data (verl raises): no step, no checkpoint' '
	'"$make_batch"' &&
	jq -c "select(.id == \"a\") | .mask = [0,0,0,0,0,1]" batch >one &&
	ca-ppo-step -m pol -o out --whiten <one >stats 2>err; s=$?
	grep -q "^ca-ppo-step: --whiten: 1 policy token in the batch; whitening needs at least 2$" err &&
	! test -e out && test ! -s stats && exit $s'

expect_status 3 'a bad record is reported as FILE:LINE and left out; the step still happens' '
	'"$make_batch"' &&
	{ head -1 batch; echo "{bad"; echo "{\"tokens\":[0,1],\"mask\":[0,1]}"; tail -1 batch; } >b2 &&
	ca-ppo-step -m pol -o out <b2 >stats 2>err; s=$?
	grep -q "^ca-ppo-step: stdin:2: " err && grep -q "^ca-ppo-step: stdin:3: record has no logprobs array" err &&
	jq -e ".records == 4 and .skipped == 2 and .sequences == 2" stats && exit $s'

expect_success 'the raw-text reader and the libjq reader agree (non-ASCII forces libjq); boolean masks' '
	'"$make_batch"' &&
	jq -c ".note = \"\u00e9t\u00e9\"" batch >b2 &&
	jq -c ".mask |= map(. == 1)" batch >b3 &&
	ca-ppo-step -m pol -o o1 <batch | jq -c "del(.seconds, .update_seconds)" >s1 &&
	ca-ppo-step -m pol -o o2 <b2 | jq -c "del(.seconds, .update_seconds)" >s2 &&
	ca-ppo-step -m pol -o o3 <b3 | jq -c "del(.seconds, .update_seconds)" >s3 &&
	cmp_output s1 s2 && cmp_output s1 s3'

expect_status 3 'a record longer than max_position_embeddings is left out' '
	'"$make_batch"' &&
	jq -c "select(.id == \"a\") | .tokens = [range(70)] | .mask = [range(70)] | .logprobs = [range(70)] |
		.advantages = [range(70)] | .mask |= map(1) | .tokens |= map(. % 16)" batch >long &&
	cat batch long | ca-ppo-step -m pol -o out >stats 2>err; s=$?
	grep -q "stdin:3: 70 tokens exceed the model.s max_position_embeddings 64" err &&
	jq -e ".sequences == 2 and .skipped == 1" stats; exit $s'

expect_status 3 'a token outside the vocabulary is bad data' '
	'"$make_batch"' &&
	echo "{\"tokens\":[0,99],\"mask\":[0,1],\"logprobs\":[null,-1],\"advantages\":[0,1]}" |
	ca-ppo-step -m pol -o out 2>err >stats; s=$?
	grep -q "not a token id" err; exit $s'

expect_status 3 'a critic checkpoint is refused' '
	ca-toy init --critic crit && echo "{}" | ca-ppo-step -m crit 2>err; s=$?
	grep -q "critic" err; exit $s'

expect_status 4 'a missing checkpoint directory is a system error' '
	echo "{}" | ca-ppo-step -m nonexistent 2>err'

expect_status 2 'usage: -m is required, unknown --agg, --loss-scale-factor not above 0' '
	ca-ppo-step </dev/null 2>err; test $? = 2 || exit 1
	ca-ppo-step -m x --agg nope </dev/null 2>err; test $? = 2 && grep -q "unknown mode" err || exit 1
	ca-ppo-step -m x --loss-scale-factor 0 </dev/null 2>err; s=$?; grep -q "loss-scale-factor" err; exit $s'

expect_success '-h prints the usage' 'ca-ppo-step -h | grep -q "^usage: ca-ppo-step"'

expect_status 4 'stdout full: exit 4' '
	'"$make_batch"' && ca-ppo-step -m pol -o out <batch >/dev/full'

test_done
