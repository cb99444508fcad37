#!/bin/sh
# ca-crawl: seeds from the torch really installed (modules only, to stay fast).
. "$(dirname "$0")/test-lib.sh"

expect_status 2 'unknown option is a usage error' 'ca-crawl --bogus'
expect_status 2 'operands are a usage error' 'ca-crawl file'
if ! has_torch; then
	skip 'ca-crawl with torch' "torch is not installed for $(ca_python) (make deps)"
	test_done
	exit
fi
seeds=$TRASH_BASE/seeds.ndjson
ca-crawl --no-functions --no-transformers >"$seeds" 2>"$TRASH_BASE/crawl.err"
echo $? >"$TRASH_BASE/crawl.status"
version=$("$(ca_python)" -c 'import torch; print(torch.__version__)')
expect_success 'crawl exits 0 and finds the nn modules' '
	[ "$(cat "$TRASH_BASE/crawl.status")" = 0 ] && [ "$(wc -l <"'"$seeds"'")" -gt 80 ]'
expect_success 'every seed names library torch and the installed version' '
	[ "$(jq -r "select(.seed.library != \"torch\" or .seed.version != \"'"$version"'\") | .id" "'"$seeds"'" | wc -l)" -eq 0 ]'
expect_success 'nn.Conv2d is concrete, with signatures, documented shapes and a source file' '
	jq -se ".[] | select(.seed.name == \"torch.nn.Conv2d\") | .seed.concrete and (.code | test(\"class Model\"))
		and (.seed.init_signature | test(\"in_channels\")) and (.seed.shapes | length > 0)
		and (.seed.source_file | test(\"conv\"))" "'"$seeds"'"'
expect_success 'nn.Dropout is stochastic, nn.BatchNorm2d stateful' '
	jq -se ".[] | select(.seed.name == \"torch.nn.Dropout\") | .seed.stochastic" "'"$seeds"'" &&
	jq -se ".[] | select(.seed.name == \"torch.nn.BatchNorm2d\") | .seed.stateful" "'"$seeds"'"'
expect_success 'a seed that cannot be made concrete says why' '
	jq -se ".[] | select(.seed.name == \"torch.nn.Sequential\") | (.seed.concrete | not) and (.seed.reason | test(\"container\"))" "'"$seeds"'"'
expect_success 'the seeds do not depend on -j (one process or three, the same bytes)' '
	ca-crawl -j 1 --no-functions --no-transformers >one &&
	ca-crawl -j 3 --no-functions --no-transformers >three &&
	cmp one three && cmp one "'"$seeds"'"'
expect_success 'seed tasks run: nn.Conv2d through the rubric (no compile)' '
	jq -c "select(.seed.name == \"torch.nn.Conv2d\")" "'"$seeds"'" |
		ca-filter -j 1 --no-compile --max-sim 1 >out &&
	jq -e ".filter.checks.executable and .filter.checks.deterministic" out'
test_done
