#!/bin/sh
# make demo: the demo pipeline over examples/ runs and ends in a ca-stats table.
. "$(dirname "$0")/test-lib.sh"

expect_success 'examples/demo.sh ends with the Table 1 rows (all, levels 1 to 3)' '
	sh "$ROOT/examples/demo.sh" >out 2>err &&
	head -n 1 out | grep -q "^level  *count  *errors  *pass" &&
	test "$(sed 1d out | awk "{ print \$1 }" | tr "\n" " ")" = "all 1 2 3 " &&
	grep -q "24 records rewarded" err'
test_done
