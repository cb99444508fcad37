#!/bin/sh
# The policy engine on the GPU as the commands use it: ca-sample and
# ca-logprob with --device cuda (lib/model/cuda/model_cuda_sample.cu and the CUDA
# forward, opened from libca-model-cuda.so) against the CPU backend and
# transformers, on tiny random Qwen2 checkpoints built by lib/py/ca_hf.py.
# --fp32 greedy decoding equals the CPU's and transformers' token for token;
# bf16 greedy picks tokens within bf16 noise of the fp32 argmax; log-probs
# within bf16 tolerance of the CPU's; continuous batching (more records than
# slots, prompts of 1 to 200 tokens) gives each record its own answer.
. "$(dirname "$0")/../test-lib.sh"

if ! has_gpu; then
	skip 'ca-sample --device cuda' 'no GPU here'
	test_done
	exit 0
fi
if [ ! -f "${CA_MODEL_CUDA_LIB:-$CA_BIN/libca-model-cuda.so}" ]; then
	skip 'ca-sample --device cuda' 'libca-model-cuda.so not built (make model-cuda needs nvcc)'
	test_done
	exit 0
fi
if ! has_torch || ! "$(ca_python)" -c 'import transformers, tokenizers' >/dev/null 2>&1; then
	skip 'ca-sample --device cuda' 'torch/transformers not installed (make deps)'
	test_done
	exit 0
fi
# note: measurements for the device logs (CA_TEST_NOTES names a file to append to).
# Also on stdout, so a failing check shows what it measured.
note() { echo "$*"; if [ -n "$CA_TEST_NOTES" ]; then echo "$TEST_NAME: $*" >>"$CA_TEST_NOTES"; fi; }
HF="$(ca_python) $ROOT/lib/py/ca_hf.py"
REF="$(ca_python) $ROOT/lib/py/ca_sample_ref.py"
export HF REF TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
M=$TRASH_BASE/fixture   # tokenizer, tiny tied model, transformers' greedy continuations
B=$TRASH_BASE/big       # untied, 4 layers, hidden 256, vocab 2000, bf16 on disk
# The same shape with weights of std 0.05, for the checks of bf16 against
# fp32: on B's std-0.2 weights rounding the matmul inputs to bf16 alone moves
# log-probs by up to 1.0 (measured on the CPU), beyond any bf16 tolerance;
# at std 0.05 bf16 autocast in transformers moves them by 0.033 while their
# spread stays 0.8 (a wrong kernel still shows). The critic C likewise.
H=$TRASH_BASE/bf16
C=$TRASH_BASE/critic   # hidden 128: heads of 32, the smallest the CUDA forward takes
export M B C H
# The three fixtures at once (each is mostly Python and torch starting up).
$HF sample-fixture "$M" "$TESTS_DIR/data/t0503-corpus.txt" >"$TRASH_BASE/fixture-m.log" 2>&1 &
m=$!
$HF make-model "$B" --layers 4 --hidden 256 --vocab 2000 --std 0.2 --seed 3 --dtype bfloat16 >"$TRASH_BASE/fixture-b.log" 2>&1 &
b=$!
$HF make-model "$C" --critic --layers 2 --hidden 128 --vocab 2000 --std 0.05 --seed 4 --dtype bfloat16 >"$TRASH_BASE/fixture-c.log" 2>&1 &
c=$!
$HF make-model "$H" --layers 4 --hidden 256 --vocab 2000 --std 0.05 --seed 3 --dtype bfloat16 >"$TRASH_BASE/fixture-h.log" 2>&1 &
h=$!
if ! { wait $m && wait $b && wait $c && wait $h; }; then
	cat "$TRASH_BASE"/fixture-*.log
	skip 'ca-sample --device cuda' 'building the fixtures failed'
	test_done
	exit 0
fi
# 24 prompts of 1 to 200 tokens (more records than the 5 slots used below).
awk 'BEGIN { srand(11); for (i = 0; i < 24; i++) { n = 1 + int(rand() * 200); if (i == 3) n = 1
	s = "{\"id\":" i ",\"prompt_tokens\":["; for (j = 0; j < n; j++) s = s (j ? "," : "") int(rand() * 1999); print s "]}" } }' \
	>"$TRASH_BASE/prompts.ndjson"
# The CPU's greedy answers, which two tests compare with.
ca-sample --temperature 0 --max-tokens 40 -m "$B" "$TRASH_BASE/prompts.ndjson" >"$TRASH_BASE/cpu-greedy.ndjson"
ca-sample --temperature 0 --max-tokens 40 -m "$H" "$TRASH_BASE/prompts.ndjson" >"$TRASH_BASE/cpu-greedy-h.ndjson"
CPU_GREEDY=$TRASH_BASE/cpu-greedy.ndjson CPU_GREEDY_H=$TRASH_BASE/cpu-greedy-h.ndjson
export CPU_GREEDY CPU_GREEDY_H

