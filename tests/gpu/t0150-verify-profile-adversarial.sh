#!/bin/sh
# ca-verify and ca-profile on a GPU: honest candidates (fused elementwise,
# row softmax, reduction) are accepted with their real speedups; every
# candidate in tests/adversarial/cheat is rejected at the stage its
# "expect" file names, or timed honestly; faults do not spoil the records
# after them; count in = count out.
. "$(dirname "$0")/../test-lib.sh"

if ! has_gpu; then
	skip 'adversarial suite on a GPU' 'no GPU here'
	test_done
	exit
fi
if ! has_torch; then
	skip 'adversarial suite on a GPU' 'no torch for the Python runner'
	test_done
	exit
fi

ADV=$TESTS_DIR/adversarial
LOG=${CA_GPU_LOG:-$TRASH_BASE}
mkdir -p "$LOG"
PY=$(ca_python)

# Candidates run in ca-sandbox --gpu. If CUDA does not work in there, say
# so as a failure and go on without the sandbox, so the rest is still tested.
if ca-sandbox --gpu --env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" -- "$PY" -c \
	'import torch; assert torch.cuda.is_available(), "no CUDA in the sandbox"' >"$LOG/sandbox-probe.txt" 2>&1; then
	sandbox_gpu=yes
else
	sandbox_gpu=no
	: "${CA_EVAL_OPTS=--no-sandbox}"
fi
expect_success 'ca-sandbox --gpu lets a candidate use CUDA' '
	test $sandbox_gpu = yes || { tail -n 5 "$LOG/sandbox-probe.txt"; exit 1; }
'
# Records: id, the task's code, the candidate's directory.
records=$TRASH_BASE/records.ndjson
: >"$records"
add() { # id task dir
	jq -nc --arg id "$1" --rawfile code "$ADV/tasks/$2.py" --arg dir "$3" \
		'{id: $id, code: $code, candidate: {dir: $dir}}' >>"$records"
}
for d in "$ADV"/honest/*/ "$ADV"/cheat/*/; do
	d=${d%/}
	name=$(basename "$d")
	case $name in fork_bomb|huge_output|illegal_address|starve) continue ;; esac
	# Without the sandbox these would really do harm: leave them out.
	case $sandbox_gpu.$name in no.write_outside|no.socket) continue ;; esac
	task=$(sed -n 's/^task=//p' "$d/expect")
	add "$(basename "$(dirname "$d")")/$name" "$task" "$d"
done
# The faults, then an honest record that must still pass, in one slot of their own
# (starve first: it takes the GPU's memory, which would fail the other slots' references).
main_records=$records
records=$TRASH_BASE/faults.ndjson
: >"$records"
faults="starve illegal_address huge_output fork_bomb"
if [ $sandbox_gpu = no ]; then
	faults="starve illegal_address"
	skip 'fork bomb, 10 GB output, writes outside, sockets' 'only run inside the sandbox'
fi
for name in $faults; do
	add "cheat/$name" relu "$ADV/cheat/$name"
done
add "honest/relu-after-faults" relu "$ADV/honest/relu"

# Four slots on the one GPU for the many candidates (verify does no timing);
# then the faults and the record after them in one slot (after: a fork bomb
# spends the sandbox uid's process limit, which would starve the others).
expect_success 'ca-verify scores every record (count in = count out)' '
	ca-verify -v -u --gpus 0,0,0,0 --timeout 15 ${CA_EVAL_OPTS:-} <"$main_records" >"$LOG/verified-main.ndjson" 2>"$LOG/verify.err"
	s1=$?
	ca-verify -v -u --timeout 15 ${CA_EVAL_OPTS:-} <"$records" >"$LOG/verified-faults.ndjson" 2>"$LOG/verify-faults.err"
	s2=$?
	cat "$LOG/verified-main.ndjson" "$LOG/verified-faults.ndjson" >"$LOG/verified.ndjson"
	test $s1 -le 1 && test $s2 -le 1 &&
	test "$(cat "$main_records" "$records" | wc -l)" -eq "$(wc -l <"$LOG/verified.ndjson")"
'

# expectation check: prints mismatches, fails when there are any.
check_field() { # field (verify|profile) file
	bad=0
	while read -r line; do
		id=$(printf "%s" "$line" | jq -r .id)
		case $id in honest/relu-after-faults) want=ok ;;
		*) want=$(sed -n "s/^$1=//p" "$ADV/$id/expect") ;; esac
		[ -n "$want" ] || continue
		got=$(printf "%s" "$line" | jq -r ".$1 | if .ok then \"ok\" else .stage end")
		case $want in
		ok) [ "$got" = ok ] ;;
		notok) [ "$got" != ok ] ;;
		*"|"*) case "|$want|" in *"|$got|"*) true ;; *) false ;; esac ;;
		*) [ "$got" = "$want" ] ;;
		esac || { echo "$id: $1 wanted $want, got $got: $(printf "%s" "$line" | jq -c ".$1 | {error, stage}")"; bad=1; }
	done <"$2"
	return $bad
}

