#!/bin/sh
# ca-best: --explode turns trajectories into one candidate per distinct
# snapshot; the default mode picks the best per trajectory (reward, then
# speedup over torch.compile, then the earliest); --trajectories joins.
. "$(dirname "$0")/test-lib.sh"

D=$TESTS_DIR/data/agent
T=$D/trajectories.ndjson

expect_success 'usage is printed by --help' 'ca-best --help | grep -q "^usage: ca-best"'
expect_status 2 '--explode and --trajectories conflict' 'ca-best --explode --trajectories x </dev/null'

expect_success 'explode: one candidate per distinct snapshot plus a distinct final' '
	ca-best --explode "$T" >c &&
	jq -e -s "length == 4
		and [.[].snapshot.trajectory] == [\"A#1\", \"A#1\", \"A#1\", \"B#2\"]
		and [.[].snapshot.index] == [0, 1, 3, 0]
		and .[0].snapshot.same == [2] and .[2].snapshot.command == \"final\"
		and [.[].candidate.files[\"model_new.py\"]] == [\"v1\", \"v2\", \"v3\", \"b\"]
		and all(.[]; has(\"trajectory\") | not) and all(.[]; .code != null)" c
'

expect_success 'explode drops old scores from the base record' '
	ca-best --explode "$T" | jq -e -s "all(.[]; has(\"verify\") | not)"
'

expect_success 'select: the highest reward, then the fastest against torch.compile' '
	ca-best --explode "$T" | jq -c -f "$D/scores.jq" | ca-best >b &&
	jq -e -s "length == 2 and .[0].best.trajectory == \"A#1\" and .[0].best.index == 1
		and .[0].candidate.files[\"model_new.py\"] == \"v2\" and .[0].best.snapshots == 3
		and .[0].best.correct == 2 and .[0].best.reward == 3
		and .[1].best.trajectory == \"B#2\" and .[1].best.reward == 1" b
'

expect_success 'select: ties go to the earliest snapshot; a missing reward ranks last' '
	printf "%s\n" "{\"snapshot\": {\"trajectory\": \"x\", \"index\": 2}, \"reward\": {\"value\": 2}}" \
		"{\"snapshot\": {\"trajectory\": \"x\", \"index\": 1}, \"reward\": {\"value\": 2}}" \
		"{\"snapshot\": {\"trajectory\": \"x\", \"index\": 0}}" | ca-best | jq -e ".best.index == 1"
'

expect_success 'join: every trajectory comes out once, with the best candidate and its reward' '
	ca-best --explode "$T" | jq -c -f "$D/scores.jq" | ca-best --trajectories "$T" >j &&
	jq -e -s "length == 3 and [.[].id] == [\"A\", \"B\", \"C\"]
		and .[0].reward.value == 3 and .[0].candidate.files[\"model_new.py\"] == \"v2\"
		and .[0].trajectory.id == \"A#1\" and .[1].reward.value == 1
		and .[2].best.snapshots == 0 and (.[2] | has(\"candidate\") | not)" j
'

# Many trajectories, their snapshots interleaved: grouping and joining go
# through a hash table, so check them against jq on a few thousand.
expect_success 'select and join stay right over 3000 interleaved trajectories' '
	cat >gen.awk <<-\EOF
	BEGIN {
		n = 3000
		for (k = 0; k < 3; k++)
			for (j = 0; j < n; j++) {
				i = (j * 7919 + k) % n
				printf "{\"snapshot\": {\"trajectory\": \"t%d\", \"index\": %d}, ", i, k
				printf "\"reward\": {\"value\": %d, \"speedup_compile\": %d}}\n", (i + k) % 3, (i * k) % 5
			}
		for (j = n; j >= 0; j--)
			printf "{\"id\": \"t%d\"}\n", j >"traj"
	}
	EOF
	awk -f gen.awk >scored && test $(wc -l <scored) = 9000 && test $(wc -l <traj) = 3001 &&
	ca-best scored >b &&
	jq -s -c "[.[] | {t: .snapshot.trajectory, i: .snapshot.index, r: .reward.value, s: .reward.speedup_compile}]
		| group_by(.t) | map(sort_by(-.r, -.s, .i)[0] | [.t, .i]) | sort" scored >want &&
	jq -s -c "map([.best.trajectory, .best.index]) | sort" b >got && cmp_output want got &&
	jq -s -e "map(.best.snapshots == 3) | all" b >/dev/null &&
	jq -r .snapshot.trajectory scored | awk "!seen[\$0]++" >first && jq -r .best.trajectory b | cmp_output first - &&
	ca-best --trajectories traj scored >j &&
	jq -r .id traj >ids && jq -r .id j | cmp_output ids - &&
	jq -s -c "map(select(.best.snapshots == 3) | [.best.trajectory, .best.index]) | sort" j >got2 && cmp_output want got2 &&
	test "$(jq -c "select(.id == \"t3000\") | .best.snapshots" j)" = 0
'

expect_success 'fields pass through as written: explode, select and join' '
	printf "%s\n" "{\"id\":\"A\",\"n\":12345678901234567890123,\"trajectory\":{\"id\":\"A#1\",\"snapshots\":[{\"index\":0,\"files\":{\"m.py\":\"x\"}}]}}" >t &&
	ca-best --explode t >c && grep -qF "\"n\":12345678901234567890123" c &&
	sed "s/}\$/,\"profile\":{\"eager_us\":-0.0,\"big\":12345678901234567890123},\"reward\":{\"value\":1}}/" c >scored &&
	ca-best scored >b && grep -qF "\"profile\":{\"eager_us\":-0.0,\"big\":12345678901234567890123}" b &&
	grep -qF "\"n\":12345678901234567890123" b &&
	ca-best --trajectories t scored >j && grep -qF "\"profile\":{\"eager_us\":-0.0,\"big\":12345678901234567890123}" j &&
	grep -qF "\"n\":12345678901234567890123" j && jq -e ".best.snapshots == 1 and .trajectory.id == \"A#1\"" j >/dev/null
'

expect_status 3 'records without snapshot.trajectory are errors, the rest still scored' '
	{ echo "{\"x\": 1}"; echo "{bad"; echo "{\"snapshot\": {\"trajectory\": \"t\", \"index\": 0}, \"reward\": {\"value\": 1}}"; } |
	ca-best >o 2>e; s=$?
	jq -e -s "length == 3 and (map(select(.error)) | length) == 2 and .[2].best.trajectory == \"t\"" o >/dev/null &&
	grep -q "stdin:2:" e && exit $s
'

expect_status 3 'explode: a record without a trajectory is an error record' '
	echo "{\"id\": 1}" | ca-best --explode >o 2>e; s=$?
	jq -e ".error.line == 1" o >/dev/null && exit $s
'

expect_status 3 'an id with a newline cannot forge a diagnostic line (--trajectories)' '
	printf "%s\n" "{\"snapshot\": {\"trajectory\": \"x\\nca-best: forged\\u001b[31m\", \"index\": 0}}" >s &&
	echo "{\"id\": \"other\"}" >t &&
	ca-best --trajectories t <s >o 2>e; s=$?
	test $(wc -l <e) = 1 && ! grep -q "^ca-best: forged" e && grep -qF "x\\nca-best: forged\\x1b[31m" e &&
	exit $s
'

expect_success 'writing to a full disk fails with status 4' 'ca-best --explode "$T" >/dev/full; [ $? -eq 4 ]'

expect_success 'select: a candidate the profile caught is neither correct nor fast' '
	printf "%s\n" "{\"snapshot\":{\"trajectory\":\"T\",\"index\":0},\"verify\":{\"ok\":false},\"reward\":{\"value\":-1}}" \
		"{\"snapshot\":{\"trajectory\":\"T\",\"index\":1},\"verify\":{\"ok\":true},\"profile\":{\"ok\":false,\"stage\":\"timing\",\"compile_us\":100,\"candidate_us\":1},\"reward\":{\"value\":-1,\"speedup_compile\":null}}" |
	ca-best | jq -e ".best.index == 0 and .best.correct == 0"
'
test_done