# max_err A B FIELD: the largest |a - b| over records and tokens where both are numbers.
max_err='max_err() { jq -n --slurpfile a "$1" --slurpfile b "$2" --arg f "$3" "
	[range(0; \$a | length) as \$i | range(0; \$a[\$i][\$f] | length) as \$j
	 | select(\$a[\$i][\$f][\$j] != null and \$b[\$i][\$f][\$j] != null)
	 | (\$a[\$i][\$f][\$j] - \$b[\$i][\$f][\$j]) | fabs] | max // 0"; }
below() { awk -v x="$1" -v t="$2" "BEGIN { exit !(x + 0 <= t + 0) }"; }'

expect_success 'bf16 greedy: every token within 0.25 of the fp32 argmax, log-probs within 0.15 of the CPU' '
	'"$max_err"' &&
	ca-sample --device cuda --slots 5 --temperature 0 --max-tokens 40 --token-record -m "$H" \
		"$TRASH_BASE/prompts.ndjson" >gpu &&
	same=$(jq -n --slurpfile a gpu --slurpfile b "$CPU_GREEDY_H" "[range(0; 24) as \$i
		| select(\$a[\$i].completion.tokens == \$b[\$i].completion.tokens)] | length") &&
	$REF margins "$H" <gpu >margins && note "bf16 greedy: identical to the CPU in $same of 24 records; $(cat margins)" &&
	below "$(jq .max_margin margins)" 0.25 &&
	ca-logprob -m "$H" gpu >scored && e=$(max_err gpu scored logprobs) && note "bf16 greedy log-prob max abs err $e" &&
	below "$e" 0.15
'
expect_success 'ca-logprob --device cuda: log-probs, entropies and values within bf16 tolerance of the CPU' '
	'"$max_err"' &&
	jq -c "{id, tokens: .prompt_tokens}" "$TRASH_BASE/prompts.ndjson" >tokens &&
	ca-logprob --entropy -m "$H" tokens >cpu &&
	ca-logprob --device cuda --entropy -m "$H" tokens >gpu &&
	e=$(max_err cpu gpu logprobs) && h=$(max_err cpu gpu entropy) && note "ca-logprob cuda: log-prob $e, entropy $h" &&
	below "$e" 0.15 && below "$h" 0.15 &&
	ca-logprob -m "$C" tokens >cpu &&
	ca-logprob --device cuda -m "$C" tokens >gpu &&
	v=$(max_err cpu gpu values) && note "ca-logprob cuda: values $v" && below "$v" 0.15 &&
	test "$(jq -c ".values[0]" gpu | sort -u)" = 0
'
expect_success 'sampling: reproducible, log-probs at temperature 1 within 0.15 of ca-logprob on the CPU' '
	'"$max_err"' &&
	ca-sample --device cuda --seed 3 --max-tokens 30 --token-record -m "$H" "$TRASH_BASE/prompts.ndjson" >s1 &&
	ca-sample --device cuda --seed 3 --max-tokens 30 --token-record -m "$H" "$TRASH_BASE/prompts.ndjson" >s2 &&
	cmp_output s1 s2 &&
	ca-logprob -m "$H" s1 >scored && e=$(max_err s1 scored logprobs) && note "sampled log-prob max abs err $e" &&
	below "$e" 0.15 &&
	test "$(jq -s "[.[].completion.tokens | length] | add" s1)" -gt 300
'
expect_success 'temperature and top-p: log-probs are those of the renormalised distribution' '
	ca-sample --device cuda --seed 5 --temperature 0.7 --top-p 0.8 --max-tokens 30 -m "$B" \
		"$TRASH_BASE/prompts.ndjson" >s &&
	jq -e -s "[.[].completion.logprobs[]] | (all(. <= 0) and any(. < 0))" s >/dev/null &&
	ca-sample --device cuda --top-p 1e-9 --max-tokens 20 -m "$B" "$TRASH_BASE/prompts.ndjson" >t &&
	ca-sample --device cuda --temperature 0 --max-tokens 20 -m "$B" "$TRASH_BASE/prompts.ndjson" >g &&
	test "$(jq -c .completion.tokens t)" = "$(jq -c .completion.tokens g)" &&
	test "$(jq -s "[.[].completion.logprobs[] | select(. != 0)] | length" t)" = 0
