#!/bin/sh
# make-sample.sh: the run that made data/sample-tasks.ndjson.gz on one GPU.
#
#   sh data/make-sample.sh OUTDIR SECONDS
#
# Crawls seeds, composes tasks, filters them with the full rubric for SECONDS seconds of
# wall clock, and leaves in OUTDIR: seeds.ndjson (ca-crawl), filtered.ndjson,
# kernelbench.ndjson (the rubric on KernelBench levels 1-2 itself, when
# .devdata/kernelbench.ndjson is there), and run.txt (versions, counts,
# throughput), log.txt (the tails of the diagnostics). Binaries come from bin-c/ (or $CA_BIN) and may need the
# libraries in .devkit/.
set -u
out=${1:-sample-out}
secs=${2:-180}
bin=${CA_BIN:-$PWD/bin-c}
mkdir -p "$out"
work=$(mktemp -d)
export LD_LIBRARY_PATH="$PWD/.devkit${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bin:$PWD/.devkit:$PATH" PYTHONUNBUFFERED=1
: "${CA_PYTHON:=python3}"
export CA_PYTHON
seed=${SEED:-2026} jobs=${JOBS:-12} target=${TARGET_MS:-8} count=${COUNT:-4000}

{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
	echo "torch: $("$CA_PYTHON" -c 'import torch; print(torch.__version__)')"
	echo "cpus: $(nproc)"
	echo "filter: ca-filter -j $jobs ${FILTER_OPTS:-}(stopped after ${secs}s)"
} >"$out/run.txt"
# Seeds from the torch and transformers installed here; without them the
# whole operator table is used (--no-seeds).
t0=$(date +%s)
timeout -s TERM "${CRAWL_SECS:-90}" ca-crawl >"$out/seeds.ndjson" 2>"$work/crawl.err"
echo "seeds: $(wc -l <"$out/seeds.ndjson") ($(grep -c '"concrete":true' "$out/seeds.ndjson") concrete) in $(($(date +%s) - t0)) s" >>"$out/run.txt"
if [ -s "$out/seeds.ndjson" ]; then
	echo "compose: ca-compose -n $count --seed $seed --target-ms $target --max-tensor-mb 1024 seeds.ndjson" >>"$out/run.txt"
	ca-compose -n "$count" --seed "$seed" --target-ms "$target" --max-tensor-mb 1024 "$out/seeds.ndjson" >"$work/composed.ndjson"
else
	echo "compose: ca-compose --no-seeds -n $count --seed $seed --target-ms $target --max-tensor-mb 1024" >>"$out/run.txt"
	ca-compose --no-seeds -n "$count" --seed "$seed" --target-ms "$target" --max-tensor-mb 1024 >"$work/composed.ndjson"
fi
start=$(date +%s)
timeout -s TERM "$secs" ca-filter -u -j "$jobs" --timeout 120 ${FILTER_OPTS:-} <"$work/composed.ndjson" >"$out/filtered.ndjson" 2>"$work/filter.err"
end=$(date +%s)
checked=$(wc -l <"$out/filtered.ndjson")
accepted=$(grep -c '"filter":{"ok":true' "$out/filtered.ndjson")
{
	echo "filter wall seconds: $((end - start))"
	echo "checked: $checked"
	echo "accepted: $accepted"
	echo "accepted per GPU-minute: $(echo "$accepted $end $start" | awk '{printf "%.1f", $1 * 60 / ($2 - $3)}')"
} >>"$out/run.txt"
if [ -f .devdata/kernelbench.ndjson ]; then
	grep -E '"level": (1|2),' .devdata/kernelbench.ndjson |
		timeout -s TERM "${KB_SECS:-60}" ca-filter -u -j "${KB_JOBS:-6}" --no-compile --max-sim 1 --timeout 60 \
		>"$out/kernelbench.ndjson" 2>"$work/kernelbench.err"
	echo "kernelbench checked: $(wc -l <"$out/kernelbench.ndjson")" >>"$out/run.txt"
fi
for f in crawl.err filter.err kernelbench.err; do
	[ -s "$work/$f" ] && { echo "== $f"; tail -n 20 "$work/$f"; }
done >"$out/log.txt"
rm -rf "$work"
cat "$out/run.txt"
