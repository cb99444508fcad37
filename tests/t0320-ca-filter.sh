#!/bin/sh
# ca-filter: the rubric on CPU with the real torch. Fixtures in
# tests/data/synth/rubric.ndjson: one task that passes and one for each
# way of failing (stochastic, constant, all zero, non-deterministic,
# stateful, NaN, input-independent, crash, timeout, syntax, no code), and a
# scalar loss, which is not degenerate.
. "$(dirname "$0")/test-lib.sh"
fixtures=$TESTS_DIR/data/synth/rubric.ndjson

expect_status 2 'bad --device is a usage error' 'ca-filter --device tpu </dev/null'
expect_status 2 'bad --gpus is a usage error' 'ca-filter --gpus a,b </dev/null'
expect_success '--fingerprint adds the measure'"'"'s tokens without running torch' '
	jq -c "select(.id == \"good\")" "'"$fixtures"'" | ca-filter --fingerprint >out &&
	jq -e ".fingerprint | test(\"cumsum cumsum cumsum\")" out'
if ! has_torch; then
	skip 'the rubric' "torch is not installed for $(ca_python) (make deps)"
	test_done
	exit
fi
out=$TRASH_BASE/out.ndjson
{ cat "$fixtures"; echo '{"id": "broken"'; } |
	ca-filter -j 2 --timeout 40 --no-compile >"$out" 2>"$TRASH_BASE/err"
echo $? >"$TRASH_BASE/status"
reason() { # id -> its reasons, one a line
	jq -r "select(.id == \"$1\") | .filter.reasons[]" "$out"
}
expect_success 'one record out for each record in, malformed ones as error records, exit 3' '
	[ "$(wc -l <"'"$out"'")" -eq 15 ] && [ "$(cat "$TRASH_BASE/status")" = 3 ] &&
	jq -se ".[] | select(.error) | .error.line == 15" "'"$out"'" && grep -q "stdin:15:" "$TRASH_BASE/err"'
expect_success 'a sound task is accepted; the workload check is skipped with a reason on the CPU' '
	jq -se ".[] | select(.id == \"good\") | .filter.ok and .filter.checks.workload == null
		and (.filter.skipped | map(test(\"workload\")) | any) and .filter.max_sim < 0.9
		and (.filter.nearest | test(\"kernelbench\")) and .filter.device == \"cpu\" and (.filter.torch | length > 0)" "'"$out"'"'
expect_success 'stochastic tasks are rejected (module and call)' '
	reason dropout | grep -q "^stochastic: the model uses Dropout" && reason randn | grep -q "randn_like"'
expect_success 'a dropout that cannot drop (p=0, training=False) is not rejected as stochastic; p=0.1 is' '
	for d in "nn.Dropout(p=0.0)" "nn.Dropout(0.1)"; do
		printf "import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.d = %s\n    def forward(self, x):\n        return torch.nn.functional.dropout(self.d(x).cumsum(0), p=0.5, training=False)\ndef get_inputs():\n    return [torch.randn(64, 64)]\ndef get_init_inputs():\n    return []\n" "$d" |
			jq -Rsc --arg id "$d" "{id: \$id, code: .}"
	done | ca-filter -j 1 --timeout 40 --no-compile --max-sim 1 >drop.ndjson &&
	jq -se ".[0].filter.checks.deterministic == true and (.[0].filter.reasons | map(test(\"stochastic\")) | any | not)
		and .[1].filter.checks.deterministic == false and (.[1].filter.reasons[0] | test(\"^stochastic: the model uses Dropout\"))" drop.ndjson'
expect_success 'a constant output is rejected' 'reason constant | grep -q "degenerate: output is constant"'
expect_success 'a single number (a loss) is not constant by itself: judged by its dependence on the inputs' '
	jq -se ".[] | select(.id == \"scalar\") | .filter.checks.non_degenerate and .filter.ok" "'"$out"'"'
expect_success 'an all-zero output is rejected' 'reason zeros | grep -q "degenerate: output is all zeros"'
expect_success 'an output that ignores the input is rejected' 'reason independent | grep -q "does not depend"'
expect_success 'NaN outputs are rejected' 'reason nan | grep -q "NaN or Inf"'
expect_success 'a non-deterministic task is rejected' 'reason nondet | grep -q "^nondeterministic"'
expect_success 'a stateful task is rejected' 'reason stateful | grep -q "stateful"'
expect_success 'a crash becomes a reason, and the next task still runs' '
	reason crash | grep -q "^crash: the checker was killed by signal 11" &&
	jq -se ".[] | select(.id == \"sleep\") | .filter.reasons | length == 1" "'"$out"'"'
expect_success 'a task that runs too long is killed and marked' 'reason sleep | grep -q "^timeout"'
expect_success 'unparsable code and missing code are reasons' '
	reason syntax | grep -q "^syntax: unterminated string" && reason nocode | grep -q "no code"'
expect_status 143 'SIGTERM: the task in flight is marked interrupted, every record read is written' '
	jq -c "select(.id == \"sleep\")" "'"$fixtures"'" | timeout -s TERM 20 ca-filter -j 1 >t; s=$?
	jq -e ".filter.reasons[0] | startswith(\"interrupted\")" t >/dev/null || exit 1
	[ $s -eq 124 ] && exit 143; exit $s'
expect_success '--drop keeps only accepted tasks' '
	jq -c "select(.id == \"good\" or .id == \"zeros\")" "'"$fixtures"'" | ca-filter -j 1 --no-compile --drop >d &&
	[ "$(jq -r .id d)" = good ]'
expect_success 'torch.compile runs and agrees with eager (one task: inductor on CPU is slow)' '
	jq -c "select(.id == \"good\")" "'"$fixtures"'" | ca-filter -j 1 >c &&
	jq -e ".filter.ok and .filter.checks.compile" c'
test_done
