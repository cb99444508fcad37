#!/bin/sh
# The full rubric on the GPU: eager and compiled times, the workload bounds.
. "$(dirname "$0")/../test-lib.sh"
if ! has_gpu; then
	skip 'ca-filter on the GPU' 'no GPU here'
	test_done
	exit
fi
if ! has_torch; then
	skip 'ca-filter on the GPU' "torch is not installed for $(ca_python)"
	test_done
	exit
fi
expect_success 'composed tasks get eager and compile times and a workload verdict' '
	ca-compose --no-seeds -n 4 --seed 3 --distribution 0,1 >t &&
	ca-filter -j 2 --device cuda <t >f &&
	[ "$(jq -se "map(select(.filter.device == \"cuda\" and (.filter.checks.workload | type) == \"boolean\"
		and (.filter.eager_ms | type) == \"number\")) | length" f)" -eq 4 ]'
expect_success 'a tiny task is rejected by the workload check' '
	ca-compose --no-seeds -n 1 --seed 3 --distribution 0,1 --target-ms 0.001 | ca-filter -j 1 --device cuda --no-compile >f &&
	jq -e ".filter.checks.workload == false and (.filter.reasons | map(test(\"^workload\")) | any)" f'
expect_success 'a task rejected before timing has no workload verdict, only a skip' '
	jq -c "select(.id == \"zeros\")" "$TESTS_DIR/data/synth/rubric.ndjson" | ca-filter -j 1 --device cuda --no-compile >f &&
	jq -e ".filter.checks.workload == null and (.filter.skipped | map(test(\"^workload\")) | any)
		and (.filter.reasons | map(test(\"^workload\")) | any | not)" f'
expect_success '--sandbox: workers in ca-sandbox still compile and time on the GPU' '
	ca-compose --no-seeds -n 2 --seed 5 --distribution 0,1 >t &&
	ca-filter -j 2 --device cuda --sandbox --min-ms 0 --max-ms 1e9 <t >f &&
	[ "$(jq -se "map(select(.filter.checks.executable == true and (.filter.checks.compile | type) == \"boolean\"
		and (.filter.eager_ms | type) == \"number\")) | length" f)" -eq 2 ]'
test_done
