#!/bin/sh
# ca-synth: compose -> filter -> dataset and statistics, small and on the
# CPU (tiny tasks, no torch.compile, no crawl); the rerun skips the tasks
# already filtered, keyed by id; the no-GPU line for the workload check.
. "$(dirname "$0")/test-lib.sh"
DASH=$(command -v dash || echo sh)
SMALL='-j 1 --no-crawl --seed 2 --compose-opts "--target-ms 0.01 --max-tensor-mb 1" --filter-opts --no-compile --device cpu'
export DASH SMALL

expect_success 'usage is printed by --help' 'ca-synth --help | grep -q "^usage: ca-synth"'
expect_status 2 'an output directory is required' 'ca-synth -n 2'
expect_status 2 'a bad -n is a usage error' 'ca-synth -n two -o out'
expect_success 'the script is dash-clean' '$DASH -n "$ROOT/scripts/ca-synth"'

if ! has_torch; then
	skip 'synthesis on the CPU' 'no torch for ca-filter (make deps)'
	test_done
	exit 0
fi
expect_success 'tasks composed, all filtered, the accepted ones form the dataset; a rerun with more skips those done' '
	eval "$DASH \"\$ROOT/scripts/ca-synth\" -n 2 --no-plot $SMALL -o out" 2>err &&
	[ $(wc -l <out/composed.ndjson) -eq 2 ] && [ $(wc -l <out/filtered.ndjson) -eq 2 ] &&
	jq -e -s "map(.filter | type == \"object\") | all" out/filtered.ndjson &&
	[ $(jq -s "map(select(.filter.ok)) | length" out/filtered.ndjson) -eq $(wc -l <out/tasks.ndjson) ] &&
	grep -q "^records 2" out/stats.txt && jq -e ".records == 2" out/stats.json &&
	cp out/filtered.ndjson first &&
	eval "ca-synth -n 3 --no-plot $SMALL -o out" 2>err &&
	grep -q "1 of 3 tasks to filter" err &&
	head -n 2 out/filtered.ndjson | cmp - first && [ $(wc -l <out/filtered.ndjson) -eq 3 ] &&
	eval "ca-synth -n 3 --no-plot $SMALL -o out" 2>err && grep -q "0 of 3 tasks to filter" err'

expect_success '--tasks filters given tasks; without a GPU the workload check is named as skipped' '
	ca-compose --no-seeds -n 1 --seed 5 --target-ms 0.01 --max-tensor-mb 1 </dev/null >given &&
	mkdir nogpu && printf "#!/bin/sh\nexit 9\n" >nogpu/nvidia-smi && chmod +x nogpu/nvidia-smi &&
	PATH=$PWD/nogpu:$PATH ca-synth -j 1 --tasks given --no-plot --filter-opts --no-compile -o out 2>err &&
	grep -q "the workload check (eager time on the GPU) needs a GPU" err &&
	[ $(wc -l <out/filtered.ndjson) -eq 1 ] && jq -e ".filter.device == \"cpu\" or (.filter.reasons | length) > 0" out/filtered.ndjson'
test_done
