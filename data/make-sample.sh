#!/bin/sh
# make-sample.sh: the run that makes data/sample-*.ndjson.gz on one GPU machine.
#
#   sh data/make-sample.sh OUTDIR
#
# In parallel, bounded to END seconds of wall clock (172 by default):
#   - ca-crawl -j 8 | ca-compose -n COUNT --seed SEED | ca-filter -j FJOBS, the
#     filter started first so that its workers start (import torch, warm
#     torch.compile up) while the crawl runs; the composed tasks from number
#     SKIP+1 on are fed, so a second run continues where the first stopped;
#   - KernelBench levels 1 and 3 (from .devdata/kernelbench.ndjson, problems
#     from number KSKIP+1 on) through the rubric, without compile;
#   - tests/gpu/t0300.
# Leaves in OUTDIR: filtered.ndjson.gz (every composed task checked),
# seeds.ndjson.gz, kb.ndjson.gz and log.txt (versions, timings, counts,
# throughput, the reasons, t0300 and the tails of the diagnostics).
# Binaries from $SBIN (default ./bin); the interpreter from $CA_PYTHON
# (default python3 in PATH); .devkit holds jq for machines without it.
export LD_LIBRARY_PATH="$PWD/.devkit${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="$PWD/.devkit:$PATH"
S=${1:?usage: make-sample.sh OUTDIR}
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
B=${SBIN:-$PWD/bin}
export PATH=$B:$PATH CA_PYTHON=${CA_PYTHON:-$(command -v python3)} PYTHONUNBUFFERED=1
mkdir -p "$S"; L=$S/log.txt
W=$(mktemp -d /tmp/make-sample.XXXXXX)
# Batch 2 continues the same composed list: SKIP composed tasks were filtered in batch 1.
SEED=${SEED:-2026} COUNT=${COUNT:-6000} SKIP=${SKIP:-0}
FJOBS=${FJOBS:-11} KJOBS=${KJOBS:-4} END=${END:-172} KSKIP=${KSKIP:-0}
export CA_FILTER_TIMING_LOCK=$W/timing.lock
{
	echo "date: $(date -u +%FT%TZ)"
	echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
	echo "python: $CA_PYTHON"
	echo "cpus: $(nproc)"
	echo "params: seed=$SEED count=$COUNT skip=$SKIP kskip=$KSKIP filter_jobs=$FJOBS kb_jobs=$KJOBS end=$END"
} >"$L"

