#!/bin/sh
# ca-verify and ca-profile on the CPU: the reference and the candidate draw
# the inputs each in its own process under the check's seed; a get_inputs()
# that does not repeat under its seed is caught by the digests and the
# inputs are then shipped as files; ca-profile --verify adds both objects
# from one run; -v prints each record's phases; an evaluation server
# (--serve) scores the records of commands that find its socket.
. "$(dirname "$0")/test-lib.sh"

ADV=$TESTS_DIR/adversarial
if ! has_torch || ! command -v cc >/dev/null 2>&1; then
	skip 'inputs drawn in each process' 'needs torch for the Python runner and a C compiler'
	test_done
	exit
fi
C=$TRASH_BASE/relu
cp -R "$ADV/honest/relu" "$C" && rm -rf "$C/kernels" && mkdir -p "$C/build" &&
	cc -O2 -shared -fPIC -o "$C/build/libkernels.so" "$ADV/cpu/relu_cpu.c"
# The same task with inputs from os.urandom: not repeatable under a seed.
sed 's/^    x = torch.randn(batch_size, dim)$/    import os; x = torch.frombuffer(bytearray(os.urandom(4 * batch_size * dim)), dtype=torch.int32).reshape(batch_size, dim).float()/' \
	"$ADV/tasks/relu_small.py" >"$TRASH_BASE/urandom.py"
grep -q urandom "$TRASH_BASE/urandom.py" || { echo "the task edit failed"; exit 1; }
record() { # id task-file
	jq -nc --arg id "$1" --rawfile code "$2" --arg dir "$C" '{id: $id, code: $code, candidate: {dir: $dir}}'
}
{
	record seeded "$ADV/tasks/relu_small.py"
	record urandom "$TRASH_BASE/urandom.py"
} >"$TRASH_BASE/in.ndjson"
export CA_CACHE=$TRASH_BASE/cache
OPTS="--device cpu --no-sandbox"

expect_success 'seeded inputs are drawn by each process; urandom ones are shipped, and both pass' '
	ca-verify $OPTS --checks 2 "$TRASH_BASE/in.ndjson" >out &&
	jq -e -s "map(.verify.ok) == [true, true]" out &&
	jq -e -s ".[0].verify | .inputs_drawn_on == \"host\" and .inputs_shipped == null" out &&
	jq -e -s ".[1].verify.inputs_shipped == true" out
'
# Calls of 40 us beside a loop of milliseconds: on a busy CPU our clock may
# doubt one (stage "timing", tested in t0152); what is tested here holds either way.
expect_success 'ca-profile --verify adds verify and profile from one run; -v prints the phases' '
	ca-profile --verify -v $OPTS --no-compile --iters 5 --warmup 1 "$TRASH_BASE/in.ndjson" >out 2>err; test $? -le 1 &&
	jq -e -s "length == 2 and all(.verify.ok and (.profile.ok or .profile.stage == \"timing\") and .verify.checks == 5)" out &&
	jq -e -s ".[0].profile.phases | has(\"checks\") and has(\"candidate\") and has(\"load\")" out &&
	jq -e -s ".[1].profile.inputs_shipped == true" out &&
	jq -e -s "map(.profile.input_sets) == [6, 6]" out &&
	grep -q "seeded: .* s: .*checks" err && grep -q "urandom: " err
'
expect_success 'ca-profile --verify does not time a candidate that fails verification' '
	jq -c ".candidate = {files: {\"model_new.py\": \"import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x * 0\n\"}}" "$TRASH_BASE/in.ndjson" | head -n 1 >bad.ndjson &&
	ca-profile --verify $OPTS --no-compile bad.ndjson >out; test $? -eq 1 &&
	jq -e ".verify.ok == false and .profile.skipped == true" out &&
	ca-profile --verify -H $OPTS --no-compile bad.ndjson >human; test $? -eq 1 &&
	grep -q "^seeded: FAIL (policy): torch fallback refused" human && test "$(wc -l <human)" -eq 1
'
expect_success 'a profile that passed splits its last phases: spot_checks, then baselines_again' '
	ca-profile $OPTS --no-compile --iters 5 --warmup 1 "$TRASH_BASE/in.ndjson" >out; test $? -le 1 &&
	jq -e -s "all(.[].profile; (.ok | not) or (.phases | has(\"spot_checks\") and has(\"baselines_again\")))" out
'
# The reference's environment, seen by a task that writes it down and fails.
cat >"$TRASH_BASE/env.py" <<EOF
import os
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        open("$TRASH_BASE/warm", "w").write(str(os.environ.get("CA_EVAL_WARM_COMPILE")))
        raise RuntimeError("written")
