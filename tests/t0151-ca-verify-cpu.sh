#!/bin/sh
# ca-verify on the CPU (--device cpu): the record contract, the ad-hoc
# form, the fallback policy, the comparator's rules and fault handling,
# with the adversarial candidates of tests/adversarial run on a C stand-in
# for their CUDA kernel. Candidates run without ca-sandbox here (the
# sandbox has its own tests); the GPU suite runs them sandboxed.
. "$(dirname "$0")/test-lib.sh"

ADV=$TESTS_DIR/adversarial

expect_status 2 'a directory without model.py is a usage error' '
	mkdir ws && ca-verify ws 2>err; s=$?; grep -q "no model.py" err; exit $s
'
expect_status 2 'a directory without model_new.py is a usage error' '
	mkdir ws && cp "$ADV/tasks/relu_small.py" ws/model.py && ca-verify ws 2>err; s=$?; grep -q "no model_new.py" err; exit $s
'
expect_status 2 'a workspace directory must be the only argument' '
	mkdir a b && ca-verify a b
'
expect_status 2 'an unknown device is refused' 'ca-verify --device tpu </dev/null'
expect_status 2 'a bad GPU list is refused' 'ca-verify --gpus 0,x </dev/null'
expect_success 'no input, no output' 'ca-verify --device cpu --no-sandbox </dev/null >out && test ! -s out'

if ! has_torch; then
	skip 'ca-verify on CPU candidates' 'no torch for the Python runner (make deps)'
	test_done
	exit
fi
if ! command -v cc >/dev/null 2>&1; then
	skip 'ca-verify on CPU candidates' 'no C compiler for the CPU kernel'
	test_done
	exit
fi

# prep KIND/NAME: a copy of the candidate with its CUDA kernel replaced by the C stand-in.
C=$TRASH_BASE/candidates
mkdir -p "$C"
prep() {
	d=$C/$(basename "$1")
	rm -rf "$d"
	cp -R "$ADV/$1" "$d" && rm -rf "$d/kernels" && mkdir -p "$d/build" &&
		cc -shared -fPIC -o "$d/build/libkernels.so" "$ADV/cpu/relu_cpu.c"
}
record() { # id task dir
	jq -nc --arg id "$1" --rawfile code "$ADV/tasks/$2.py" --arg dir "$3" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
}
for c in honest/relu cheat/torch_fallback cheat/segfault cheat/sleep_forever cheat/memoise cheat/zeros \
	cheat/mutate_input cheat/compile_fallback cheat/fp16_output; do
	prep "$c"
done
mkdir -p "$C/noweights"
printf '%s\n' 'import torch' 'import torch.nn as nn' 'class Model(nn.Module):' \
	'    def __init__(self):' '        super().__init__()' '        self.lin = nn.Linear(4, 4)' \
	'    def forward(self, x):' '        return self.lin(x)' \
	'def get_inputs():' '    return [torch.randn(2, 4)]' 'def get_init_inputs():' '    return []' \
	>"$C/noweights/model.py"
printf '%s\n' 'import torch.nn as nn' 'class ModelNew(nn.Module):' \
	'    def __init__(self):' '        super().__init__()' '        self.weight = nn.Parameter(nn.Linear(4, 4).weight.detach())' \
	'    def forward(self, x):' '        return x' >"$C/noweights/model_new.py"

R=$TRASH_BASE/records.ndjson
{
	record honest/relu relu_small "$C/relu"
	echo '{"id": "malformed", '
	echo '{"id": "nocode", "candidate": {"dir": "/nonexistent"}}'
	record torch_fallback relu_small "$C/torch_fallback"
	record segfault relu_small "$C/segfault"
	record honest/relu-after-crash relu_small "$C/relu"
	record sleep_forever relu_small "$C/sleep_forever"
	record memoise relu_small "$C/memoise"
	record zeros-on-tiny tiny "$C/zeros"
	record mutate_input relu_small "$C/mutate_input"
	record compile_fallback relu_small "$C/compile_fallback"
	record fp16_output relu_small "$C/fp16_output"
	jq -nc --rawfile code "$C/noweights/model.py" --rawfile new "$C/noweights/model_new.py" \
		'{id: "noweights", code: $code, candidate: {files: {"model_new.py": $new}}}'
	jq -nc --rawfile code "$C/noweights/model.py" '{id: "badfiles", code: $code, candidate: {files: {"../model_new.py": "x"}}}'
} >"$R"

