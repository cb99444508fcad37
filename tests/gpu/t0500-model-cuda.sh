#!/bin/sh
# The policy engine's CUDA forward (lib/model/cuda, first stage) against the CPU
# backend on random Qwen2-shaped checkpoints: per-token log-probs and
# entropies within bf16 tolerance, packed sequences of several lengths.
# Qwen3 checkpoints from transformers as well (q/k RMSNorm per head, head_dim
# not hidden / heads).
. "$(dirname "$0")/../test-lib.sh"

if ! has_gpu; then
	skip 'policy engine CUDA forward' 'no GPU here'
	test_done
	exit 0
fi
if [ ! -x "$CA_BIN/test-model-cuda" ]; then
	skip 'policy engine CUDA forward' 'test-model-cuda not built (make model-cuda needs nvcc)'
	test_done
	exit 0
fi
# tokens.ndjson: sequences of 1, 7, 64 and 300 tokens.
awk 'BEGIN { srand(5); split("1 7 64 300", n, " ");
	for (i = 1; i <= 4; i++) { s = "{\"tokens\":["; for (j = 0; j < n[i]; j++) s = s (j ? "," : "") int(rand() * 8000); print s "]}" } }' \
	>"$TRASH_BASE/tokens.ndjson"
for cfg in "256 4 8192 512" "1024 2 32000 512"; do
	expect_success "CUDA forward matches the CPU within bf16 tolerance (hidden, layers, vocab: ${cfg% *})" '
		test-model_bench model '"$cfg"' >bench.json &&
		test-model-cuda model 0.15 <"$TRASH_BASE/tokens.ndjson" | tee result.json
	'
done
PY=$(ca_python)
if "$PY" -c 'import torch, transformers' 2>/dev/null; then
	# Weights of std 0.05: a forward without the q/k norms moves the first model's
	# log-probs by up to 1.18 (transformers on the CPU, these 300 tokens' kind), far
	# beyond the tolerance, while bf16 alone stays within it.
	for q3 in "--hidden 128 --head-dim 64" "--hidden 256 --head-dim 128 --tied --dtype bfloat16"; do
		expect_success "Qwen3 ($q3): CUDA forward matches the CPU within bf16 tolerance" '
			TRANSFORMERS_VERBOSITY=error "$PY" "$ROOT/lib/py/ca_hf.py" make-model q3 --arch qwen3 --layers 3 \
				--vocab 8192 --std 0.05 --seed 9 '"$q3"' >/dev/null 2>&1 &&
			jq -e ".model_type == \"qwen3\"" q3/config.json >/dev/null &&
			test-model-cuda q3 0.15 <"$TRASH_BASE/tokens.ndjson" | tee result.json
		'
	done
else
	skip 'Qwen3 CUDA forward' 'python3 with torch and transformers not found'
fi
test_done
