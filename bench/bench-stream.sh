#!/bin/sh
# bench-stream.sh: record-stream throughput of ca-gae and ca-reward against
# `jq -c .` on the same generated NDJSON token stream, in the same run.
#
#   CA_BIN=bin sh bench/bench-stream.sh [MB]      (default 200 MB)
#
# BENCH_JV=1 also times ca-gae --jv (libjq for every record, the reference).
# The stream (cached as $TMPDIR/ca-bench-MB.ndjson) holds trajectory
# records as ca-gae reads them: values (6 decimals), a mask with ~20%
# environment tokens, an outcome reward, plus verify and profile objects
# so that ca-reward has its inputs too. Output goes to /dev/null.
set -e
cd "$(dirname "$0")/.."
: "${CA_BIN:=bin}"
mb=${1:-200}
data=${TMPDIR:-/tmp}/ca-bench-$mb.ndjson
bytes=$((mb * 1000000))

if [ ! -f "$data" ] || [ "$(wc -c <"$data")" -lt "$bytes" ]; then
	echo "bench: generating $mb MB of token records in $data" >&2
	awk -v bytes="$bytes" 'BEGIN {
		srand(42)
		while (total < bytes) {
			n = 1000 + int(rand() * 7000)
			line = sprintf("{\"id\":\"traj-%d\",\"verify\":{\"ok\":true},\"profile\":{\"ok\":true,\"eager_us\":%.1f,\"compile_us\":%.1f,\"candidate_us\":%.1f},\"values\":[", r++, 50 + rand() * 500, 40 + rand() * 400, 30 + rand() * 600)
			v = ""; m = ""
			for (i = 0; i < n; i++) {
				v = v sprintf("%s%.6f", (i ? "," : ""), rand() * 2 - 1)
				m = m (i ? "," : "") (rand() < 0.8 ? 1 : 0)
			}
			line = line v "],\"mask\":[" m "],\"reward\":" (int(rand() * 4) + (rand() < 0.3 ? -1 : 0)) "}"
			print line
			total += length(line) + 1
			tokens += n
		}
		printf "%d\n", tokens > "/dev/stderr"
	}' >"$data.tmp" 2>"$data.tokens"
	mv "$data.tmp" "$data"
fi
size=$(wc -c <"$data")
tokens=$(cat "$data.tokens" 2>/dev/null || jq '.values | length' "$data" | awk '{ s += $1 } END { print s }')
records=$(wc -l <"$data")

now() { date +%s.%N; }
timing=$(mktemp)
trap 'rm -f "$timing"' EXIT
# run NAME COMMAND...: time one pass over the data and print a line. The
# rates use CPU time (user + system, from /usr/bin/time when installed),
# which other load on the machine does not inflate; wall time is shown too.
run() {
	name=$1
	shift
	cat "$data" >/dev/null  # the same page-cache state for every contender
	t0=$(now)
	if [ -x /usr/bin/time ]; then
		/usr/bin/time -f "%U %S" -o "$timing" "$@" <"$data" >/dev/null
	else
		"$@" <"$data" >/dev/null
		echo "" >"$timing"
	fi
	t1=$(now)
	line=$(awk -v t0="$t0" -v t1="$t1" '{ cpu = $1 + $2 } END { wall = t1 - t0; if (cpu == 0) cpu = wall; printf "%.3f %.3f", cpu, wall }' "$timing")
	set -- $line
	[ "$name" = jq ] && jq_cpu=$1
	echo "$name $line" | awk -v size="$size" -v tokens="$tokens" -v jq="$jq_cpu" '{
		ratio = ($1 == "jq") ? "(baseline)" : sprintf("%.2fx jq", jq / $2)
		printf "%-14s cpu %7.2f s  wall %7.2f s  %7.1f MB/s  %11.0f tokens/s  %s\n", $1, $2, $3, size / 1e6 / $2, tokens / $2, ratio }'
}

echo "bench: $(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1e6 }'), $records records, $tokens tokens; $(nproc) CPUs; $(jq --version)"
run jq jq -c .
run ca-gae "$CA_BIN/ca-gae"
run ca-gae-whiten "$CA_BIN/ca-gae" --whiten
run ca-reward "$CA_BIN/ca-reward"
# The training-side pipeline: the reward object replaces the outcome reward, ca-gae reads its value.
run reward-gae sh -c '"$0/ca-reward" | "$0/ca-gae"' "$CA_BIN"
# libjq for every record (ca-gae's reference path); slow, so only on request.
[ "${BENCH_JV:-0}" = 1 ] && run ca-gae-jv "$CA_BIN/ca-gae" --jv
true