def get_inputs():
    return [torch.ones(4)]
def get_init_inputs():
    return []
EOF
warm_seen() { # command... : what the reference saw
	rm -f "$TRASH_BASE/warm"
	record env "$TRASH_BASE/env.py" | "$@" $OPTS >/dev/null 2>&1
	cat "$TRASH_BASE/warm"
}
expect_success 'only a reference that will time torch.compile is told to import it early (CA_EVAL_WARM_COMPILE)' '
	test "$(CA_EVAL_WARM_COMPILE=x warm_seen ca-profile)" = 1 &&
	test "$(warm_seen ca-profile --no-compile)" = None &&
	test "$(CA_EVAL_WARM_COMPILE=0 warm_seen ca-profile)" = None &&
	test "$(CA_EVAL_WARM_COMPILE=1 warm_seen ca-verify)" = None
'
expect_success 'the early imports: a thread, torch.compile'"'"'s compiler imported once it is joined' '
	CA_EVAL_WARM_COMPILE=1 PYTHONPATH=$ROOT/lib/py "$(ca_python)" -c "
import sys, ca_runner
ca_runner._warm_imports(\"reference\")
assert ca_runner._warm_thread is not None
ca_runner._warm_done()
assert ca_runner._warm_thread is None and \"torch._inductor.compile_fx\" in sys.modules
ca_runner._warm_imports(\"candidate\")
assert ca_runner._warm_thread is None
"
'
# torch.compile on the CPU (inductor's C++ code): a candidate with nothing
# to build loads at once, so the reference does not compile its model
# early (its first check would wait for it); the compile stays in the
# baselines' loop. t0157 has the case with a build.
expect_success 'a profile with torch.compile and nothing to build: the compile stays in the baselines' '
	head -n 1 "$TRASH_BASE/in.ndjson" >one.ndjson &&
	CA_CACHE=$TRASH_BASE/tc ca-profile --verify $OPTS --no-cache --iters 5 --warmup 1 one.ndjson >warm.ndjson; test $? -le 1 &&
	jq -e ".verify.ok and .profile.compile_us > 0 and .profile.phases.checks < .profile.phases.baselines" warm.ndjson
'

# An evaluation server: warm slots on a socket; commands that find it in
# $CA_EVAL_SERVER send their records there.
SOCKDIR=$TRASH_BASE/sock
mkdir -p "$SOCKDIR" && chmod 700 "$SOCKDIR"
CA_EVAL_SERVE_IDLE=120 ca-profile --serve "$SOCKDIR/s" $OPTS 2>"$TRASH_BASE/serve.err" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$TRASH_BASE"' EXIT
i=0
while [ ! -S "$SOCKDIR/s" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
expect_success 'through a server: the same records come back, scored by its warm slots' '
	CA_EVAL_SERVER=$SOCKDIR/s ca-profile --verify -v $OPTS --no-compile --iters 5 --warmup 1 "$TRASH_BASE/in.ndjson" >out 2>err; test $? -le 1 &&
	grep -q "scoring through the evaluation server" err &&
	jq -e -s "map(.id) == [\"seeded\", \"urandom\"] and all(.verify.ok and (.profile.ok or .profile.stage == \"timing\"))" out &&
	CA_EVAL_SERVER=$SOCKDIR/s ca-verify $OPTS --checks 2 -H "$TRASH_BASE/in.ndjson" >human &&
	test "$(grep -c "PASS 2/2 checks" human)" -eq 2
'
expect_status 3 'through a server: the fields it does not touch come back as they were written' '
	printf "%s\n" "{\"id\":\"p\",\"n\":123456789012345678901234567890,\"z\":-0.0,\"e\":\"\\u0041\"}" >pass.ndjson &&
	CA_EVAL_SERVER=$SOCKDIR/s ca-verify -v $OPTS pass.ndjson >out 2>err; s=$?
	grep -q "scoring through the evaluation server" err &&
	grep -qF "{\"id\":\"p\",\"n\":123456789012345678901234567890,\"z\":-0.0,\"e\":\"\\u0041\",\"verify\":{" out &&
	exit $s
'
expect_success 'a command with other sandbox options is declined and works alone' '
	CA_EVAL_SERVER=$SOCKDIR/s ca-verify -v --device cpu </dev/null >out 2>err &&
	grep -q "declined" err && test ! -s out
'
expect_success 'the server stops on SIGTERM and removes its socket' '
	kill $server && i=0 && while [ -S "$SOCKDIR/s" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done &&
	test ! -e "$SOCKDIR/s"
'
expect_status 2 'a socket in a directory open to others is refused' '
	mkdir open && chmod 755 open && ca-verify --serve open/s $OPTS
'
test_done
