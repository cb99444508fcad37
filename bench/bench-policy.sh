#!/bin/sh
# bench-policy.sh: CPU throughput of the policy engine (lib/model, fp32)
# against PyTorch doing the same work in the same run, on random Qwen2-shaped
# checkpoints that tests/unit/model_bench.c writes (tied embeddings, GQA 4:1,
# heads of 64). Times are CPU seconds of one thread (CA_THREADS=1,
# torch.set_num_threads(1)), so a busy machine does not skew the ratio.
#
#   CA_BIN=bin sh bench/bench-policy.sh ["HIDDEN LAYERS VOCAB TOKENS" ...]
#
# Prints one JSON line per configuration: ca's numbers, PyTorch's, and the
# ratios ca / PyTorch (above 1: ca is faster).
#
# On a GPU machine (after make model-cuda):
#
#   CA_BIN=bin sh bench/bench-policy.sh --device cuda [BATCH PROMPT NEW]
#
# times sampling instead: a random Qwen2-0.5B-shaped checkpoint (bf16),
# BATCH prompts (64) of PROMPT pseudo-random tokens (32), NEW tokens (128)
# each, greedy, no end token; ca's GPU sampler (test-sample_bench, which
# also times top-p 0.9 sampling) against transformers' generate in bf16 on
# the same GPU. Prints one JSON line with both and the ratio.
set -e
cd "$(dirname "$0")/.."
: "${CA_BIN:=bin}"
py=${CA_PYTHON:-$( [ -x .venv/bin/python3 ] && echo .venv/bin/python3 || echo python3)}
if [ "$1" = --device ] && [ "$2" = cuda ]; then
	shift 2
	dir=${TMPDIR:-/tmp}/ca-bench-policy.$$
	trap 'rm -rf "$dir"' EXIT
	TRANSFORMERS_VERBOSITY=error "$py" lib/py/ca_rl_ref.py init "$dir/model" --shape 0.5b --dtype bfloat16
	ca=$("$CA_BIN/test-sample_bench" "$dir/model" "${1:-64}" "${2:-32}" "${3:-128}")
	pt=$(TRANSFORMERS_VERBOSITY=error "$py" lib/py/ca_sample_ref.py bench "$dir/model" \
		--batch "${1:-64}" --prompt "${2:-32}" --new "${3:-128}")
	jq -nc --argjson ca "$ca" --argjson pt "$pt" '{ca: $ca, torch: $pt,
		ratio_greedy: ($ca.greedy.tokens_per_s / $pt.tokens_per_s)}'
	exit 0
fi
[ $# -gt 0 ] || set -- "256 4 8192 512" "512 8 32000 1024"
dir=${TMPDIR:-/tmp}/ca-bench-policy.$$
trap 'rm -rf "$dir"' EXIT
for cfg in "$@"; do
	set -- $cfg
	ca=$(CA_THREADS=1 "$CA_BIN/test-model_bench" "$dir" "$1" "$2" "$3" "$4")
	if "$py" -c 'import torch, transformers' 2>/dev/null; then
		pt=$(TRANSFORMERS_VERBOSITY=error "$py" lib/py/ca_hf.py bench "$dir" "$4" 2>/dev/null)
	else
		pt=null
	fi
	jq -nc --argjson ca "$ca" --argjson pt "$pt" '{ca: $ca, torch: $pt} +
		if $pt == null then {} else {ratio: {
			forward: ($ca.forward_tokens_per_s / $pt.forward_tokens_per_s),
			train: ($ca.train_tokens_per_s / $pt.train_tokens_per_s),
			sample: ($ca.sample_tokens_per_s / $pt.sample_tokens_per_s)}} end'
done
