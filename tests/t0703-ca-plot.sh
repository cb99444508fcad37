#!/bin/sh
# ca-plot: the numbers behind each plot (.tsv) always, PNGs with gnuplot.
. "$(dirname "$0")/test-lib.sh"
DASH=$(command -v dash || echo sh)
export DASH
filtered() {
	printf '%s\n' \
	'{"id":"a","source":"torch#2","ops":["x","y"],"filter":{"ok":true,"max_sim":0.62}}' \
	'{"id":"b","source":"torch#2","ops":["x","y"],"filter":{"ok":false,"max_sim":0.95}}' \
	'{"id":"c","source":"torch#1","ops":["x"],"filter":{"ok":true,"max_sim":0.31}}'
}
steps() {
	for s in 1 2 3; do
		jq -cn --argjson s $s '{command: "ca-ppo-step", global_step: $s, stage: "ppo", reward_mean: ($s / 4), pg_clipfrac: 0.1,
			approx_kl: 0.01, entropy: 1.5, tokens_total: 300, sequences: 3}'
		jq -cn --argjson s $s '{command: "ca-value-step", global_step: $s, stage: "ppo", vf_explained_var: ($s / 5)}'
	done
}

expect_success 'usage is printed by --help' 'ca-plot --help | grep -q "^usage: ca-plot"'
expect_status 2 'an unknown plot is a usage error' 'ca-plot pie </dev/null'
expect_status 3 'no records is bad input' 'ca-plot table </dev/null'
expect_success 'dataset: composition by source and the similarity histogram' '
	filtered | $DASH "$ROOT/scripts/ca-plot" -o p dataset 2>err &&
	grep -q "^torch#1	1	0$" p/dataset-composition.tsv && grep -q "^torch#2	1	1$" p/dataset-composition.tsv &&
	[ $(wc -l <p/dataset-similarity.tsv) -eq 20 ] && grep -q "^0.975	1$" p/dataset-similarity.tsv'
expect_success 'rewards: the count per reward value' '
	ca-reward "$ROOT/examples/profiled.ndjson" | ca-plot -o p rewards 2>err &&
	[ "$(cut -f1 p/reward-distribution.tsv | tr "\n" " ")" = "-1 1 2 3 " ] && [ -s p/speedup-distribution.tsv ]'
expect_success 'table: one row per ca-stats group' '
	ca-reward "$ROOT/examples/profiled.ndjson" | ca-stats --by level | ca-plot -o p table &&
	[ "$(cut -f1 p/table1.tsv | tr "\n" " ")" = "all L1 L2 L3 " ]'
expect_success 'training: one row per global step, actor and critic merged; the missing reward-3 share is said' '
	steps | ca-plot -o p training 2>err &&
	[ $(wc -l <p/training.tsv) -eq 3 ] && grep -q "^3	0.75	nan	0.1	0.01	1.5	0.6	nan	100$" p/training.tsv &&
	grep -q "no share of reward 3" err && grep -q "trajectory length in turns is empty" err'
expect_success 'training: ca-train'"'"'s rollout record gives the share of reward 3 and the trajectory length in turns and tokens' '
	{ steps; jq -cn "{command: \"ca-train\", global_step: 2, stage: \"ppo\", records: 4, reward_mean: 1.5,
		reward_3_share: 0.25, turns_mean: 12.5, tokens_mean: 4000}"; } | ca-plot -o p training 2>err &&
	grep -q "^2	1.5	0.25	0.1	0.01	1.5	0.4	12.5	4000$" p/training.tsv && grep -q "^1	0.25	nan	" p/training.tsv'
if { echo 'set terminal pngcairo' | gnuplot || echo 'set terminal png' | gnuplot; } >/dev/null 2>&1; then
	expect_success 'PNGs are drawn with gnuplot' '
		filtered | ca-plot -o p dataset 2>/dev/null && steps | ca-plot -o p training 2>/dev/null &&
		for f in dataset-composition dataset-similarity training; do
			[ "$(head -c 4 p/$f.png | od -An -c | tr -d " ")" = "211PNG" ] || exit 1; done'
else
	skip 'PNGs' 'gnuplot with a PNG terminal is not installed'
fi
expect_success 'without gnuplot the numbers are kept and one line says so' '
	mkdir nogp && for c in jq cat mkdir mktemp rm awk sort sh; do ln -s "$(command -v $c)" nogp/$c; done &&
	filtered | PATH=$PWD/nogp "$DASH" "$ROOT/scripts/ca-plot" -o p dataset 2>err &&
	grep -q "gnuplot (with a PNG terminal) is not installed" err && [ -s p/dataset-composition.tsv ] && [ ! -f p/dataset-composition.png ]'
expect_success 'the script is dash-clean' '$DASH -n "$ROOT/scripts/ca-plot"'
test_done