expect_status 3 'a mixed stream: every record scored, malformed lines reported, exit 3' '
	ca-verify --device cpu --no-sandbox --timeout 8 --seed 42 "$R" >"$TRASH_BASE/out.ndjson" 2>err; s=$?
	cat err
	test "$(wc -l <"$R")" -eq "$(wc -l <"$TRASH_BASE/out.ndjson")" || { echo count differs; exit 9; }
	grep -q "records.ndjson:2: " err || { echo no position for the malformed line; exit 9; }
	exit $s
'

outcome() { # id -> "ok" or the failing stage
	jq -r --arg id "$1" 'select(.id == $id) | .verify | if .ok then "ok" else .stage end' "$TRASH_BASE/out.ndjson"
}
pick() { jq -c --arg id "$1" 'select(.id == $id)' "$TRASH_BASE/out.ndjson"; }
check() { # id wanted
	expect_success "$1: $2" "test \"\$(outcome '$1')\" = '$2' || { jq -c --arg id '$1' 'select(.id == \$id) | .verify | {stage, error}' \"$TRASH_BASE/out.ndjson\"; exit 1; }"
}
check honest/relu ok
expect_success 'malformed line: an error record in its place' '
	sed -n 2p "$TRASH_BASE/out.ndjson" | jq -e ".error.line == 2"
'
check nocode input
check torch_fallback policy
check segfault crash
check honest/relu-after-crash ok
check sleep_forever timeout
check memoise compare
check zeros-on-tiny compare
check mutate_input run
check compile_fallback policy
check fp16_output compare
check noweights weights
check badfiles input
expect_success 'a passing record carries seed, checks, errors and tolerances' '
	pick honest/relu | jq -e ".verify | .seed == 42 and .checks == 5 and .checks_passed == 5 and .max_abs_err == 0 and .atol == 0.01 and .rtol == 0.01 and .device == \"cpu\" and .gpu_index == null"
'
expect_success 'the policy failure names the operation and the line' '
	pick torch_fallback | jq -e ".verify.error | test(\"aten::relu at model_new.py:[0-9]+\")"
'
expect_success 'the weights failure lists the mismatched keys' '
	pick noweights | jq -e ".verify.error | test(\"missing in ModelNew: lin.weight, lin.bias; not in the reference: weight\")"
'
expect_success 'other fields pass through unchanged' '
	pick honest/relu | jq -e ".candidate.dir | endswith(\"/relu\")"
'

P=$TRASH_BASE/pool.ndjson
{
	record a relu_small "$C/relu"
	record b relu_small "$C/segfault"
	record c relu_small "$C/relu"
} >"$P"
expect_status 1 'a pool of two CPU slots keeps input order' '
	ca-verify --device cpu --no-sandbox --gpus 0,1 "$P" >out; s=$?
	test "$(jq -r .id out | tr "\n" " ")" = "a b c " || exit 9
	test "$(jq -r ".verify.ok" out | tr "\n" " ")" = "true false true " || exit 9
	exit $s
'
expect_success 'the ad-hoc form with -H prints a summary' '
	cp "$ADV/tasks/relu_small.py" "$C/relu/model.py" &&
	ca-verify -H --device cpu --no-sandbox --checks 2 "$C/relu" >human &&
	grep -q "^relu: PASS 2/2 checks" human
