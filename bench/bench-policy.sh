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
set -e
cd "$(dirname "$0")/.."
: "${CA_BIN:=bin}"
py=${CA_PYTHON:-$( [ -x .venv/bin/python3 ] && echo .venv/bin/python3 || echo python3)}
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
