#!/bin/sh
# Honest candidates judged by this checkout's ca-profile and by another
# commit's, side by side on the same GPU (session 23: t0150 on an H100
# judged honest/relu and relu_pos "timer tampered" by the call-by-call
# clock; session 19's code had passed there). Builds REV in a temporary
# worktree, then for each tree runs ca-verify | ca-profile -v with SLOTS
# slots on GPU 0 over the honest candidates named (tests/adversarial),
# baselines fresh, and prints each record's outcome and the -v lines of
# our clock ("beyond the reference's loop").
#
#   make all && sh bench/probe-ab.sh REV [SLOTS [CANDIDATE ...]]
#
# REV may also be a tar file of a tree (git archive REV > old.tar), for a
# copy of the checkout that has no .git, as on the device machine.
#   sh bench/probe-ab.sh 3419e48 0,0,0 relu relu_pos
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: probe-ab.sh REV [SLOTS [CANDIDATE ...]]" >&2; exit 2; }
REV=$1
SLOTS=${2:-0,0,0}
[ $# -gt 2 ] && shift 2 || set -- relu relu_pos
if ! command -v nvidia-smi >/dev/null 2>&1; then
	echo "probe-ab: no GPU here; nothing to measure" >&2
	exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
A=$ROOT/tests/adversarial
mkdir -p "$W/old"
if [ -f "$REV" ]; then
	tar -xf "$REV" -C "$W/old" || exit 1
else
	(cd "$ROOT" && git archive "$REV") | tar -x -C "$W/old" || exit 1
fi
(cd "$W/old" && make -j"$(nproc)" all >"$W/build.log" 2>&1) || { tail -20 "$W/build.log"; exit 1; }
for name in "$@"; do
	d=$A/honest/$name
	jq -nc --arg id "honest/$name" --rawfile code "$A/tasks/$(sed -n 's/^task=//p' "$d/expect").py" --arg dir "$d" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
done >"$W/records.ndjson"
for tree in here "$REV"; do
	B=$ROOT/bin
	[ "$tree" = here ] || B=$W/old/bin
	export CA_CACHE="$W/cache-$tree"
	"$B/ca-verify" --gpus 0 --timeout 15 <"$W/records.ndjson" >"$W/verified.ndjson" 2>/dev/null
	"$B/ca-profile" -v --gpus "$SLOTS" --timeout 30 --iters 20 --no-compile <"$W/verified.ndjson" 2>"$W/err" |
		jq -c --arg t "$tree" '{tree: $t, id, ok: .profile.ok, stage: .profile.stage, eager_us: .profile.eager_us,
			candidate_us: .profile.candidate_us, error: (.profile.error // "" | .[0:200])}'
	grep -h "beyond the reference" "$W/err" | cut -c1-300 | while IFS= read -r line; do
		printf '  %s: %s\n' "$tree" "$line"
	done
done
