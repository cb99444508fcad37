#!/bin/sh
# ca-profile's compile worker (evaluate_baseline.c), on the CPU with
# torch.compile: a task whose compile baseline is not cached is compiled
# by a second reference while the record's build, loads and checks run
# (phase compile_wait: what was left of it at the first timed loop), and
# its compile baseline is timed there; a cached baseline, --no-compile and
# ca-verify start none; a record that fails verification leaves it
# compiling for the next record of the same task.
. "$(dirname "$0")/test-lib.sh"

ADV=$TESTS_DIR/adversarial
if ! has_torch || ! command -v cc >/dev/null 2>&1 ||
	! "$(ca_python)" -c 'import torch; torch.compile(torch.nn.ReLU())(torch.ones(2))' >/dev/null 2>&1; then
	skip 'the compile worker' 'needs torch with a working torch.compile on the CPU and a C compiler'
	test_done
	exit
fi
C=$TRASH_BASE/candidates
mkdir -p "$C"
for c in honest/relu cheat/zeros; do
	d=$C/$(basename "$c")
	cp -R "$ADV/$c" "$d" && rm -rf "$d/kernels" && mkdir -p "$d/build" &&
		cc -O2 -shared -fPIC -o "$d/build/libkernels.so" "$ADV/cpu/relu_cpu.c"
done
record() { # id task dir
	jq -nc --arg id "$1" --rawfile code "$ADV/tasks/$2.py" --arg dir "$3" '{id: $id, code: $code, candidate: {dir: $dir}}'
}
OPTS="--device cpu --no-sandbox --iters 6 --warmup 1 --seed 3"
CA_EVAL_SPARES=1
export CA_EVAL_SPARES

# One compile for the whole script: torch.compile on two CPUs takes most of a minute.
expect_success 'a new task: compiled beside the checks (through a record that failed them), then timed' '
	CA_CACHE=$PWD/cache && export CA_CACHE &&
	{ record z relu_small "$C/zeros"; record a relu_small "$C/relu"; } | ca-profile --verify $OPTS >out
	[ $? -eq 1 ] && jq -s -e "length == 2 and (.[0].verify.ok | not) and (.[1].profile
		| .ok and .compile_us > 0 and (.baseline_cached | not) and (.phases | has(\"compile_wait\")))" out &&
	record b relu_small "$C/relu" | ca-profile --verify $OPTS >again &&
	jq -e ".profile | .ok and .baseline_cached and .compile_us > 0 and (.phases | has(\"compile_wait\") | not)" again
'

expect_success '--no-compile and ca-verify start no compile worker' '
	CA_CACHE=$PWD/cache && export CA_CACHE &&
	record a relu_mid "$C/relu" | ca-profile --verify --no-compile $OPTS >out &&
	jq -e ".profile | .ok and .compile_us == null and (.phases | has(\"compile_wait\") | not)" out &&
	record a relu_mid "$C/relu" | ca-verify --device cpu --no-sandbox >v &&
	jq -e ".verify | .ok and (.phases | has(\"compile_wait\") | not) and (.phases | has(\"reference_start\"))" v
'
test_done