'
expect_success 'stop strings, chat prompts and text prompts through the tokenizer' '
	echo "{\"prompt\":\"The policy\"}" | ca-sample --device cuda --fp32 --seed 1 --max-tokens 40 -m "$M" >full &&
	s=$(jq -r ".completion.text | [scan(\"[a-z]\")][2]" full) && test -n "$s" && test "$s" != null &&
	echo "{\"prompt\":\"The policy\"}" | ca-sample --device cuda --seed 1 --max-tokens 40 --stop "$s" -m "$M" >cut &&
	test "$(jq -r .completion.finish_reason cut)" = stop &&
	! jq -r .completion.text cut | grep -qF "$s" &&
	printf "%s\n" "{\"messages\":[{\"role\":\"user\",\"content\":\"Write a CUDA kernel.\"}]}" |
	ca-sample --device cuda --fp32 --temperature 0 --max-tokens 20 -m "$M" >chat &&
	test "$(jq -c .completion.tokens chat)" = "$(jq -c .completion "$M/ref-generate.ndjson" | sed -n 4p)"
'
expect_status 3 'bad records are error records, in order, and the others are completed' '
	printf "%s\n" "{\"prompt_tokens\":[1,2]}" "{\"prompt_tokens\":[5000]}" "{\"x\":1}" "{\"prompt_tokens\":[3]}" |
	ca-sample --device cuda --max-tokens 3 -m "$B" >out 2>err; s=$?
	cat err; test "$(wc -l <out)" = 4 &&
	test "$(jq -c "[.completion.error != null]" out | tr -d "\n")" = "[false][true][true][false]" && exit $s
'
expect_success '--fp32 greedy matches transformers generate token for token' '
	jq -c "{prompt_tokens}" "$M/ref-generate.ndjson" |
	ca-sample --device cuda --fp32 --temperature 0 --max-tokens 20 --stop-token 2 -m "$M" >out &&
	jq -c .completion.tokens out >ca && jq -c .completion "$M/ref-generate.ndjson" >ref &&
	cmp_output ref ca
'
expect_success '--fp32 greedy equals the CPU token for token, 24 records in 5 slots' '
	ca-sample --device cuda --fp32 --slots 5 --temperature 0 --max-tokens 40 -m "$B" "$TRASH_BASE/prompts.ndjson" >gpu &&
	jq -c "[.id, .completion.tokens]" "$CPU_GREEDY" >a && jq -c "[.id, .completion.tokens]" gpu >b &&
	cmp_output a b
'
# The OpenAI-compatible endpoint with the model on the GPU: a greedy --fp32
# chat answer is the CPU server's token for token with log-probs within 1e-3,
# and a seeded sampled answer is the same twice.
serve() {
	ca-sample --serve 127.0.0.1:0 --max-tokens 24 "$@" -m "$M" >"$TRASH_BASE/serve-$1$2.out" 2>&1 &
	echo $! >>"$TRASH_BASE/servers"
	i=0
	while ! grep -q '"serve"' "$TRASH_BASE/serve-$1$2.out" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	head -n 1 "$TRASH_BASE/serve-$1$2.out" | jq -r .serve.url
}
trap 'kill $(cat "$TRASH_BASE/servers" 2>/dev/null) 2>/dev/null; rm -rf "$TRASH_BASE"' EXIT
GPU_URL=$(serve --device cuda --fp32)
CPU_URL=$(serve --device cpu)
export GPU_URL CPU_URL
chat() {
	curl -sS -H "Content-Type: application/json" -d "{\"model\": \"m\", \"messages\": [{\"role\": \"user\",
		\"content\": \"The policy writes a kernel.\"}], $2}" "$1/chat/completions"
}
expect_success 'ca-sample --serve --device cuda: greedy equals the CPU server, log-probs within 1e-3' '
	chat "$GPU_URL" "\"temperature\": 0" >gpu.json && chat "$CPU_URL" "\"temperature\": 0" >cpu.json &&
	jq -e ".choices[0].token_ids | length > 0" gpu.json &&
	jq -c "[.prompt_token_ids, .choices[0].token_ids]" gpu.json >a &&
	jq -c "[.prompt_token_ids, .choices[0].token_ids]" cpu.json >b && cmp_output b a &&
	jq -n --slurpfile g gpu.json --slurpfile c cpu.json -e "[\$g[0].choices[0].logprobs.content, \$c[0].choices[0].logprobs.content]
		| transpose | map((.[0].logprob - .[1].logprob) | fabs) | max < 1e-3"
'
expect_success 'ca-sample --serve --device cuda: a seeded sampled answer is the same twice' '
	chat "$GPU_URL" "\"seed\": 7, \"temperature\": 1" >s1.json && chat "$GPU_URL" "\"seed\": 7, \"temperature\": 1" >s2.json &&
	jq -c "[.choices[0].token_ids, .choices[0].logprobs.content]" s1.json >a &&
	jq -c "[.choices[0].token_ids, .choices[0].logprobs.content]" s2.json >b && cmp_output a b
'
test_done
