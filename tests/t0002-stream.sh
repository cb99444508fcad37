#!/bin/sh
# The record-stream contract (ca(7)), checked on the foundation's filters:
# malformed and empty lines, count in = count out, a 100 MB line, .gz and
# several inputs with - as stdin, write errors, -u as a coprocess, usage errors.
. "$(dirname "$0")/test-lib.sh"

for cmd in ca-reward ca-gae; do
	expect_status 3 "$cmd: a malformed line becomes an error record, processing goes on, exit 3" '
		printf "%s\n" "{\"verify\":{\"ok\":false},\"values\":[1],\"reward\":1}" "{bad" "[1,2]" \
			"{\"verify\":{\"ok\":false},\"values\":[2],\"reward\":0}" "{\"id\": 1, " >in &&
		'$cmd' <in >out 2>err; status=$?
		test $(wc -l <out) = 5 &&
		jq "select(.error) | .error.line" out >lines && test "$(cat lines | tr "\n" " ")" = "2 3 5 " &&
		grep -q "^'$cmd': stdin:2: malformed JSON" err &&
		grep -q "^'$cmd': stdin:3: record is a JSON array, not an object" err &&
		exit $status'
	expect_success "$cmd: empty and blank lines are skipped" '
		printf "\n{\"verify\":{\"ok\":false},\"values\":[1],\"reward\":1}\n  \n\r\n" | '$cmd' >out &&
		test $(wc -l <out) = 1'
	expect_success "$cmd: .gz files, several inputs, - as stdin, in order" '
		echo "{\"id\":1,\"verify\":{\"ok\":false},\"values\":[1],\"reward\":1}" | gzip >a.gz &&
		echo "{\"id\":2,\"verify\":{\"ok\":false},\"values\":[1],\"reward\":1}" >b &&
		echo "{\"id\":3,\"verify\":{\"ok\":false},\"values\":[1],\"reward\":1}" | gzip >c.gz &&
		cat c.gz | '$cmd' a.gz - b >out &&
		test "$(jq -c .id out | tr "\n" " ")" = "1 3 2 "'
	expect_status 4 "$cmd: a write error (/dev/full) gives exit 4" '
		echo "{\"verify\":{\"ok\":false},\"values\":[1],\"reward\":1}" | '$cmd' >/dev/full 2>err; s=$?
		grep -q "write error" err; exit $s'
	expect_status 4 "$cmd: a missing input file gives exit 4, the others are read" '
		echo "{\"verify\":{\"ok\":false},\"values\":[1],\"reward\":1}" >b &&
		'$cmd' nonexistent b >out 2>err; s=$?
		test $(wc -l <out) = 1 && grep -q "nonexistent: No such file" err; exit $s'
	expect_success "$cmd: -u flushes each record (runs as a coprocess)" '
		mkfifo in out || exit 1
		'$cmd' -u <in >out & pid=$!
		( sleep 20; kill $pid 2>/dev/null ) & watchdog=$!
		exec 3>in 4<out
		echo "{\"verify\":{\"ok\":false},\"values\":[1],\"reward\":1}" >&3
		read -r first <&4
		echo "{\"verify\":{\"ok\":false},\"values\":[2],\"reward\":1}" >&3
		read -r second <&4
		exec 3>&-; wait $pid; kill $watchdog 2>/dev/null
		case $first in *verify*) ;; *) exit 1 ;; esac
		case $second in *verify*) ;; *) exit 1 ;; esac'
	expect_status 2 "$cmd: an unknown option is a usage error (exit 2)" "$cmd --no-such-option </dev/null"
	expect_success "$cmd: --help prints the usage on stdout" "$cmd --help | grep -q '^usage: $cmd'"
done

# A write error names its own reason (No space left on device), not a stale
# errno from the progress check (isatty: Inappropriate ioctl for device).
expect_success 'ca-sample -u and ca-logprob -u: a write error says why, once' '
	ca-toy init m >/dev/null &&
	ca-toy prompts -n 2 >p &&
	{ ca-sample -u --max-tokens 2 -m m p >/dev/full 2>err; test $? -eq 4; } &&
	grep -q "write error on stdout: No space left on device" err && ! grep -q "ioctl" err &&
	test $(grep -c "write error" err) = 1 &&
	ca-sample --max-tokens 2 --token-record -m m p >s &&
	{ ca-logprob -u -m m s >/dev/full 2>err; test $? -eq 4; } &&
	grep -q "write error on stdout: No space left on device" err && ! grep -q "ioctl" err &&
	test $(grep -c "write error" err) = 1'
# The batch commands keep order around a malformed line and pass the fields
# they do not touch through as written.
expect_status 3 'ca-sample: order kept around a bad line, untouched fields byte for byte' '
	ca-toy init m >/dev/null &&
	printf "%s\n" "{\"prompt_tokens\":[0,3],\"n\":12345678901234567890123}" "{bad" "{\"prompt_tokens\":[0,1],\"z\":-0.0}" "{\"x\":1}" >in &&
	ca-sample --max-tokens 2 --batch 2 -m m in >out 2>err; s=$?
	test $(wc -l <out) = 4 && sed -n 1p out | grep -qF "\"n\":12345678901234567890123" &&
	sed -n 2p out | jq -e ".error.line == 2" >/dev/null && sed -n 3p out | grep -qF "\"z\":-0.0" &&
	sed -n 4p out | jq -e ".completion.error" >/dev/null && grep -q "in:4: record has no prompt" err && exit $s'
