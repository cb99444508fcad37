#!/bin/sh
# ca-dataset-stats: Table 3, reasons, eager times, the similarity histogram.
. "$(dirname "$0")/test-lib.sh"
cat >"$TRASH_BASE/f.ndjson" <<'J'
{"id":"a","source":"torch#2","filter":{"ok":true,"reasons":[],"eager_ms":2.5,"max_sim":0.71}}
{"id":"b","source":"torch#2","filter":{"ok":true,"reasons":[],"eager_ms":12,"max_sim":0.65}}
{"id":"c","source":"torch#3","filter":{"ok":true,"reasons":[],"eager_ms":0.5,"max_sim":0.82}}
{"id":"d","source":"torch#1","filter":{"ok":false,"reasons":["contaminated: similarity 0.95 to kernelbench/L1/19 19_ReLU exceeds 0.9"],"max_sim":0.95,"nearest":"kernelbench/L1/19 19_ReLU"}}
{"id":"e","source":"torch#2","filter":{"ok":false,"reasons":["workload: eager time 0.2 ms is outside [1, 100] ms","degenerate: output is all zeros"],"eager_ms":0.2,"max_sim":0.7}}
{"error":{"file":"stdin","line":6,"message":"x"}}
J
expect_success 'text report: composition, reasons, similarity histogram' '
	ca-dataset-stats "$TRASH_BASE/f.ndjson" >out &&
	grep -q "records 6: accepted 3, rejected 2, unfiltered 0, malformed 1" out &&
	grep -Eq "torch#2 +2 +66.67%" out && grep -Eq "workload +1" out && grep -Eq "contaminated +1" out &&
	grep -Eq "\[0.9, 1.0\] +1" out && grep -Eq "\[0.7, 0.8\) +2" out && grep -q "19_ReLU" out'
expect_success '--json: one object with the same numbers' '
	ca-dataset-stats --json "$TRASH_BASE/f.ndjson" >out &&
	jq -e ".accepted == 3 and .by_source[\"torch#2\"] == 2 and .eager_ms.p50 == 2.5 and .similarity_histogram[9] == 1
		and .reasons.degenerate == 1" out'
expect_status 2 'unknown option is a usage error' 'ca-dataset-stats --bogus'
if command -v gnuplot >/dev/null 2>&1; then
	expect_success '--plot draws a PNG' 'ca-dataset-stats --plot p.png "$TRASH_BASE/f.ndjson" >/dev/null && [ -s p.png ]'
else
	skip '--plot' 'gnuplot is not installed'
fi
test_done