'
# CA_PYTHON=.venv/bin/python3 names the interpreter from where the command
# runs; the workers start elsewhere, so it is made absolute first.
py=$(ca_python)
case $py in */*) ;; *) py=$(command -v "$py") ;; esac
expect_success 'a relative CA_PYTHON is taken from the directory the command runs in' '
	rel=$(realpath -s --relative-to=. "$py") && case $rel in /*) exit 9 ;; esac &&
	CA_PYTHON=$rel ca-verify -H --device cpu --no-sandbox --checks 1 "$C/relu" >human 2>err ||
		{ cat err; exit 1; }
	grep -q "^relu: PASS 1/1 checks" human
'
# Evaluator faults: nothing of the candidate's ran, so the record says
# nothing of it: verify.ok null, evaluator_fault, exit 4, the real cause.
expect_status 4 'no GPU: one line at once, every record an evaluator fault (ok null), no worker started' '
	printf "%s\n" "{\"id\": \"a\"}" "{\"id\": \"b\"}" | CUDA_VISIBLE_DEVICES= ca-verify >out 2>err; s=$?
	test "$(wc -l <err)" = 1 && grep -q "no GPU is visible" err &&
	jq -e -s "length == 2 and all(.[]; .verify.ok == null and .verify.stage == \"gpu\" and .verify.evaluator_fault)" out >/dev/null &&
	printf "%s\n" "{\"id\": \"a\"}" | CUDA_VISIBLE_DEVICES= ca-profile --verify 2>/dev/null |
		jq -e ".verify.ok == null and .profile.ok == null and .profile.evaluator_fault" >/dev/null && exit $s
'
mkdir -p "$C/fakepy"
printf '%s\n' '#!/bin/sh' 'echo "ModuleNotFoundError: No module named '"'"'torch'"'"'" >&2' 'exit 1' >"$C/fakepy/python3"
chmod +x "$C/fakepy/python3"
expect_status 4 'the reference cannot run (no torch): an evaluator fault naming the cause' '
	record honest/relu relu_small "$C/relu" | CA_PYTHON="$C/fakepy/python3" ca-verify --device cpu --no-sandbox >out 2>/dev/null; s=$?
	jq -c ".verify | {ok, stage, error}" out | sed "s/^/# /"
	jq -e ".verify | .ok == null and .evaluator_fault and .stage == \"reference\" and (.error | test(\"No module named .torch\"))" out >/dev/null &&
	exit $s
'
if [ "$(id -u)" = 0 ] && ca-sandbox --help >/dev/null 2>&1; then
	# An interpreter under a directory the sandbox user cannot enter.
	mkdir -p "$TRASH_BASE/private" && chmod 700 "$TRASH_BASE/private" &&
		ln -s "$(dirname "$(dirname "$(ca_python)")")" "$TRASH_BASE/private/venv"
	expect_status 4 'the sandbox cannot run the interpreter: an evaluator fault that says why' '
		record honest/relu relu_small "$C/relu" |
			CA_PYTHON="$TRASH_BASE/private/venv/bin/python3" ca-verify --device cpu >out 2>/dev/null; s=$?
		jq -c ".verify | {ok, stage, error}" out | sed "s/^/# /"
		jq -e ".verify | .ok == null and .evaluator_fault and (.stage == \"start\" or .stage == \"sandbox\")" out >/dev/null &&
		exit $s
	'
	# What decides how fast torch runs reaches the sandboxed candidate as the
	# reference has it; the rest of the environment does not. The
	# interpreter says what it got when it runs as the sandbox's user.
	expect_status 4 'the sandboxed candidate gets the reference'"'"'s CUDA_LAUNCH_BLOCKING and thread count, nothing else' '
		mkdir -p "$TRASH_BASE/envpy/bin" && py=$TRASH_BASE/envpy/bin/python3 &&
		printf "#!/bin/sh\nif [ \"\$(id -u)\" != 0 ]; then\n" >"$py" &&
		printf "echo \"sandboxed: CLB=\${CUDA_LAUNCH_BLOCKING-unset} OMP=\${OMP_NUM_THREADS-unset} OTHER=\${CA_TEST_NOT_PASSED-unset}\" >&2; exit 3\nfi\n" >>"$py" &&
		printf "exec \"%s\" \"\$@\"\n" "$(ca_python)" >>"$py" && chmod 755 "$py" &&
		record honest/relu relu_small "$C/relu" | CUDA_LAUNCH_BLOCKING=1 OMP_NUM_THREADS=2 CA_TEST_NOT_PASSED=1 \
			CA_PYTHON=$py ca-verify --device cpu >out 2>/dev/null; s=$?
		jq -c ".verify | {ok, stage, error}" out | sed "s/^/# /"
		jq -e ".verify.error | test(\"sandboxed: CLB=1 OMP=2 OTHER=unset\")" out >/dev/null && exit $s
	'
else
	skip 'the sandbox cannot run the interpreter' 'needs root and ca-sandbox'
	skip 'the sandboxed candidate gets the reference'"'"'s settings' 'needs root and ca-sandbox'
fi
test_done
