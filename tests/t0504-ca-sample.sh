#!/bin/sh
# ca-sample: greedy decoding equals transformers' generate token for token
# (token prompts and a chat prompt that ends on <|im_end|>); text prompts and
# conversations go through the checkpoint's tokenizer; seeded sampling is
# reproducible; the log-probs it reports at temperature 1 are ca-logprob's.
. "$(dirname "$0")/test-lib.sh"

if ! has_torch || ! "$(ca_python)" -c 'import transformers, tokenizers' >/dev/null 2>&1; then
	skip 'ca-sample' 'torch/transformers not installed (make deps)'
	test_done
	exit 0
fi
M=$TRASH_BASE/model
export M
if ! TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1 "$(ca_python)" "$ROOT/lib/py/ca_hf.py" \
	sample-fixture "$M" "$TESTS_DIR/data/t0503-corpus.txt" >"$TRASH_BASE/fixture.log" 2>&1; then
	cat "$TRASH_BASE/fixture.log"
	skip 'ca-sample' 'building the fixture failed'
	test_done
	exit 0
fi

expect_success 'greedy decoding matches transformers generate token for token' '
	jq -c "{prompt_tokens}" "$M/ref-generate.ndjson" |
	ca-sample --temperature 0 --max-tokens 20 --stop-token 2 -m "$M" >out &&
	jq -c .completion.tokens out >ca && jq -c .completion "$M/ref-generate.ndjson" >ref &&
	cmp_output ref ca &&
	test "$(jq -r .completion.finish_reason out | tail -n 1)" = stop
'
expect_success 'text prompts and conversations use the tokenizer and chat format' '
	printf "%s\n" "{\"id\":1,\"prompt\":\"def forward(self, x):\"}" \
		"{\"id\":2,\"messages\":[{\"role\":\"user\",\"content\":\"Write a CUDA kernel.\"}]}" |
	ca-sample --temperature 0 --max-tokens 20 -m "$M" >out &&
	test "$(jq -c .completion.tokens out)" = "$(jq -c .completion "$M/ref-generate.ndjson" | sed -n "1p;4p")" &&
	test "$(jq -c .id out | tr "\n" " ")" = "1 2 " &&
	jq -e ".completion.text | type == \"string\"" out >/dev/null
'
expect_success 'seeded sampling is reproducible and the seed matters' '
	echo "{\"prompt\":\"The policy\"}" >in &&
	ca-sample --seed 7 --max-tokens 30 -m "$M" in >a && ca-sample --seed 7 --max-tokens 30 -m "$M" in >b &&
	ca-sample --seed 8 --max-tokens 30 -m "$M" in >c &&
	cmp_output a b && ! cmp -s a c
'
expect_success 'temperature-1 log-probs equal ca-logprob on the token record' '
	printf "{\"prompt\":\"The policy\"}\n{\"prompt\":\"12345\"}\n" |
	ca-sample --seed 3 --max-tokens 25 --token-record -m "$M" >s &&
	ca-logprob -m "$M" s >l &&
	jq -n --slurpfile a s --slurpfile b l "[range(0; \$a | length) as \$i
		| range(0; \$a[\$i].tokens | length) as \$j | select(\$a[\$i].logprobs[\$j] != null)
		| (\$a[\$i].logprobs[\$j] - \$b[\$i].logprobs[\$j]) | fabs] | max" >err &&
	cat err && awk "{ exit !(\$1 < 1e-4) }" err &&
	test "$(jq -c "[(.mask | add), (.completion.tokens | length)]" s | head -n 1 | jq ".[0] == .[1]")" = true
'
expect_success 'a tiny top-p keeps only the best token (greedy, log-prob 0)' '
	jq -c "{prompt_tokens}" "$M/ref-generate.ndjson" | head -n 1 |
	ca-sample --top-p 1e-9 --max-tokens 20 -m "$M" >out &&
	test "$(jq -c .completion.tokens out)" = "$(jq -c .completion "$M/ref-generate.ndjson" | head -n 1)" &&
	test "$(jq -c "[.completion.logprobs[] | select(. != 0)] | length" out)" = 0
'
expect_success 'a stop string ends the completion and is cut from the text' '
	echo "{\"prompt\":\"The policy\"}" | ca-sample --seed 1 --max-tokens 40 -m "$M" >full &&
	s=$(jq -r ".completion.text | [scan(\"[a-z]\")][2]" full) && test -n "$s" && test "$s" != null &&
	echo "{\"prompt\":\"The policy\"}" | ca-sample --seed 1 --max-tokens 40 --stop "$s" -m "$M" >cut &&
	test "$(jq -r .completion.finish_reason cut)" = stop &&
	! jq -r .completion.text cut | grep -qF "$s"
'
expect_status 3 'a record without a prompt is an error record, and the others go on' '
	printf "{\"x\":1}\n{\"prompt_tokens\":[1,2]}\nnot json\n" | ca-sample --max-tokens 2 -m "$M" >out 2>err;
	s=$?; test "$(wc -l <out)" = 3 && jq -e ".[0].completion.error" -s out >/dev/null &&
	grep -q "stdin:1:" err && exit $s
'
test_done
