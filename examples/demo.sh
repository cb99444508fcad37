#!/bin/sh
# demo.sh: the main job on the records shipped in examples/, no GPU needed
# (`make demo`). It grows with the commands: each stage a pipeline stage.
#
#   profiled.ndjson  candidates already through ca-verify and ca-profile
#   tokens.ndjson    token trajectories with critic values, for ca-gae
#
# Ends with the paper's Table 1 (ca-stats -t). Intermediate records go to
# $CA_DEMO_DIR (default: a temporary directory, removed at the end).
set -e
cd "$(dirname "$0")/.."
: "${CA_BIN:=bin}"
PATH=$(cd "$CA_BIN" && pwd):$PATH
export PATH
if [ -n "$CA_DEMO_DIR" ]; then
	out=$CA_DEMO_DIR
	mkdir -p "$out"
else
	out=$(mktemp -d)
	trap 'rm -rf "$out"' EXIT
fi

echo "== rollout, last stage: ca-reward < examples/profiled.ndjson" >&2
ca-reward examples/profiled.ndjson >"$out/rewarded.ndjson"
echo "   $(wc -l <"$out/rewarded.ndjson") records rewarded" >&2

echo "== training, advantages: ca-gae --whiten < examples/tokens.ndjson" >&2
ca-gae --whiten examples/tokens.ndjson >"$out/advantages.ndjson"
awk 'BEGIN { FS = "\"advantages\":\\[" } { split($2, a, ","); id = $0; sub(/.*"id":"/, "", id); sub(/".*/, "", id)
	printf "   %-10s first advantage %s\n", id, a[1] }' "$out/advantages.ndjson" >&2

echo "== Table 1: ca-stats -t --by level" >&2
ca-stats -t --by level "$out/rewarded.ndjson"
