#!/bin/sh
# ca-gae against an independent double-precision reference (tests/unit/gae-check.c:
# masked tokens removed, textbook GAE, scattered back; verl's masked_whiten)
# at 1e-12 relative, on trajectories of 1 to 1,000,000 tokens, fast path and
# jv path, with --whiten; and --whiten against ca_rl_ref.py's float64 verl.
. "$(dirname "$0")/test-lib.sh"

# gen SEED LENGTH... : one record per length, random values, mask (about 30% masked), outcome reward.
gen() {
	awk -v seed="$1" -v lengths="$2" -v per_token="${3:-0}" 'BEGIN {
		srand(seed); n = split(lengths, len, " ")
		for (r = 1; r <= n; r++) {
			printf "{\"id\":%d,\"values\":[", r
			for (i = 0; i < len[r]; i++) printf "%s%.17g", (i ? "," : ""), rand() * 4 - 2
			printf "],\"mask\":["
			for (i = 0; i < len[r]; i++) printf "%s%d", (i ? "," : ""), (rand() > 0.3)
			if (per_token) {
				printf "],\"rewards\":["
				for (i = 0; i < len[r]; i++) printf "%s%.6g", (i ? "," : ""), (rand() < 0.1) ? rand() * 2 - 1 : 0
				printf "]}\n"
			} else printf "],\"reward\":%d}\n", int(rand() * 5) - 1
		}
	}'
}

expect_success 'outcome reward, lengths 1 to 1,000,000, defaults (gamma 1, lambda 0.95)' '
	gen 1 "1 2 3 7 100 1000 100000 1000000" >in &&
	ca-gae in >out && test-gae-check 1 0.95 0 in out'
expect_success 'per-token rewards, --gamma 0.99 --lambda 0.9' '
	gen 2 "1 5 64 5000 200000" 1 >in &&
	ca-gae --gamma 0.99 --lambda 0.9 in >out && test-gae-check 0.99 0.9 0 in out'
expect_success 'the jv path (--jv) agrees with the reference too' '
	gen 3 "1 9 1000 50000" >in &&
	ca-gae --jv --lambda 0.97 in >out && test-gae-check 1 0.97 0 in out'
expect_success '--whiten: advantages_whitened over every policy token of the batch' '
	gen 4 "3 1 40 2000 70000" >in &&
	ca-gae --whiten in >out && test-gae-check 1 0.95 1 in out &&
	ca-gae --whiten --jv in >out2 && test-gae-check 1 0.95 1 in out2'
expect_success '--whiten with two policy tokens: verl'"'"'s epsilons, 1e-8 of the result, are in' '
	printf "%s\n" "{\"values\":[0.5,1,7],\"mask\":[1,1,0],\"reward\":1}" "{\"values\":[2],\"mask\":[0],\"reward\":3}" >in &&
	ca-gae --whiten in >out && test-gae-check 1 0.95 1 in out &&
	ca-gae --whiten --jv in >out2 && test-gae-check 1 0.95 1 in out2'
if has_torch; then
	REF="$(ca_python) $ROOT/lib/py/ca_rl_ref.py"
	export REF
	expect_success '--whiten = verl'"'"'s masked_whiten in float64 (ca_rl_ref.py whiten) at 1e-9, fully masked records among them' '
		gen 8 "2 5 40 300 1" >big &&
		printf "%s\n" "{\"values\":[0.25,-1],\"mask\":[1,1],\"reward\":2}" >small &&
		for b in big small; do
			printf "%s\n" "{\"values\":[1,2,3],\"mask\":[0,0,0],\"reward\":1}" >>$b &&
			ca-gae --whiten $b >out && $REF whiten out >verl &&
			jq -n -e --slurpfile a out --slurpfile b verl "
				[range(\$a | length) as \$r | \$a[\$r].mask as \$m | range(\$m | length) as \$i |
				 select(\$m[\$i] == 1) | [\$a[\$r].advantages_whitened[\$i], \$b[\$r].advantages_whitened[\$i]]] |
				length > 0 and all((.[0] - .[1] | fabs) <= 1e-9 * (.[1] | fabs))" >/dev/null || exit 1
		done'
else
	skip '--whiten = verl'"'"'s masked_whiten in float64' 'torch not installed (make deps)'
