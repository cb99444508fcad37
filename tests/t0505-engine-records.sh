#!/bin/sh
# ca-logprob and ca-sample as record filters, without torch: a random
# checkpoint written by test-model_bench; bad lines and bad records become
# error records with FILE:LINE diagnostics, the rest go on; -u gives the
# same records; a full stdout is exit 4.
. "$(dirname "$0")/test-lib.sh"

M=$TRASH_BASE/model
export M
test-model_bench "$M" 64 2 300 16 >/dev/null 2>&1 || { echo "cannot write the test checkpoint"; exit 1; }

expect_status 3 'ca-logprob: bad lines and records are reported, the others scored, in order' '
	printf "%s\n" "{\"id\":1,\"tokens\":[1,2,3]}" "not json" "{\"id\":3}" "{\"id\":4,\"tokens\":[1,999]}" \
		"{\"id\":5,\"tokens\":[7]}" >in &&
	ca-logprob -m "$M" in >out 2>err; s=$?
	test "$(wc -l <out)" = 5 &&
	test "$(jq -c "[.id, (.logprobs | length?), .logprob_error != null]" out | tr -d "\n")" = \
		"[1,3,false][null,0,false][3,0,true][4,0,true][5,1,false]" &&
	grep -q "in:2: " err && grep -q "in:3: record has no tokens array" err &&
	grep -q "in:4: token outside" err && exit $s
'
expect_success 'ca-logprob -u and --batch-tokens 1 give the same records as one batch' '
	printf "{\"tokens\":[%s]}\n" "1,2,3" "4,5,6,7,8" "9" "10,11" >in &&
	ca-logprob -m "$M" in >a && ca-logprob -u -m "$M" <in >b && ca-logprob --batch-tokens 1 -m "$M" in >c &&
	cmp_output a b && cmp_output a c
'
expect_status 4 'ca-logprob: a full stdout is exit 4' '
	echo "{\"tokens\":[1,2]}" | ca-logprob -m "$M" >/dev/full 2>/dev/null
'
expect_success 'ca-sample without a tokenizer: token prompts work, text prompts are error records' '
	printf "%s\n" "{\"prompt_tokens\":[1,2,3]}" "{\"prompt\":\"hi\"}" |
	ca-sample --temperature 0 --max-tokens 5 -m "$M" >out 2>err; test $? = 3 &&
	test "$(jq -c ".completion.tokens | length" out | head -n 1)" = 5 &&
	jq -e "select(.prompt) | .completion.error | test(\"tokenizer.json\")" out >/dev/null
'
expect_status 2 'ca-sample: --stop needs a tokenizer, a critic cannot sample, bad numbers are usage errors' '
	ca-sample --temperature -1 -m "$M" </dev/null 2>/dev/null; test $? = 2 || exit 1
	ca-sample --top-p 0 -m "$M" </dev/null 2>/dev/null; test $? = 2 || exit 1
	ca-sample -m "$M" --stop x </dev/null 2>err; test $? = 3 || exit 1
	ca-sample </dev/null 2>/dev/null
'
test_done
