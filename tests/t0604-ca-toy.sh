#!/bin/sh
# ca-toy: tiny checkpoints the engine loads, prompts, and the scorer.
. "$(dirname "$0")/test-lib.sh"

expect_success 'init writes policy and critic checkpoints that ca-logprob reads' '
	ca-toy init --seed 4 pol && ca-toy init --critic --seed 4 crit &&
	jq -e ".model_type == \"qwen2\" and .vocab_size == 16" pol/config.json &&
	echo "{\"tokens\":[0,3,4,5]}" | ca-logprob -m pol | jq -e ".logprobs | length == 4" &&
	echo "{\"tokens\":[0,3,4,5]}" | ca-logprob -m crit | jq -e ".values | length == 4"'

expect_success 'init is deterministic for a seed and differs across seeds' '
	ca-toy init --seed 4 a && ca-toy init --seed 4 b && ca-toy init --seed 5 c &&
	cmp a/model.safetensors b/model.safetensors && ! cmp -s a/model.safetensors c/model.safetensors'

expect_success 'a random policy is close to uniform: log-probs near -log 16' '
	ca-toy init pol &&
	echo "{\"tokens\":[0,3,4,5,6,7]}" | ca-logprob -m pol |
	jq -e "[.logprobs[1:][] | . + 2.7726 | fabs] | max < 0.5"'

expect_success 'prompts: BOS and a start symbol, deterministic for a seed' '
	ca-toy prompts -n 5 --seed 2 >a && ca-toy prompts -n 5 --seed 2 >b && cmp a b &&
	test $(wc -l <a) = 5 &&
	jq -e ".prompt_tokens[0] == 0 and .prompt_tokens[1] >= 2 and .prompt_tokens[1] <= 5" a >/dev/null'

expect_success 'score: share of positions counting up from the start symbol, wrapping' '
	printf "%s\n" "{\"prompt_tokens\":[0,3],\"completion_tokens\":[3,4,5,9]}" \
		"{\"tokens\":[0,15,15,2,3,3],\"mask\":[0,0,1,1,1,1]}" \
		"{\"prompt_tokens\":[0,3],\"completion_tokens\":[]}" | ca-toy score >out &&
	jq -s -e ".[0].reward == 0.75 and .[1].reward == 0.75 and .[2].reward == 0" out &&
	jq -s -e ".[0].tokens == [0,3,3,4,5,9] and .[0].mask == [0,0,1,1,1,1]" out'

expect_status 3 'score: records it cannot read become reward null, exit 3' '
	printf "%s\n" "{\"x\":1}" "{bad" | ca-toy score >out 2>err; s=$?
	jq -s -e ".[0].reward == null and .[1].error != null" out && grep -q "stdin:1:" err; exit $s'

expect_status 2 'an unknown verb is a usage error' 'ca-toy frobnicate 2>err'

test_done