fi
expect_status 3 '--whiten with one policy token is an error (verl raises): records out without advantages_whitened' '
	printf "%s\n" "{\"values\":[0.5,1],\"mask\":[0,1],\"reward\":1}" "{\"values\":[2],\"mask\":[0],\"reward\":3}" >in &&
	ca-gae --whiten in >out 2>err; s=$?
	grep -q "^ca-gae: --whiten: 1 policy token in the input; whitening needs at least 2$" err &&
	test $(wc -l <out) = 2 && jq -s -e "all(has(\"advantages\") and (has(\"advantages_whitened\") | not))" out >/dev/null &&
	exit $s'
expect_status 3 '--whiten with no policy token is an error too' '
	echo "{\"values\":[0.5,1],\"mask\":[0,0],\"reward\":1}" | ca-gae --whiten --jv >out 2>err; s=$?
	grep -q "0 policy tokens in the input" err && test $(wc -l <out) = 1 && exit $s'
expect_success '--whiten of no input at all writes nothing and succeeds' 'ca-gae --whiten </dev/null >out && test ! -s out'
expect_success 'fast path and jv path give the same numbers' '
	gen 5 "1 2 300 4000" >in && gen 6 "17 5" 1 >>in &&
	ca-gae in | jq -c "[.advantages, .returns]" >a &&
	ca-gae --jv in | jq -c "[.advantages, .returns]" >b && cmp_output a b'
expect_success 'a masked token is skipped: the next value is the next policy token'"'"'s' '
	echo "{\"values\":[0.5,9,0.1,0.2],\"mask\":[1,0,1,1],\"reward\":1}" | ca-gae |
	jq -e ".advantages[1] == 0 and .returns[1] == 0 and .advantages[3] == 0.8 and (.advantages[0] - (-0.4 + 0.95 * (0.1 + 0.95 * 0.8)) | fabs) < 1e-15"'
expect_success 'mask as booleans, and an all-masked trajectory (all zeros)' '
	printf "%s\n" "{\"values\":[1,2],\"mask\":[true,false],\"reward\":1}" "{\"values\":[1,2],\"mask\":[0,0],\"reward\":1}" |
	ca-gae | jq -s -e ".[0].advantages == [0,0] and .[0].returns == [1,0] and .[1].advantages == [0,0]"'
expect_success 'existing advantages and returns fields are replaced, not duplicated' '
	echo "{\"values\":[1],\"reward\":2,\"advantages\":[9],\"returns\":[9]}" | ca-gae >out &&
	test $(grep -o advantages out | wc -l) = 1 && jq -e ".advantages == [1] and .returns == [2]" out'
expect_success 'other fields, nested and unicode, pass through' '
	echo "{\"id\":\"é\",\"meta\":{\"values\":[\"x\"]},\"values\":[1],\"reward\":0}" | ca-gae |
	jq -e ".id == \"é\" and .meta.values == [\"x\"] and .advantages == [-1]"'
expect_success 'reward may be ca-reward'"'"'s object: its value is the outcome reward' '
	echo "{\"values\":[1,2],\"reward\":{\"value\":3,\"speedup_eager\":2}}" | ca-gae | jq -e ".advantages == [1.95, 1]"'
n=0
for bad in '"values":[1,2],"mask":[1],"reward":1|mask has 1 entries' \
	'"values":[1,"x"],"reward":1|values\[1\] is a string' \
	'"values":[1],"mask":[2],"reward":1|mask entries must be 0 or 1' \
	'"values":[1],"reward":1,"rewards":[1]|both reward and rewards' \
	'"values":[1]|neither reward nor rewards' \
	'"values":[1],"reward":"1"|reward is not a finite number' \
	'"values":[1,2],"rewards":[1]|rewards has 1 entries' \
	'"reward":1|values is missing' \
	'"values":[1e999],"reward":1|values\[0\] is not a finite number' \
	'"values":[1],"reward":{"value":null}|reward.value is not a finite number' \
	'"values":[nan],"reward":1|values\[0\] is not a finite number'; do
	n=$((n + 1))
	printf "%s\n" "{\"id\":1,${bad%|*}}" "{\"id\":2,\"values\":[1],\"reward\":1}" >"$TRASH_BASE/bad.$n"
	expect_status 3 "bad input (${bad#*|}) is an error record, exit 3" '
		ca-gae "$TRASH_BASE/bad.'$n'" >out 2>err; s=$?
		test $(wc -l <out) = 2 && jq -s -e ".[0].error.message | test(\"'"${bad#*|}"'\")" out >/dev/null &&
		jq -s -e ".[1].advantages == [0] and .[0].error.line == 1" out >/dev/null && grep -q "bad.'$n':1: " err && exit $s'
done
test_done
