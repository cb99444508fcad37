#!/bin/sh
# ca-sft-step, ca-value-step and ca-ppo-step with --device cuda against
# --device cpu on the same batch: the loss (a forward), the gradient norm
# (a backward) and the log-probs of the checkpoint written back (AdamW and
# the copy home) agree within bf16 tolerance; on the toy's Qwen2 checkpoints
# and on Qwen3 ones (q/k norms) from transformers.
. "$(dirname "$0")/../test-lib.sh"

if ! has_gpu; then
	skip 'training steps on the GPU' 'no GPU here'
	test_done
	exit 0
fi
if [ ! -f "$CA_BIN/libca-model-cuda.so" ]; then
	skip 'training steps on the GPU' 'libca-model-cuda.so not built (make model-cuda needs nvcc)'
	test_done
	exit 0
fi
# init_toy, init_qwen3: a policy pol and a critic crit over the toy's 16 tokens.
init_toy='ca-toy init --hidden 256 --layers 2 --seed 5 pol && ca-toy init --critic --hidden 256 --layers 2 --seed 3 crit'
init_qwen3='HF="$(ca_python) $ROOT/lib/py/ca_hf.py" &&
	$HF make-model pol --arch qwen3 --head-dim 128 --hidden 256 --layers 2 --vocab 16 --std 0.05 --seed 5 >/dev/null 2>&1 &&
	$HF make-model crit --critic --arch qwen3 --head-dim 128 --hidden 256 --layers 2 --vocab 16 --std 0.05 --seed 3 \
		>/dev/null 2>&1 && jq -e ".model_type == \"qwen3\"" pol/config.json crit/config.json >/dev/null'
archs=toy
if has_torch && "$(ca_python)" -c 'import transformers' 2>/dev/null; then
	archs="toy qwen3"
else
	skip 'training steps on the GPU (Qwen3)' 'torch/transformers not installed (make deps)'
fi
make_batch='
	printf "%s\n" "{\"tokens\":[0,3,3,4,5,6,7,3,4],\"mask\":[0,0,1,1,1,1,1,1,1],\"reward\":1}" \
		"{\"tokens\":[0,4,4,5,6,7,8],\"mask\":[0,0,1,1,0,1,1],\"reward\":0}" \
		"{\"tokens\":[0,5,9,9,2],\"mask\":[0,0,1,1,1],\"reward\":1}" |
	ca-logprob -m pol | ca-logprob -m crit | ca-gae >batch'
# same FIELD TOL: the two stats records agree on FIELD within TOL (relative above 1).
same='jq -s -e --arg f "$1" --argjson tol "$2" ".[0][\$f] as \$a | .[1][\$f] as \$b | (\$a - \$b | fabs) <= \$tol * ([1, (\$a | fabs)] | max)" cpu.json gpu.json'

for arch in $archs; do
init=$init_toy
[ $arch = qwen3 ] && init=$init_qwen3
for step in sft ppo value; do
	model=pol fields="loss grad_norm"
	[ $step = value ] && model=crit fields="vf_loss grad_norm"
	[ $step = ppo ] && fields="loss pg_loss grad_norm"
	expect_success "ca-$step-step --device cuda agrees with --device cpu ($arch)" '
		'"$init"' && '"$make_batch"' &&
		ca-'$step'-step -m '$model' -o out-cpu --lr 1e-3 --device cpu <batch >cpu.json &&
		ca-'$step'-step -m '$model' -o out-gpu --lr 1e-3 --device cuda <batch >gpu.json &&
		cat cpu.json gpu.json &&
		for f in '"$fields"'; do set -- $f 0.03; '"$same"' || exit 1; done &&
		jq -s -e ".[0].step == .[1].step and .[0].tokens == .[1].tokens" cpu.json gpu.json &&
		test -f out-gpu/optimizer.safetensors &&
		ca-logprob -m out-cpu <batch | jq -c "[.logprobs // .values]" >a &&
		ca-logprob -m out-gpu <batch | jq -c "[.logprobs // .values]" >b &&
		paste -d" " a b | jq -s -e -R "split(\"\n\") | map(select(length > 0) | split(\" \") | map(fromjson))
			| map(.[0][0] as \$x | .[1][0] as \$y | [\$x, \$y] | transpose | map((.[0] // 0) - (.[1] // 0) | fabs) | max) | max < 0.05"
	'
done
done
expect_success '--device cuda without the backend exits 4 with a message' '
	ca-toy init --hidden 256 --seed 5 pol &&
	echo "{\"tokens\":[0,3,3,4],\"mask\":[0,0,1,1]}" >batch &&
	CA_MODEL_CUDA_LIB=/nonexistent/libca-model-cuda.so ca-sft-step -m pol -o p2 --device cuda <batch 2>err; s=$?
	cat err; [ $s -eq 4 ] && grep -q "device cuda" err'
test_done
