#!/bin/sh
# bf16 checkpoints train as fp32 ones do: the step commands keep fp32 master
# weights in optimizer.safetensors when the model file is narrower, so
# updates smaller than half a bf16 unit (most of them at the paper's lr
# 3e-6) are not rounded away between steps. The model file keeps its dtype
# (transformers loads it as before) and holds the rounding of the master
# copy; a model file replaced since makes the step ignore the master copy,
# with a message; warm (--serve) steps give the cold steps' files.
. "$(dirname "$0")/test-lib.sh"

# A tiny policy in bf16 (polbf), the same weights in fp32 (pol32), a critic
# for the batch's values, and a batch with old log-probs and advantages.
setup='
	ca-toy init --seed 7 start && ca-toy init --critic --seed 8 crit &&
	test-model_train save-as start polbf bf16 && test-model_train save-as polbf pol32 f32 &&
	ca-toy prompts -n 6 --seed 1 | ca-sample -m pol32 --max-tokens 5 --token-record --seed 2 | ca-toy score |
		ca-logprob -m pol32 | ca-logprob -m crit | ca-gae >batch'

# steps CMD START PREFIX: five cold steps from START into PREFIX1..PREFIX5.
steps='steps() {
	cmd=$1; rm -rf "$3"0 && cp -R "$2" "$3"0 &&
	for i in 1 2 3 4 5; do
		$cmd --lr 3e-6 -m "$3"$((i - 1)) -o "$3"$i batch >>"$3".stats || return 1
	done; }'

expect_success 'five ca-ppo-step steps at lr 3e-6 on bf16: master weights equal the fp32 run, the file its rounding' '
	'"$setup"' && '"$steps"' &&
	jq -e ".torch_dtype == \"bfloat16\"" polbf/config.json >/dev/null &&
	steps ca-ppo-step pol32 a && steps ca-ppo-step polbf b &&
	jq -e ".torch_dtype == \"bfloat16\"" b5/config.json >/dev/null &&
	test $(wc -c <b5/model.safetensors) -lt $(wc -c <a5/model.safetensors) &&
	test-model_train save-as b5 master f32 && cmp master/model.safetensors a5/model.safetensors &&
	test-model_train save-as a5 rounded bf16 && cmp rounded/model.safetensors b5/model.safetensors &&
	! cmp -s b5/model.safetensors polbf/model.safetensors &&
	jq -c "del(.seconds, .update_seconds)" a.stats >a.cmp && jq -c "del(.seconds, .update_seconds)" b.stats >b.cmp &&
	cmp_output a.cmp b.cmp'

expect_success 'ca-sft-step and ca-value-step: the same' '
	'"$setup"' && '"$steps"' &&
	test-model_train save-as crit critbf bf16 && test-model_train save-as critbf crit32 f32 &&
	steps ca-sft-step pol32 a && steps ca-sft-step polbf b &&
	test-model_train save-as b5 master f32 && cmp master/model.safetensors a5/model.safetensors &&
	steps ca-value-step crit32 c && steps ca-value-step critbf d &&
	test-model_train save-as d5 master2 f32 && cmp master2/model.safetensors c5/model.safetensors &&
	test-model_train save-as c5 rounded bf16 && cmp rounded/model.safetensors d5/model.safetensors'

expect_success 'an fp32 checkpoint keeps no second copy of its weights' '
	'"$setup"' &&
	ca-ppo-step --lr 3e-6 -m pol32 -o a1 batch >/dev/null && ca-ppo-step --lr 3e-6 -m polbf -o b1 batch >/dev/null &&
	! grep -q "\"master\"" a1/optimizer.safetensors && grep -q "\"master\"" b1/optimizer.safetensors'

expect_success 'a model file replaced under its optimizer state: master ignored with a message, the step goes on' '
	'"$setup"' &&
	ca-ppo-step --lr 3e-6 -m polbf -o b1 batch >/dev/null &&
	ca-toy init --seed 9 other && test-model_train save-as other otherbf bf16 &&
	cp otherbf/model.safetensors b1/model.safetensors &&
	ca-ppo-step --lr 3e-6 -m b1 -o b2 batch >/dev/null 2>err &&
	grep -q "^ca-ppo-step: b1/optimizer.safetensors: fp32 master weights ignored: the model'"'"'s model.embed_tokens.weight is not their rounding (the model file was replaced); training goes on from the model file$" err &&
	test-model_train save-as b2 x f32 2>/dev/null && ! cmp -s x/model.safetensors b1/model.safetensors'

expect_success 'warm (--serve) bf16 steps stay resident and give the cold steps files byte for byte' '
	'"$setup"' &&
	cp -R polbf c0 && cp -R polbf w0 &&
	for i in 1 2 3; do
		ca-ppo-step --lr 3e-6 -m c$((i - 1)) -o c$i batch >>cold || exit 1
		printf "{\"model\":\"w%d\",\"output\":\"w%d\",\"inputs\":[\"batch\"]}\n" $((i - 1)) $i
	done | ca-ppo-step --serve --lr 3e-6 >warm &&
	jq -s -e "map(.warm) == [false, true, true] and map(.status) == [0, 0, 0]" warm >/dev/null &&
	for i in 1 2 3; do
		for f in model.safetensors optimizer.safetensors config.json; do
			cmp c$i/$f w$i/$f || exit 1
		done
	done'

test_done