expect_success 'each candidate gets the verify outcome its expect file names' '
	check_field verify "$LOG/verified.ndjson"
'

expect_success 'nothing was written outside the sandbox' '
	test ! -e /var/tmp/ca-pwned && test ! -e /etc/ca-pwned
'

# Three slots here too: their timed loops take the GPU's lock in turn.
expect_success 'ca-profile times the verified candidates; cheats in timing are caught' '
	jq -c "select(.verify.ok and .id != \"cheat/gpu_spin\")" "$LOG/verified.ndjson" >"$TRASH_BASE/ok.ndjson" &&
	ca-profile -v -u --gpus 0,0,0 --timeout 30 --iters 20 --no-compile ${CA_EVAL_OPTS:-} <"$TRASH_BASE/ok.ndjson" >"$LOG/profiled.ndjson" 2>"$LOG/profile.err"
	test $? -le 1 &&
	test "$(wc -l <"$TRASH_BASE/ok.ndjson")" -eq "$(wc -l <"$LOG/profiled.ndjson")" &&
	check_field profile "$LOG/profiled.ndjson"
'

# cheat/recognise caches outputs by a few input values: with fresh inputs
# for every call it never hits, so it is timed like honest relu (same task).
# Its cache of 1 GB outputs may outgrow the card (an 80 GB H100, three
# slots): out of memory at stage run, its own doing, gains nothing too.
expect_success 'a candidate that recognises inputs it has seen gains nothing' '
	jq -e -s "(map(select(.id == \"honest/relu\"))[0].profile.candidate_us) as \$h |
		map(select(.id == \"cheat/recognise\"))[0].profile |
		(.ok and .input_sets == .warmup + .iterations and .candidate_us >= 0.5 * \$h) or
		(.ok == false and .stage == \"run\" and (.error | test(\"out of memory\")))" "$LOG/profiled.ndjson"
'
# cheat/ship_peek forces shipped inputs and keeps the output of every input
# file it finds: each timed call's file appears only at its turn.
expect_success 'a candidate that peeks at shipped input files gains nothing' '
	jq -c "select(.id == \"cheat/ship_peek\") | .profile | {ok, stage, inputs_shipped, input_sets, candidate_us, error}" "$LOG/profiled.ndjson" | cut -c1-300 | sed "s/^/# /"
	jq -e -s "(map(select(.id == \"honest/relu\"))[0].profile.candidate_us) as \$h |
		map(select(.id == \"cheat/ship_peek\"))[0].profile |
		.ok and .inputs_shipped and .input_sets > 2 + 3 and .candidate_us >= 0.5 * \$h" "$LOG/profiled.ndjson"
'

# With CUPTI a call is its device window: the host's launch latency before
# the first kernel (60-200 us on the H200, varying by process) is not in
# it, so a one-kernel candidate is timed on its kernel's time; work on a
# side stream is in the window too. cheat/cupti_off hides its matmul from
# CUPTI and spins on the host for half of it (by the window, its host time
# and the events less it, half the call each): the events' span times it.
expect_success 'with CUPTI, one-kernel candidates are timed on their kernels, side streams included; hiding a kernel from CUPTI gains nothing' '
	if ! jq -e -s "map(select(.id == \"honest/relu\"))[0].profile.method | test(\"CUPTI\")" "$LOG/profiled.ndjson" >/dev/null; then
		echo "# no CUPTI windows here (no libca-cupti.so): not checked"; exit 0
	fi
	jq -r "select(.id == \"honest/relu\" or .id == \"honest/matmul\" or .id == \"cheat/side_stream\") | [.id, .profile.candidate_us, .profile.kernel_us, .profile.host_us] | @tsv" "$LOG/profiled.ndjson" | sed "s/^/# /" &&
	jq -e -s "map(select(.id == \"honest/relu\" or .id == \"honest/matmul\" or .id == \"cheat/side_stream\") | .profile) |
		length == 3 and all(.ok and .candidate_us >= 0.98 * .kernel_us and .candidate_us <= 1.05 * .kernel_us + 15)" "$LOG/profiled.ndjson" &&
	jq -c "select(.id == \"cheat/cupti_off\") | .profile | {ok, stage, candidate_us, kernel_us, host_us, error}" "$LOG/profiled.ndjson" | cut -c1-300 | sed "s/^/# /" &&
	jq -e -s "(map(select(.id == \"honest/matmul\"))[0].profile.candidate_us) as \$h |
		map(select(.id == \"cheat/cupti_off\"))[0].profile | .ok and .candidate_us >= 0.95 * \$h" "$LOG/profiled.ndjson"
'

# The bursts (lib/eval/evaluate_burst.c): calls back to back on our clock
# alone, against the reference's on the same inputs. A clock patched by
# less than the half our clock between the worker's lines allows is
# caught by them (1.5x on the matmul, also with its bursts made as cheap
# as they can be); every honest candidate passes them.
expect_success 'clocks patched 2.5x and 1.5x are caught by the bursts; honest candidates pass them' '
	jq -r "select(.profile.clock.burst) | [.id, (.profile.candidate_us // .profile.reported_us), .profile.clock.burst.implied_us, .profile.clock.burst.min_reported_us, .profile.clock.burst.calls, .profile.clock.loops] | @tsv" \
		"$LOG/profiled.ndjson" | sed "s/^/# /"
	jq -e -s "map(select(.id == \"cheat/timer_mild\" or .id == \"cheat/timer_mild_matmul\" or .id == \"cheat/burst_lean\") | .profile) |
		length == 3 and all((.ok | not) and .stage == \"timing\")" "$LOG/profiled.ndjson" >/dev/null &&
	jq -e -s "map(select(.id == \"cheat/timer_mild_matmul\" or .id == \"cheat/burst_lean\") | .profile) |
		all(.error | test(\"calls back to back\"))" "$LOG/profiled.ndjson" >/dev/null &&
	jq -e -s "map(select(.id | startswith(\"honest/\")) | .profile) |
		all(.clock.burst.calls >= 4 and .clock.burst.min_reported_us <= .candidate_us)" "$LOG/profiled.ndjson" >/dev/null
'

# GPU work a candidate leaves queued behind its replies runs on while its
# processes are stopped: the reference waits for the GPU to be idle before
# each timed loop of its own (gpu_linger's 1.5 s kernels), and a
# candidate whose work outlasts the wait is killed and fails (gpu_spin's
# 120 s, alone: its neighbours' loops would wait for it too).
expect_success 'GPU work left queued behind a reply does not slow the reference; work that outlasts the wait fails' '
	jq -c "select(.id == \"cheat/gpu_linger\") | .profile | {ok, eager_us, candidate_us, gpu_wait_s, stage, error}" "$LOG/profiled.ndjson" | cut -c1-300 | sed "s/^/# /"
	jq -e -s "map(select(.id == \"cheat/gpu_linger\"))[0].profile | .ok and .eager_us / .candidate_us < 1.3" "$LOG/profiled.ndjson" >/dev/null &&
	jq -c "select(.id == \"cheat/gpu_spin\" and .verify.ok)" "$LOG/verified.ndjson" >"$TRASH_BASE/spin.ndjson" &&
	test "$(wc -l <"$TRASH_BASE/spin.ndjson")" -eq 1 &&
	ca-profile -v -u --timeout 30 --iters 20 --no-compile ${CA_EVAL_OPTS:-} <"$TRASH_BASE/spin.ndjson" >"$LOG/profiled-spin.ndjson" 2>"$LOG/profile-spin.err"
	jq -c ".profile | {ok, stage, gpu_wait_s, error}" "$LOG/profiled-spin.ndjson" | cut -c1-300 | sed "s/^/# /"
	jq -e ".profile | (.ok | not) and .stage == \"timing\" and (.error | test(\"ran on for more than\"))" "$LOG/profiled-spin.ndjson" >/dev/null
'

# The reward follows the whole verdict: a cheat caught at any stage, by
# verify or by the profile, earns -1 whatever times its record holds, and
# no profile that failed leaves a time where the reward reads one.
expect_success 'every cheat caught by verify or the profile gets reward -1 (the reward gate)' '
	{ jq -c "select(.verify.ok != true)" "$LOG/verified.ndjson"; cat "$LOG/profiled.ndjson"; cat "$LOG/profiled-spin.ndjson" 2>/dev/null; } |
		ca-reward --threshold 0.05 >"$LOG/rewarded.ndjson" 2>"$LOG/reward.err"
	jq -r "[.id, (.verify | if .ok then \"ok\" else .stage end), (.profile // {} | if .ok then \"ok\" else .stage end), .reward.value] | @tsv" \
		"$LOG/rewarded.ndjson" | sed "s/^/# /"
	jq -e -s "map(select(.verify.ok != true or .profile.ok != true)) | all(.reward.value == -1 or .reward.evaluator_fault)" "$LOG/rewarded.ndjson" >/dev/null &&
	jq -e -s "map(select(.profile.ok == false)) | all(has(\"candidate_us\") | not)" "$LOG/profiled.ndjson" >/dev/null
'

expect_success 'honest candidates report speedups and the kernels that ran' '
	jq -e -s "map(select(.id | startswith(\"honest/\")) | .profile) | all(.ok and .candidate_us > 0 and .eager_us > 0 and (.kernels | length) > 0)" "$LOG/profiled.ndjson" &&
	jq -r "select(.id | startswith(\"honest/\")) | [.id, .profile.eager_us, .profile.compile_us, .profile.candidate_us, .profile.cv] | @tsv" "$LOG/profiled.ndjson" >"$LOG/speedups.tsv"
'

test_done