expect_status 3 'ca-logprob: order kept around a bad line, untouched fields byte for byte' '
	ca-toy init m >/dev/null &&
	printf "%s\n" "{\"tokens\":[0,3,4],\"n\":12345678901234567890123}" "{bad" "{\"tokens\":[0,1],\"z\":-0.0}" "{\"x\":1}" >in &&
	ca-logprob -m m in >out 2>err; s=$?
	test $(wc -l <out) = 4 && sed -n 1p out | grep -qF "\"n\":12345678901234567890123" &&
	sed -n 2p out | jq -e ".error.line == 2" >/dev/null && sed -n 3p out | grep -qF "\"z\":-0.0" &&
	sed -n 4p out | jq -e ".logprob_error" >/dev/null && grep -q "in:4: record has no tokens" err && exit $s'

expect_success 'concatenated gzip members (cat a.gz b.gz) are one stream' '
	{ echo "{\"id\":1}" | gzip; echo "{\"id\":2}" | gzip; } >ab.gz &&
	ca-reward ab.gz >out 2>/dev/null; test "$(jq -c .id out | tr "\n" " ")" = "1 2 "'
expect_status 3 'truncated gzip input is bad data (exit 3), the records before it are kept' '
	awk "BEGIN { for (i = 0; i < 20000; i++) printf \"{\\\"id\\\":%d,\\\"verify\\\":{\\\"ok\\\":false}}\n\", i }" | gzip >full.gz &&
	head -c 20000 full.gz >cut.gz && ca-reward cut.gz >out 2>err; s=$?
	grep -q "cut.gz: truncated gzip data" err && test $(wc -l <out) -gt 100 && exit $s'
expect_status 2 'ca-reward: a bad --threshold is a usage error' 'ca-reward --threshold abc </dev/null'
expect_status 2 'ca-gae: --gamma out of [0, 1] is a usage error' 'ca-gae --gamma 1.5 </dev/null'
expect_status 2 'ca-stats: a bad -p list is a usage error' 'ca-stats -p 0,x </dev/null'

expect_status 3 'a 100 MB line passes through whole' '
	{ printf "{\"id\":\"big\",\"blob\":\""; head -c 100000000 /dev/zero | tr "\0" a; printf "\"}\n"; } >big &&
	ca-reward big >out 2>err; s=$?
	test $(wc -c <out) -gt 100000000 && jq -e ".blob | length == 100000000" out >/dev/null && exit $s'
# A bad line is never echoed whole: libjq's own message quoted the line, so a
# 100 MB bad line made a 100 MB error record (and past 1 GiB libjq aborted).
for cmd in ca-reward ca-gae "ca-toy score"; do
	expect_status 3 "$cmd: a 100 MB malformed line gives an error record under 4 KB" '
		{ echo "{\"id\":1}"; printf "{\"id\":\"big\",\"blob\":\""; head -c 100000000 /dev/zero | tr "\0" a; printf "\n"; echo "{\"id\":3}"; } >big &&
		'"$cmd"' big >out 2>err; s=$?
		test $(wc -l <out) = 3 && test $(sed -n 2p out | wc -c) -lt 4096 &&
		sed -n 2p out | jq -e ".error.line == 2 and (.error.message | startswith(\"malformed JSON: Unfinished string\"))" >/dev/null &&
		test $(wc -c <err) -lt 4096 && grep -q "big:2: malformed JSON" err && exit $s'
done
expect_success 'an error record stays under 4 KB whatever the file name' '
	d=$(head -c 200 /dev/zero | tr "\0" x) && dir=$d/$d/$d/$d/$d/$d/$d/$d/$d/$d && mkdir -p "$dir" &&
	echo "{bad" >"$dir/in" && ca-reward "$dir/in" >out 2>/dev/null;
	test $(wc -c <out) -lt 4096 && jq -e ".error.file | endswith(\"...\")" out >/dev/null'

# Fields a command does not touch pass through as they were written, also
# where libjq parses the line (a non-ASCII byte takes ca-reward off its
# fast path; ca-toy score always parses): libjq would round the big integer
# and write -0.0 as -0, 1e400 as 1.7976931348623157e+308, \u0041 as A.
for cmd in ca-reward "ca-toy score"; do
	expect_success "$cmd: untouched fields pass byte for byte" '
		printf "{\"id\":\"caf\303\251\",\"n\":12345678901234567890123,\"z\":-0.0,\"e\":1e400,\"s\":\"\\\\u0041\\\\/\",\"a\":[1.50,-0],\"verify\":{\"ok\":false}}\n" >in &&
		'"$cmd"' in >out 2>/dev/null;
		sed "s/,\"reward\".*}\$/}/" out >back && cmp_output in back'
done
expect_success 'a field a command replaces is written anew, the others as they came' '
	printf "{\"n\":12345678901234567890123,\"reward\":{\"was\":1e400},\"x\":\"\303\251\",\"verify\":{\"ok\":false}}\n" | ca-reward >out &&
	grep -qF "\"n\":12345678901234567890123" out && ! grep -q "was" out &&
	jq -e ".reward.value == -1 and (keys_unsorted == [\"n\", \"reward\", \"x\", \"verify\"])" out >/dev/null'
expect_success 'text libjq reads but JSON does not (nan, 01) is written as JSON' '
	printf "%s\n" "{\"x\":nan,\"y\":01,\"verify\":{\"ok\":false}}" | ca-reward >out &&
	python3 -c "import json,sys; json.loads(open(\"out\").read())" && jq -e ".x == null and .y == 1" out >/dev/null'

expect_success 'ca-gae: a 1,000,000-token line (about 10 MB) on the fast path' '
	awk "BEGIN { printf \"{\\\"values\\\":[\"; for (i = 0; i < 1000000; i++) printf \"%s0.%d\", (i ? \",\" : \"\"), i % 97; print \"],\\\"reward\\\":1}\" }" >long &&
	ca-gae long >out && test $(jq ".advantages | length" out) = 1000000'
test_done
