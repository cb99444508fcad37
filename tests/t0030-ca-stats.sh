#!/bin/sh
# ca-stats: Table 1 (pass rate, faster rates, geometric means, fast_p) overall and per group.
. "$(dirname "$0")/test-lib.sh"
D=$TESTS_DIR/data

expect_success 'golden: --by level (records without reward and error records count as incorrect)' '
	ca-stats --by level "$D/stats-in.ndjson" >out && cmp_output "$D/stats-out.ndjson" out'
expect_success 'golden: -t table, two --by (one a dotted path), -p as written, --faster-than' '
	ca-stats -t --by meta.gpu --by level -p 1.0,2 --faster-than 0.9 "$D/stats-in.ndjson" >out &&
	cmp_output "$D/stats-table.txt" out'
expect_success 'hand-checked numbers for all records' '
	ca-stats "$D/stats-in.ndjson" | jq -e "
		.group == {} and .count == 6 and .pass_rate == 0.5 and .faster_eager_rate == 1/6 and
		(.geomean_speedup_eager - 1 | fabs) < 1e-15 and (.geomean_speedup_compile - (0.54 | pow(.; 1/3)) | fabs) < 1e-15 and
		.fast_p[\"0\"] == 0.5 and .fast_p[\"0.8\"] == 2/6 and .fast_p_compile[\"1.5\"] == 0"'
expect_success 'fast_p keys follow -p exactly; fast_0 is the pass rate' '
	ca-stats -p 0,0.50,3 "$D/stats-in.ndjson" | jq -e "(.fast_p | keys) == [\"0\",\"0.50\",\"3\"] and .fast_p[\"0\"] == .pass_rate"'
expect_success 'no input: one all-records group with count 0 and null rates' '
	ca-stats </dev/null | jq -e ".count == 0 and .pass_rate == null and .geomean_speedup_eager == null"'
expect_status 3 'a malformed line is counted as an incorrect record, exit 3' '
	{ cat "$D/stats-in.ndjson"; echo "{oops"; } | ca-stats >out 2>err; s=$?
	jq -e ".count == 7 and .errors == 2" out >/dev/null && grep -q "stdin:7: malformed" err && exit $s'
expect_success 'the demo pipeline: ca-reward | ca-stats over the shipped examples' '
	ca-reward "$ROOT/examples/profiled.ndjson" | ca-stats --by level | jq -s -e "length == 4 and .[0].count == 24"'
expect_success 'a candidate the profile caught (reward -1) is not correct, whatever verify said' '
	printf "%s\n" "{\"verify\":{\"ok\":true},\"profile\":{\"ok\":false,\"stage\":\"timing\"},\"reward\":{\"value\":-1}}" \
		"{\"verify\":{\"ok\":true},\"profile\":{\"ok\":true},\"reward\":{\"value\":1,\"speedup_eager\":1,\"speedup_compile\":1}}" |
	ca-stats | jq -e ".count == 2 and .pass_rate == 0.5 and .errors == 0"'
expect_success 'an evaluator fault counts in errors and evaluator_faults, in no rate' '
	printf "%s\n" "{\"verify\":{\"ok\":null,\"stage\":\"reference\"},\"reward\":{\"value\":null,\"evaluator_fault\":true}}" \
		"{\"verify\":{\"ok\":true},\"profile\":{\"ok\":null,\"stage\":\"system\"}}" \
		"{\"verify\":{\"ok\":false},\"reward\":{\"value\":-1}}" \
		"{\"verify\":{\"ok\":true},\"profile\":{\"ok\":true},\"reward\":{\"value\":2,\"speedup_eager\":1.5,\"speedup_compile\":0.9}}" |
	ca-stats | jq -e ".count == 4 and .errors == 2 and .evaluator_faults == 2 and .pass_rate == 0.5 and .fast_p[\"1\"] == 0.5"'
expect_status 2 '--by with an empty path is a usage error' 'ca-stats --by "" </dev/null'
test_done
