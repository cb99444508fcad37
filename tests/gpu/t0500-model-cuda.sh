#!/bin/sh
# The policy engine's CUDA forward (lib/model/cuda, first stage) against the CPU
# backend on random Qwen2-shaped checkpoints: per-token log-probs and
# entropies within bf16 tolerance, packed sequences of several lengths.
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
test_done
