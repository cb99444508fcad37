#!/bin/sh
# The policy engine's CUDA training path (lib/model/cuda) against the CPU backend:
# a training forward, the backward of a weighted log-prob + entropy loss
# (policy) or of a value loss (critic), compared per parameter tensor, and
# two AdamW steps (clipping and weight decay active) compared per tensor;
# packed sequences of 1 to 1100 tokens, tied and untied heads, head_dim 64
# and 128, with and without GQA.
. "$(dirname "$0")/../test-lib.sh"

if ! has_gpu; then
	skip 'policy engine CUDA training' 'no GPU here'
	test_done
	exit 0
fi
if [ ! -x "$CA_BIN/test-train-cuda" ]; then
	skip 'policy engine CUDA training' 'test-train-cuda not built (make model-cuda needs nvcc)'
	test_done
	exit 0
fi
# Sequences of 1, 7, 64, 300 tokens, and a second batch with a 1100-token one.
awk 'BEGIN { srand(5); split("1 7 64 300", n, " ");
	for (i = 1; i <= 4; i++) { s = "{\"tokens\":["; for (j = 0; j < n[i]; j++) s = s (j ? "," : "") int(rand() * 8000); print s "]}" } }' \
	>"$TRASH_BASE/tokens.ndjson"
awk 'BEGIN { srand(6); split("1100 33 129", n, " ");
	for (i = 1; i <= 3; i++) { s = "{\"tokens\":["; for (j = 0; j < n[i]; j++) s = s (j ? "," : "") int(rand() * 8000); print s "]}" } }' \
	>"$TRASH_BASE/long.ndjson"
for cfg in "256 2 4096 1200" "512 1 4096 1200"; do
	for head in policy critic; do
		expect_success "CUDA gradients and AdamW match the CPU ($head; hidden, layers, vocab: ${cfg% *})" '
			test-model_bench model '"$cfg"' >bench.json &&
			test-train-cuda model 0.15 0.05 '"$head"' <"$TRASH_BASE/tokens.ndjson" | tee result.json &&
			test-train-cuda model 0.15 0.05 '"$head"' <"$TRASH_BASE/long.ndjson" | tee -a result.json
		'
	done
done
# The older WMMA tensor-core kernels (lib/model/cuda/attention_wmma.cu; the default is attention_mma.cu).
expect_success 'CUDA gradients match the CPU with CA_CUDA_ATTENTION=wmma (policy; hidden 256)' '
	test-model_bench model 256 2 4096 1200 >bench.json &&
	CA_CUDA_ATTENTION=wmma test-train-cuda model 0.15 0.05 <"$TRASH_BASE/tokens.ndjson" | tee result.json &&
	CA_CUDA_ATTENTION=wmma test-train-cuda model 0.15 0.05 <"$TRASH_BASE/long.ndjson" | tee -a result.json
'
# The fp32 attention kernels (lib/model/cuda/attention_cuda.cu) the same way.
for head in policy critic; do
	expect_success "CUDA gradients match the CPU with CA_CUDA_ATTENTION=fp32 ($head; hidden 256)" '
		test-model_bench model 256 2 4096 1200 >bench.json &&
		CA_CUDA_ATTENTION=fp32 test-train-cuda model 0.15 0.05 '"$head"' <"$TRASH_BASE/tokens.ndjson" | tee result.json &&
		CA_CUDA_ATTENTION=fp32 test-train-cuda model 0.15 0.05 '"$head"' <"$TRASH_BASE/long.ndjson" | tee -a result.json
	'
done
expect_success 'activation recomputation (CA_CUDA_RECOMPUTE=1) gives the same gradients' '
	test-model_bench model 256 2 4096 1200 >bench.json &&
	CA_CUDA_RECOMPUTE=1 test-train-cuda model 0.15 0.05 <"$TRASH_BASE/long.ndjson" | tee result.json
'
# Untied head and head_dim 128 (2 heads, 1 key/value head): a checkpoint written by transformers.
PY=$(ca_python)
if "$PY" -c 'import torch, transformers' 2>/dev/null; then
	expect_success 'CUDA gradients match the CPU (untied head, head_dim 128, fp32 checkpoint from transformers)' '
		"$PY" -c "
import torch, transformers
torch.manual_seed(0)
c = transformers.Qwen2Config(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=2,
    num_key_value_heads=1, vocab_size=4096, max_position_embeddings=1200, tie_word_embeddings=False)
transformers.Qwen2ForCausalLM(c).save_pretrained(\"model\")
" &&
		test-train-cuda model 0.15 0.05 <"$TRASH_BASE/tokens.ndjson" | tee result.json &&
		test-train-cuda model 0.15 0.05 critic <"$TRASH_BASE/long.ndjson" | tee -a result.json &&
		CA_CUDA_ATTENTION=fp32 test-train-cuda model 0.15 0.05 <"$TRASH_BASE/long.ndjson" | tee -a result.json
	'
	expect_success 'CUDA gradients match the CPU (head_dim 16: 4 heads of 16, 2 key/value heads)' '
		"$PY" -c "
import torch, transformers
torch.manual_seed(0)
c = transformers.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=8192, max_position_embeddings=1200, tie_word_embeddings=True)
transformers.Qwen2ForCausalLM(c).save_pretrained(\"h16\")
" &&
		test-train-cuda h16 0.15 0.05 <"$TRASH_BASE/long.ndjson" | tee result.json &&
		CA_CUDA_ATTENTION=fp32 test-train-cuda h16 0.15 0.05 <"$TRASH_BASE/tokens.ndjson" | tee -a result.json
	'
else
	skip 'CUDA gradients (untied head, head_dim 128)' 'python3 with torch and transformers not found'
fi
test_done
