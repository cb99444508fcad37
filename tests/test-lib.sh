# test-lib.sh: the tiny shell test harness every tests/t*.sh sources.
#
#   . "$(dirname "$0")/test-lib.sh"
#   expect_success 'what it checks' 'commands'
#   expect_fail    'what it checks' 'commands'       # non-zero exit
#   expect_status N 'what it checks' 'commands'      # exact exit status
#   skip           'what it checks' 'why'
#   test_done
#
# Each test body runs in a subshell inside a fresh scratch directory
# ($TRASH); cmp_output EXPECTED ACTUAL shows a diff on mismatch.
# CA_BIN names the directory of the binaries under test (bin/ by default).

TEST_NAME=$(basename "$0" .sh)
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
case $TESTS_DIR in */tests/gpu) TESTS_DIR=${TESTS_DIR%/gpu} ;; esac
ROOT=$(cd "$TESTS_DIR/.." && pwd)
: "${CA_BIN:=$ROOT/bin}"
PATH="$CA_BIN:$ROOT/scripts:$PATH"
export PATH CA_BIN ROOT TESTS_DIR
SHARED_DATA=${CA_SHARED_DATA:-$ROOT/../shared/data}
export SHARED_DATA
# torch's precompiled header made in the build, not in the background (a
# maker would outlive the test's scratch directory): a test of the
# background unsets it and waits itself.
CA_BUILD_PCH=wait
export CA_BUILD_PCH
test_passed=0 test_failed=0 test_skipped=0 test_count=0
TRASH_BASE=${TMPDIR:-/tmp}/ca-test.$$.$TEST_NAME
rm -rf "$TRASH_BASE"; mkdir -p "$TRASH_BASE"
trap 'rm -rf "$TRASH_BASE"' EXIT

say() { printf '%s\n' "$*"; }

run_body() {
	test_count=$((test_count + 1))
	TRASH=$TRASH_BASE/$test_count
	mkdir -p "$TRASH"
	( cd "$TRASH" && eval "$1" ) >"$TRASH_BASE/out.$test_count" 2>&1
}

report() { # status desc
	if [ "$1" = ok ]; then
		test_passed=$((test_passed + 1))
		say "ok $test_count - $2"
	else
		test_failed=$((test_failed + 1))
		say "not ok $test_count - $2"
		sed 's/^/#   /' "$TRASH_BASE/out.$test_count" | head -n 60
	fi
}

expect_success() {
	if run_body "$2"; then report ok "$1"; else report fail "$1 (exit $?)"; fi
}

expect_fail() {
	if run_body "$2"; then report fail "$1 (unexpected success)"; else report ok "$1"; fi
}

expect_status() {
	run_body "$3"
	got=$?
	if [ "$got" -eq "$1" ]; then report ok "$2"; else report fail "$2 (exit $got, wanted $1)"; fi
}

skip() {
	test_count=$((test_count + 1))
	test_skipped=$((test_skipped + 1))
	say "ok $test_count # skip $1: $2"
}

cmp_output() {
	if ! cmp -s "$1" "$2"; then
		echo "output differs: $1 vs $2"
		diff -u "$1" "$2" | head -n 40
		return 1
	fi
}

# has_gpu: true when an NVIDIA GPU is usable here.
has_gpu() {
	command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU
}

# gpu_count: how many NVIDIA GPUs are usable here (0 without any).
gpu_count() {
	if has_gpu; then nvidia-smi -L 2>/dev/null | grep -c '^GPU'; else echo 0; fi
}

# ca_python: the Python interpreter the torch side uses (see ca(7)).
ca_python() {
	if [ -n "$CA_PYTHON" ]; then echo "$CA_PYTHON"
	elif [ -x "$ROOT/.venv/bin/python3" ]; then echo "$ROOT/.venv/bin/python3"
	else echo python3; fi
}
has_torch() { "$(ca_python)" -c 'import torch' >/dev/null 2>&1; }

test_done() {
	say "# $TEST_NAME: $test_passed passed, $test_failed failed, $test_skipped skipped"
	if [ -n "$CA_TEST_RESULTS" ]; then
		echo "$test_passed $test_failed $test_skipped" >>"$CA_TEST_RESULTS"
	fi
	[ "$test_failed" -eq 0 ]
}
