#!/bin/sh
# Two GPUs (issue 8): ca-ppo-step --device cuda over two ranks (ca-launch
# --gpus 0,1, NCCL all-reduce of gradients) gives the weights of one rank on
# the whole batch within bf16 noise; step throughput (update_seconds) for
# one and two GPUs is printed. Skips with a message below two GPUs.
. "$(dirname "$0")/../test-lib.sh"

ngpus=$(gpu_count)
if [ "$ngpus" -lt 2 ]; then
	skip 'data-parallel ca-ppo-step over two GPUs' "needs 2 GPUs, this machine has $ngpus"
	test_done
	exit
fi
LOG=${CA_GPU_LOG:-$TRASH_BASE}
mkdir -p "$LOG"
export NCCL_NVLS_ENABLE=0

# Training: one rank with the whole batch against two ranks with half each
# (32 sequences of 128 to 500 tokens; the checkpoint takes 512 positions).
awk 'BEGIN { srand(3); for (i = 0; i < 32; i++) { n = 128 + i * 12; t = ""; m = "";
	for (j = 0; j < n; j++) { t = t (j ? "," : "") int(rand() * 8000); m = m (j ? "," : "") (j < 16 ? 0 : 1) }
	printf "{\"id\":\"s%d\",\"tokens\":[%s],\"mask\":[%s],\"reward\":%d}\n", i, t, m, i % 4 } }' \
	>"$TRASH_BASE/tokens.ndjson"
expect_success 'ca-ppo-step on two GPUs through NCCL gives one GPU'"'"'s weights (bf16 noise)' '
	test-model_bench m 1024 4 8192 512 >/dev/null &&
	ca-logprob -m m --device cuda "$TRASH_BASE/tokens.ndjson" |
		jq -c ".advantages = [.mask[] * (.reward - 1.5)]" >batch &&
	ca-ppo-step -m m -o one --device cuda --mini-batches 2 --lr 1e-4 batch >one.json &&
	ca-ppo-step -m m -o again --device cuda --mini-batches 2 --lr 1e-4 batch >again.json &&
	ca-launch -n 2 --gpus 0,1 -- ca-ppo-step -m m -o two --device cuda --mini-batches 2 --lr 1e-4 batch >two.json &&
	jq -e ".ranks == 2" two.json &&
	test-st_compare again one 1 | tail -n 1 | sed "s/^/same GPU step twice: /" | tee -a "$LOG/nccl.txt" &&
	test-st_compare two one 5e-3 | tail -n 1 | sed "s/^/two ranks vs one: /" | tee -a "$LOG/nccl.txt" &&
	jq -r "\"update_seconds: \(.update_seconds) with \(.ranks) rank(s)\"" one.json two.json | tee -a "$LOG/nccl.txt"
'
test_done
