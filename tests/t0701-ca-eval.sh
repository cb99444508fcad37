#!/bin/sh
# ca-eval: KernelBench rows -> tasks -> ca-rollout -> Table 1 per level;
# --scored tabulates records already scored; --compare puts two result
# directories side by side; --prepare writes the tasks only.
. "$(dirname "$0")/test-lib.sh"
D=$TESTS_DIR/data/agent
DASH=$(command -v dash || echo sh)
POLICY='echo "{\"role\": \"assistant\", \"content\": \"done\"}"'
AGENT="--unconfined"
export D DASH POLICY AGENT
# Four KernelBench-shaped rows over two levels, plus a level-4 row.
kb() {
	for r in 1:1 1:2 2:1 2:7 4:1; do
		jq -cn --argjson l "${r%%:*}" --argjson n "${r#*:}" '{level: $l, num: $n, name: "p\($n)", code: "class Model: pass\n"}'
	done
}
# Scored records shaped like ca-best --trajectories output.
scored() {
	printf '%s\n' \
	'{"id":"kernelbench/L1/1","level":1,"verify":{"ok":true},"reward":{"value":3,"speedup_eager":2,"speedup_compile":1.5}}' \
	'{"id":"kernelbench/L1/2","level":1,"verify":{"ok":false},"reward":{"value":-1}}' \
	'{"id":"kernelbench/L2/1","verify":{"ok":true},"reward":{"value":1,"speedup_eager":0.5,"speedup_compile":0.4}}' \
	'{"id":"kernelbench/L2/7","level":2,"best":{"snapshots":0}}'
}

expect_success 'usage is printed by --help' 'ca-eval --help | grep -q "^usage: ca-eval"'
expect_status 2 '--compare needs two directories' 'ca-eval --compare a'
expect_status 2 'a run needs a policy' 'ca-eval -o out --tasks /dev/null'
expect_status 2 'a bad level list is a usage error' 'ca-eval --levels one --policy x -o out'

expect_success '--prepare: ids kernelbench/L<level>/<num>, levels and a limit per level' '
	kb >kb.ndjson &&
	ca-eval --prepare --tasks kb.ndjson --levels 1,2 --limit 1 -o out 2>err &&
	jq -r .id out/tasks.ndjson | tr "\n" " " | grep -q "^kernelbench/L1/1 kernelbench/L2/1 $" &&
	jq -e -s "map(.source == .id and .level > 0 and (.code | length) > 0) | all" out/tasks.ndjson'

expect_success 'a run: every problem gets a record, Table 1 per level on stdout and in table.txt' '
	kb >kb.ndjson &&
	$DASH "$ROOT/scripts/ca-eval" --tasks kb.ndjson --no-plot --agent-opts "$AGENT" --policy "$POLICY" \
		--score "jq -c -f $D/scores.jq" -o out >table 2>err &&
	[ $(wc -l <out/results.ndjson) -eq 4 ] &&
	cmp table out/table.txt && grep -q "^all  *4 " table && grep -q "^1  *2 " table && grep -q "^2  *2 " table &&
	grep -q "4 of 4 tasks have no scored candidate" err &&
	jq -e -s "length == 3 and .[0].group == {} and .[0].pass_rate == 0" out/stats.ndjson'

expect_success '--scored: levels from the ids where missing, the table counts every record' '
	scored >s.ndjson &&
	$DASH "$ROOT/scripts/ca-eval" --scored --no-plot -o out s.ndjson >table 2>err &&
	jq -e -s ".[0].count == 4 and .[0].pass_rate == 0.5 and .[1].group.level == 1 and .[2].group.level == 2 and .[2].count == 2" out/stats.ndjson &&
	grep -q "^all  *4 " table &&
	scored | ca-eval --scored - | grep -q "^2  *2 "'

expect_success '--compare: one table with both runs per level' '
	scored >s.ndjson && ca-eval --scored --no-plot -o runA s.ndjson >/dev/null 2>&1 &&
	head -n 2 s.ndjson >s2.ndjson && ca-eval --scored --no-plot -o runB s2.ndjson >/dev/null 2>&1 &&
	$DASH "$ROOT/scripts/ca-eval" --compare runA runB >cmp &&
	head -n 1 cmp | grep -q "pass:runA  *pass:runB" &&
	grep -q "^all  *4  *2  *0.500  *0.500 " cmp &&
	grep -q "^2  *2  *-  *0.500  *- " cmp'

if { echo 'set terminal pngcairo' | gnuplot || echo 'set terminal png' | gnuplot; } >/dev/null 2>&1; then
	expect_success 'with gnuplot, the Table 1 bars and reward plots are drawn' '
		scored >s.ndjson && ca-eval --scored -o out s.ndjson >/dev/null 2>&1 &&
		[ -s out/table1.png ] && [ -s out/reward-distribution.png ] && [ -s out/speedup-distribution.png ]'
else
	skip 'Table 1 bars' 'gnuplot with a PNG terminal is not installed'
fi
expect_success 'the script is dash-clean' '$DASH -n "$ROOT/scripts/ca-eval"'
test_done
