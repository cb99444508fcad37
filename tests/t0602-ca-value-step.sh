#!/bin/sh
# ca-value-step: the critic regresses onto ca-gae's returns; the loss is
# verl's 0.5 * mean((V - R)^2) over policy tokens, with optional clipping
# around the old values.
. "$(dirname "$0")/test-lib.sh"

# Old values as the step reads them: entry i is the critic output at
# position i - 1 (the state before token i), as ca-logprob writes them.
make_batch='
	ca-toy init --critic --seed 3 crit &&
	printf "%s\n" "{\"tokens\":[0,3,3,4,5,6],\"mask\":[0,0,1,1,1,1],\"reward\":1}" \
		"{\"tokens\":[0,4,9,9,2],\"mask\":[0,0,1,1,1],\"reward\":0}" |
	ca-logprob -m crit | ca-gae >batch'

expect_success 'the first loss is 0.5 * token-mean((V - R)^2) of the old values' '
	'"$make_batch"' &&
	ca-value-step -m crit -o c2 <batch >stats &&
	jq -s -e "[.[] | [.values, .returns, .mask] | transpose[] | select(.[2] == 1) | (.[0] - .[1]) * (.[0] - .[1])]
		| 0.5 * add / length" batch >want &&
	jq -e ".command == \"ca-value-step\" and .tokens == 7 and .step == 1 and .lr == 6e-06" stats &&
	jq -e --argjson w "$(cat want)" "(.vf_loss - \$w) | fabs < 1e-6" stats'

expect_success 'repeated steps drive the loss down' '
	'"$make_batch"' &&
	for i in 1 2 3 4 5 6 7 8 9 10; do ca-value-step -m crit --lr 1e-2 <batch || exit 1; done >stats &&
	jq -s -e ".[0].vf_loss > 4 * .[9].vf_loss" stats &&
	jq -s -e ".[9].vf_explained_var > .[0].vf_explained_var" stats'

expect_success 'value clipping: with a tiny clip range the clipped term dominates' '
	'"$make_batch"' &&
	ca-value-step -m crit --lr 1e-2 --epochs 4 --clip-value 1e-4 <batch >stats &&
	jq -e ".updates == 4 and .vf_clipfrac > 0" stats'

expect_status 3 'records without returns are left out and reported' '
	'"$make_batch"' &&
	{ cat batch; echo "{\"tokens\":[0,1,2]}"; } | ca-value-step -m crit -o c2 >stats 2>err; s=$?
	grep -q "stdin:3: record has no returns array" err && jq -e ".sequences == 2" stats && exit $s'

expect_status 3 '--clip-value needs the old values' '
	'"$make_batch"' &&
	jq -c "del(.values)" batch | ca-value-step -m crit -o c2 --clip-value 0.5 >stats 2>err; s=$?
	grep -q "record has no values array" err; exit $s'

expect_status 3 'a policy checkpoint is refused' '
	ca-toy init pol && echo "{}" | ca-value-step -m pol 2>err'

expect_success '-h prints the usage' 'ca-value-step -h | grep -q "^usage: ca-value-step"'

test_done
