#!/bin/sh
# Two GPUs (issue 8): the evaluation pool over --gpus 0,1 (data-parallel
# training through NCCL is t0801). Skips with a message on a machine with
# fewer than two GPUs; `make check-gpu` on an nvidia-h200-x2 machine runs it.
#   - 200 candidate records (honest and adversarial, faults included)
#     through ca-verify --gpus 0,1 | ca-profile --gpus 0,1: every record
#     comes out once and in order, each GPU did about half, the honest
#     candidates pass on both GPUs, and the timings of the same candidate
#     on GPU 0 and GPU 1 agree within 2% (median over its copies);
#     throughput against --gpus 0 alone (on every fourth round, 50
#     records, so the test fits a 10-minute slot) is printed as records/s.
. "$(dirname "$0")/../test-lib.sh"

ngpus=$(gpu_count)
if [ "$ngpus" -lt 2 ]; then
	skip 'evaluation pool on two GPUs' "needs 2 GPUs, this machine has $ngpus"
	test_done
	exit
fi
if ! has_torch; then
	skip 'evaluation pool on two GPUs' 'no torch for the Python runner'
	test_done
	exit
fi
ADV=$TESTS_DIR/adversarial
LOG=${CA_GPU_LOG:-$TRASH_BASE}
mkdir -p "$LOG"
export NCCL_NVLS_ENABLE=0

# 200 records: 40 rounds of four honest candidates and one fault.
rec() { jq -nc --arg id "$1" --rawfile code "$ADV/tasks/$2.py" --arg dir "$ADV/$3" \
	'{id: $id, code: $code, candidate: {dir: $dir}}'; }
i=0
: >"$TRASH_BASE/pool.ndjson"
for fault in zeros segfault illegal_address constant; do
	for k in $(seq 10); do
		i=$((i + 1))
		{ rec "relu.$i" relu_small honest/relu; rec "softmax.$i" softmax honest/softmax
		  rec "sum.$i" sum honest/sum; rec "matmul.$i" matmul honest/matmul
		  rec "$fault.$i" relu_small "cheat/$fault"; } >>"$TRASH_BASE/pool.ndjson"
	done
done

expect_success 'the pool over two GPUs: 200 records once and in order, each GPU about half, faults contained' '
	s=$(date +%s) &&
	ca-verify --gpus 0,1 "$TRASH_BASE/pool.ndjson" | ca-profile --gpus 0,1 >"$LOG/pool2.ndjson"
	t2=$(( $(date +%s) - s )) &&
	echo "two GPUs: 200 records in $t2 s" | tee "$LOG/pool-throughput.txt" &&
	test "$(wc -l <"$LOG/pool2.ndjson")" -eq 200 &&
	jq -r .id "$TRASH_BASE/pool.ndjson" >ids.in && jq -r .id "$LOG/pool2.ndjson" >ids.out && cmp -s ids.in ids.out &&
	jq -s -e "[.[] | .verify.gpu_index] | (map(select(. == 0)) | length) as \$a |
		(map(select(. == 1)) | length) as \$b | \$a >= 70 and \$b >= 70" "$LOG/pool2.ndjson" &&
	jq -s -e "map(select(.id | test(\"^(relu|softmax|sum|matmul)\"))) | all(.verify.ok and .profile.ok)" \
		"$LOG/pool2.ndjson" &&
	jq -s -e "map(select(.id | test(\"^(zeros|segfault|illegal_address|constant)\"))) | all(.verify.ok | not)" \
		"$LOG/pool2.ndjson"
'
expect_success 'the same candidate times alike on GPU 0 and GPU 1 (medians within 2%)' '
	jq -s -e "map(select(.profile.ok)) | group_by(.id | sub(\"[.][0-9]+$\"; \"\")) | map(
		(map(select(.profile.gpu_index == 0) | .profile.candidate_us) | sort | .[length / 2 | floor]) as \$a |
		(map(select(.profile.gpu_index == 1) | .profile.candidate_us) | sort | .[length / 2 | floor]) as \$b |
		((\$a - \$b) | fabs) / \$a) | . as \$d | (\$d | tostring | stderr) | \$d | all(. < 0.02)" "$LOG/pool2.ndjson"
'
expect_success 'one GPU alone, for the throughput ratio (records/s, every fourth round)' '
	awk "NR % 20 >= 1 && NR % 20 <= 5" "$TRASH_BASE/pool.ndjson" >quarter.ndjson &&
	s=$(date +%s) &&
	ca-verify --gpus 0 quarter.ndjson | ca-profile --gpus 0 >"$LOG/pool1.ndjson"
	t1=$(( $(date +%s) - s )) &&
	test "$(wc -l <"$LOG/pool1.ndjson")" -eq 50 &&
	echo "one GPU: 50 records in $t1 s" | tee -a "$LOG/pool-throughput.txt" &&
	awk "/two GPUs/ { r2 = 200 / \$(NF - 1) } /one GPU/ { r1 = 50 / \$(NF - 1) }
		END { printf \"records/s: two GPUs %.3f, one GPU %.3f, ratio %.2f\\n\", r2, r1, r2 / r1 }" \
		"$LOG/pool-throughput.txt" | tee -a "$LOG/pool-throughput.txt"
'
test_done