( timeout 60 "$CA_PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)' >"$W/versions" 2>&1 ) &
# 1. GPU test t0300 (2 workers, small).
( CA_BIN=$B timeout -k 5 120 nice -n 5 sh tests/run.sh tests/gpu/t0300-synth-gpu.sh >"$W/t0300.log" 2>&1
  echo "t0300 rc=$? at $(el) s" >>"$W/t0300.log" ) &
P_T=$!

# 2. KernelBench levels 1 and 3 through the rubric (no compile: the benchmark's own
#    problems; no decontamination: they are the reference set).
( grep -E '"level": (1|3),' .devdata/kernelbench.ndjson |
	jq -c '{id: "kernelbench/L\(.level)/\(.num)", level, num, name, code}' | tail -n +"$((KSKIP + 1))" >"$W/kb-in.ndjson"
  kstart=$(date +%s)
  timeout -k 15 -s TERM $((END - 10 - $(el))) nice -n 5 ca-filter -u -j "$KJOBS" --no-compile --max-sim 1 --timeout 60 \
	<"$W/kb-in.ndjson" >"$W/kb.ndjson" 2>"$W/kb.err"
  echo "kb: ca-filter rc=$? $(wc -l <"$W/kb.ndjson")/$(wc -l <"$W/kb-in.ndjson") checked in $(( $(date +%s) - kstart )) s" >"$W/kb.sum" ) &
P_K=$!

# 3. The pipeline: ca-filter starts first (its workers import torch and warm
#    torch.compile while the crawl runs), reading the composed tasks from a FIFO.
#    The crawl is the critical path: everything else runs at nice 5.
mkfifo "$W/tasks"
FSTART=$(date +%s)
timeout -k 15 -s TERM $((END - $(el))) nice -n 5 ca-filter -u -j "$FJOBS" --timeout 45 <"$W/tasks" >"$W/filtered.ndjson" 2>"$W/filter.err" &
P_F=$!
exec 3>"$W/tasks"
timeout -k 5 60 ca-crawl -j 8 --timeout 55 ${CRAWL_ARGS:-} >"$W/seeds.ndjson" 2>"$W/crawl.err"
echo "crawl: rc=$? $(wc -l <"$W/seeds.ndjson") seeds ($(jq -c 'select(.seed.concrete)' "$W/seeds.ndjson" | wc -l) concrete) at $(el) s" >>"$L"
if [ -s "$W/seeds.ndjson" ]; then
	ca-compose -n "$COUNT" --seed "$SEED" --target-ms 8 --max-tensor-mb 1024 "$W/seeds.ndjson" >"$W/composed.ndjson" 2>"$W/compose.err"
	echo "compose: rc=$? ca-compose -n $COUNT --seed $SEED --target-ms 8 --max-tensor-mb 1024 seeds.ndjson" >>"$L"
else
	ca-compose --no-seeds -n "$COUNT" --seed "$SEED" --target-ms 8 --max-tensor-mb 1024 >"$W/composed.ndjson" 2>"$W/compose.err"
	echo "compose: rc=$? (no seeds!) ca-compose --no-seeds -n $COUNT --seed $SEED --target-ms 8 --max-tensor-mb 1024" >>"$L"
fi
echo "composed: $(wc -l <"$W/composed.ndjson") tasks ($(jq -r .source "$W/composed.ndjson" | sort | uniq -c | tr '\n' ' ')), feeding from #$((SKIP + 1)) at $(el) s" >>"$L"
TFEED=$(date +%s)
tail -n +"$((SKIP + 1))" "$W/composed.ndjson" >&3 2>/dev/null
exec 3>&-
wait $P_F
FRC=$? FEND=$(date +%s)
{
	echo "filter: rc=$FRC, ended at $(el) s; $((FEND - FSTART)) s from ca-filter's start (workers' start-up included), $((FEND - TFEED)) s from the first task fed"
	n=$(wc -l <"$W/filtered.ndjson")
	a=$(jq -c 'select(.filter.ok)' "$W/filtered.ndjson" | wc -l)
	i=$(jq -c 'select(.filter.reasons | map(test("^interrupted")) | any)' "$W/filtered.ndjson" | wc -l)
	echo "checked: $n (interrupted $i) accepted: $a"
	echo "first interrupted: $(jq -r 'select(.filter.reasons | map(test("^interrupted")) | any) | .id' "$W/filtered.ndjson" | head -1)"
	echo "accepted per GPU-minute: $(awk -v a="$a" -v s="$((FEND - FSTART))" 'BEGIN{printf "%.1f", a * 60 / s}') (over ca-filter's whole run)"
	echo "rejection reasons:"
	jq -r 'select(.filter.ok | not) | .filter.reasons[0] | sub("[:(].*"; "")' "$W/filtered.ndjson" | sort | uniq -c | sort -rn
	echo "seconds per task: $(jq -r '.filter.seconds // empty' "$W/filtered.ndjson" | sort -n | awk '{v[NR]=$1} END{if(NR) printf "median %s p90 %s max %s", v[int((NR+1)/2)], v[int(NR*0.9)], v[NR]}')"
} >>"$L"
wait $P_K
cat "$W/kb.sum" >>"$L" 2>/dev/null
{
	echo "kb flagged (not ok), by reason:"
	jq -r 'select(.filter.ok | not) | "\(.id) \(.name): \(.filter.reasons | join("; "))"' "$W/kb.ndjson" | cut -c1-300
} >>"$L"
wait $P_T
{
	echo "versions: $(tail -1 "$W/versions")"
	echo "== t0300"; cat "$W/t0300.log"
	for f in crawl.err compose.err filter.err kb.err; do
		[ -s "$W/$f" ] && { echo "== $f (tail)"; tail -n 15 "$W/$f" | cut -c1-400; }
	done
	nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>&1 | head -1
	echo "total: $(el) s"
} >>"$L"
gzip -c "$W/filtered.ndjson" >"$S/filtered.ndjson.gz"
gzip -c "$W/seeds.ndjson" >"$S/seeds.ndjson.gz"
gzip -c "$W/kb.ndjson" >"$S/kb.ndjson.gz"
rm -rf "$W"
grep -vE '^ok ' "$L" | head -80
