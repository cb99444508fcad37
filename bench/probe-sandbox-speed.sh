#!/bin/sh
# Does ca-sandbox slow the code it runs? The same Python loop (an
# interpreter's work: what a timed loop's own work around each call is)
# timed outside the sandbox, inside it, and inside it without its seccomp
# filter (CA_SANDBOX_SKIP=seccomp), in turn, three rounds; with the
# kernel's speculation settings and each process's Specul* lines from
# /proc/self/status. A filter that forces the mitigations shows as
# "thread force mitigated" inside and a ratio well over 1 (session 17's
# doubted loops on the H200, bench/eval-h200.md).
#
#   make all && sh bench/probe-sandbox-speed.sh [PYTHON]
#
# PYTHON (any, torch not needed) must be one the sandbox's user can run:
# /usr/bin/python3 by default.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATH=$ROOT/bin:$PATH
PY=${1:-/usr/bin/python3}
VENV=$(dirname "$(dirname "$PY")")
if ! ca-sandbox --show "$VENV" -- "$PY" -c pass; then
	echo "probe-sandbox-speed: the sandbox cannot run $PY (name one its user can read)" >&2
	exit 1
fi
echo "kernel: $(uname -r)"
for f in spec_store_bypass spectre_v2; do
	echo "$f: $(cat /sys/devices/system/cpu/vulnerabilities/$f 2>/dev/null || echo '?')"
done
LOOP='
import time
def work(n):
    d = {}
    for i in range(n):
        d[i % 97] = d.get(i % 97, 0) + i * 3
    return d
t = time.perf_counter(); work(6000000); print("%.3f" % (time.perf_counter() - t))
'
SPEC='print(" | ".join(l.strip() for l in open("/proc/self/status") if l.startswith("Specul")))'
echo "outside: $("$PY" -c "$SPEC")"
echo "inside:  $(ca-sandbox --show "$VENV" -- "$PY" -c "$SPEC" 2>&1)"
echo "inside, no seccomp: $(CA_SANDBOX_SKIP=seccomp ca-sandbox --show "$VENV" -- "$PY" -c "$SPEC" 2>&1)"
for round in 1 2 3; do
	o=$("$PY" -c "$LOOP")
	i=$(ca-sandbox --show "$VENV" -- "$PY" -c "$LOOP" 2>&1)
	n=$(CA_SANDBOX_SKIP=seccomp ca-sandbox --show "$VENV" -- "$PY" -c "$LOOP" 2>&1)
	awk -v r="$round" -v o="$o" -v i="$i" -v n="$n" 'BEGIN {
		printf "round %d: outside %.3f s, inside %.3f s (%.2fx), inside without seccomp %.3f s (%.2fx)\n", r, o, i, i / o, n, n / o }'
done
