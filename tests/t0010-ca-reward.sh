#!/bin/sh
# ca-reward: the paper's discrete reward, --continuous, --threshold, errors as data.
. "$(dirname "$0")/test-lib.sh"
D=$TESTS_DIR/data

expect_status 3 'golden: -1/1/2/3, the strict threshold, missing fields as reward.error' '
	ca-reward "$D/reward-in.ndjson" >out 2>err; s=$?
	cmp_output "$D/reward-out.ndjson" out && test $(wc -l <err) = 3 && exit $s'
expect_status 3 'golden: --continuous is compile_us / candidate_us, -1 when incorrect' '
	ca-reward --continuous "$D/reward-in.ndjson" >out 2>/dev/null; s=$?
	cmp_output "$D/reward-continuous-out.ndjson" out && exit $s'
expect_success 'every other field passes through unchanged' '
	jq -c "del(.reward)" "$D/reward-out.ndjson" >a && jq -c . "$D/reward-in.ndjson" >b && cmp_output b a'
expect_success '--threshold 0 makes 95 us against 100 us a win over both' '
	echo "{\"verify\":{\"ok\":true},\"profile\":{\"ok\":true,\"eager_us\":100,\"compile_us\":100,\"candidate_us\":95}}" |
	ca-reward --threshold 0 | jq -e ".reward.value == 3 and .reward.threshold == 0"'
expect_success 'an incorrect candidate needs no profile' '
	echo "{\"verify\":{\"ok\":false}}" | ca-reward | jq -e ".reward.value == -1"'
expect_status 3 'verify.ok that is not a boolean is an error' '
	echo "{\"verify\":{\"ok\":\"yes\"}}" | ca-reward >out 2>/dev/null; s=$?
	jq -e ".reward.value == null and (.reward.error | test(\"verify.ok\"))" out >/dev/null && exit $s'
expect_status 3 'a zero or negative time is an error, not an infinite speedup' '
	echo "{\"verify\":{\"ok\":true},\"profile\":{\"ok\":true,\"eager_us\":100,\"compile_us\":100,\"candidate_us\":0}}" | ca-reward >out 2>/dev/null'
expect_status 3 'odd spacing, an empty object, unicode: the output stays valid JSON' '
	printf "%s\n" " { \"id\" : 1 , \"verify\":{\"ok\":false} } " "{}" "{\"id\":\"é\",\"verify\":{\"ok\":false}}" |
	ca-reward >out 2>/dev/null; s=$?
	jq -s -e "length == 3 and .[0].reward.value == -1 and .[0].id == 1 and .[1].reward.value == null and .[2].id == \"é\"" out >/dev/null &&
	exit $s'
expect_success 'an existing reward field is replaced, not duplicated' '
	echo "{\"verify\":{\"ok\":false},\"reward\":{\"value\":7}}" | ca-reward >out &&
	test $(grep -o "\"reward\"" out | wc -l) = 1 && jq -e ".reward.value == -1" out'
expect_success 'a candidate the profile caught gets -1 whatever its times say (the reward gate)' '
	echo "{\"verify\":{\"ok\":true},\"profile\":{\"ok\":false,\"stage\":\"timing\",\"eager_us\":96.4,\"compile_us\":177.8,\"candidate_us\":33.1}}" |
	ca-reward >out && jq -e ".reward.value == -1 and .reward.reason == \"profile: timing\" and .reward.speedup_compile == null" out &&
	ca-reward --continuous <out | jq -e ".reward.value == -1"'
expect_success 'every profile stage that catches a candidate gives -1' '
	for st in timing spot-check policy crash run timeout compare; do
		echo "{\"verify\":{\"ok\":true},\"profile\":{\"ok\":false,\"stage\":\"$st\",\"eager_us\":9,\"compile_us\":9,\"candidate_us\":1}}"
	done | ca-reward | jq -s -e "length == 7 and all(.[]; .reward.value == -1)"'
expect_status 3 'a profile without its verdict earns nothing' '
	echo "{\"verify\":{\"ok\":true},\"profile\":{\"eager_us\":100,\"compile_us\":100,\"candidate_us\":50}}" | ca-reward >out 2>/dev/null; s=$?
	jq -e ".reward.value == null" out >/dev/null && exit $s'
expect_success 'an evaluator fault (ok null) gives reward null, not -1' '
	printf "%s\n" "{\"verify\":{\"ok\":null,\"stage\":\"reference\"}}" \
		"{\"verify\":{\"ok\":true},\"profile\":{\"ok\":null,\"stage\":\"system\"}}" | ca-reward >out &&
	jq -s -e "all(.[]; .reward.value == null and .reward.evaluator_fault == true)" out >/dev/null'
expect_status 2 'a negative --threshold is a usage error' 'ca-reward --threshold -5 </dev/null 2>/dev/null'
test_done
