#!/bin/sh
# ca-sft-step: masked negative log-likelihood on the policy's own tokens.
. "$(dirname "$0")/test-lib.sh"

make_batch='
	ca-toy init --seed 5 pol &&
	printf "%s\n" "{\"tokens\":[0,3,3,4,5,6],\"mask\":[0,0,1,1,1,1]}" \
		"{\"tokens\":[0,4,4,5,6,7,8],\"mask\":[0,0,1,1,0,1,1]}" >batch'

expect_success 'the first loss is the token-mean negative log-prob that ca-logprob reports' '
	'"$make_batch"' &&
	ca-sft-step -m pol -o p2 <batch >stats &&
	ca-logprob -m pol <batch |
	jq -s "[.[] | [.logprobs, .mask] | transpose[] | select(.[1] == 1) | .[0]] | -add / length" >want &&
	jq -e --argjson w "$(cat want)" ".command == \"ca-sft-step\" and .tokens == 8 and ((.loss - \$w) | fabs < 1e-5)" stats'

expect_success 'repeated steps fit the batch: the loss falls' '
	'"$make_batch"' &&
	for i in 1 2 3 4 5 6 7 8; do ca-sft-step -m pol --lr 1e-2 <batch || exit 1; done >stats &&
	jq -s -e ".[7].loss < 0.5 * .[0].loss and .[7].step == 8" stats'

expect_success 'masked tokens are not trained on' '
	'"$make_batch"' &&
	jq -c ".mask |= map(0)" batch | ca-sft-step -m pol -o p2 >stats &&
	jq -e ".tokens == 0 and .loss == 0 and .grad_norm == 0" stats'

expect_success 'seq-mean-token-sum aggregation' '
	'"$make_batch"' &&
	ca-sft-step -m pol -o p2 --agg seq-mean-token-sum <batch >stats &&
	ca-logprob -m pol <batch |
	jq -s "[.[] | [.logprobs, .mask] | transpose[] | select(.[1] == 1) | .[0]] | -add / 2" >want &&
	jq -e --argjson w "$(cat want)" "(.loss - \$w) | fabs < 1e-5" stats'

expect_status 3 'a record with one token is bad data' '
	'"$make_batch"' &&
	{ cat batch; echo "{\"tokens\":[3]}"; } | ca-sft-step -m pol -o p2 >stats 2>err; s=$?
	grep -q "stdin:3: a record needs at least two tokens" err; exit $s'

expect_success '-h prints the usage' 'ca-sft-step -h | grep -q "^usage: ca-sft-step"'

test_done
