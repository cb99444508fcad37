#!/bin/sh
# bench-eval: how fast ca evaluates candidates (run on a GPU machine;
# `make bench-eval`). Each figure is measured in this one run:
#   1. cold build of a one-kernel candidate (ca-build, empty cache), then a cache hit;
#   2. verify + profile end to end, one candidate, task baselines already cached
#      (KernelBench level 1 #1, 4096^2 fp32 matmul, a cuBLAS candidate), single-shot
#      commands and a stream of 4 candidates (warm workers, spare candidate process);
#   3. the same candidate through CUDA-Agent's path (torch.utils.cpp_extension.load,
#      5 checks, 5 warm-up + 10 timed calls under torch.profiler), for the ratio;
#   4. repeatability: three profiles of the same candidate, spread of the medians,
#      and ca's candidate time beside the CUPTI sum of its kernels' durations.
# Results: one JSON object per measurement on stdout and in $CA_BENCH_OUT/bench-eval.ndjson.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
: "${CA_BIN:=$ROOT/bin}"
PATH=$CA_BIN:$PATH
export PATH
OUTDIR=${CA_BENCH_OUT:-${TMPDIR:-/tmp}/ca-bench-eval}
mkdir -p "$OUTDIR"
RESULTS=$OUTDIR/bench-eval.ndjson
: >"$RESULTS"
ADV=$ROOT/tests/adversarial
PY=${CA_PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export CA_CACHE=$WORK/cache

now() { date +%s.%N; }
emit() { echo "$1" | tee -a "$RESULTS"; }
record() { # id task dir
	jq -nc --arg id "$1" --rawfile code "$ADV/tasks/$2.py" --arg dir "$3" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
}

if ! command -v nvidia-smi >/dev/null 2>&1; then
	echo "bench-eval: no GPU here; nothing to measure" >&2
	exit 0
fi

# Candidates run sandboxed unless ca-sandbox cannot give them the GPU here.
if [ -z "${CA_EVAL_OPTS+set}" ]; then
	if ca-sandbox --gpu --env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" -- "$PY" -c \
		'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
		CA_EVAL_OPTS=
	else
		CA_EVAL_OPTS=--no-sandbox
	fi
fi
emit "$(jq -nc --arg o "$CA_EVAL_OPTS" '{bench: "setup", sandboxed: ($o == "")}')"

# 1. Builds.
cp -R "$ADV/honest/relu" "$WORK/relu"
t0=$(now); ca-build --cache "$WORK/build-cold" "$WORK/relu" >"$WORK/b1.json"; t1=$(now)
ca-build --cache "$WORK/build-cold" "$WORK/relu" >"$WORK/b2.json"; t2=$(now)
emit "$(jq -c --arg w1 "$(awk "BEGIN{print $t1 - $t0}")" --arg w2 "$(awk "BEGIN{print $t2 - $t1}")" -s \
	'{bench: "build", cold_s: .[0].seconds, cold_wall_s: ($w1 | tonumber), cached: .[1].cached, hit_s: .[1].seconds, hit_wall_s: ($w2 | tonumber)}' \
	"$WORK/b1.json" "$WORK/b2.json")"

# 2. Verify + profile of the matmul candidate; the first pass fills the baseline cache.
record matmul matmul "$ADV/honest/matmul" >"$WORK/mm.ndjson"
t0=$(now); ca-verify ${CA_EVAL_OPTS:-} <"$WORK/mm.ndjson" | ca-profile ${CA_EVAL_OPTS:-} >"$WORK/first.ndjson"; t1=$(now)
emit "$(jq -c --arg w "$(awk "BEGIN{print $t1 - $t0}")" '{bench: "verify+profile, baselines not cached", wall_s: ($w | tonumber), verify_ok: .verify.ok, profile_ok: .profile.ok, eager_us: .profile.eager_us, compile_us: .profile.compile_us, candidate_us: .profile.candidate_us}' "$WORK/first.ndjson")"
t0=$(now); ca-verify ${CA_EVAL_OPTS:-} <"$WORK/mm.ndjson" | ca-profile ${CA_EVAL_OPTS:-} >"$WORK/second.ndjson"; t1=$(now)
emit "$(jq -c --arg w "$(awk "BEGIN{print $t1 - $t0}")" '{bench: "verify+profile, baselines cached, single shot", wall_s: ($w | tonumber), baseline_cached: .profile.baseline_cached, verify_s: .verify.seconds, profile_s: .profile.seconds}' "$WORK/second.ndjson")"
for i in 1 2 3 4; do cat "$WORK/mm.ndjson"; done >"$WORK/mm4.ndjson"
t0=$(now); ca-verify ${CA_EVAL_OPTS:-} <"$WORK/mm4.ndjson" | ca-profile ${CA_EVAL_OPTS:-} >"$WORK/stream.ndjson"; t1=$(now)
emit "$(jq -c -s --arg w "$(awk "BEGIN{print $t1 - $t0}")" '{bench: "verify+profile, stream of 4 candidates", wall_s: ($w | tonumber), per_candidate_s: (($w | tonumber) / 4), all_ok: (map(.verify.ok and .profile.ok) | all), verify_s: map(.verify.seconds), profile_s: map(.profile.seconds)}' "$WORK/stream.ndjson")"

# 4. Repeatability on the matmul candidate (baselines cached).
for i in 1 2 3; do ca-profile ${CA_EVAL_OPTS:-} <"$WORK/mm.ndjson"; done >"$WORK/repeat.ndjson"
emit "$(jq -c -s '{bench: "repeatability, 3 profiles", candidate_us: map(.profile.candidate_us), spread: ((map(.profile.candidate_us) | max) / (map(.profile.candidate_us) | min) - 1), cupti_kernel_us_per_call: map(((.profile.kernels // []) | map(.total_us) | add) / .profile.iterations), cv: map(.profile.cv)}' "$WORK/repeat.ndjson")"
# 3. CUDA-Agent's path on the relu candidate (its binding wraps one x -> y launcher).
t0=$(now)
"$PY" "$ROOT/lib/py/ca_bench_cuda_agent.py" "$ADV/tasks/relu.py" "$ADV/honest/relu/kernels/relu.cu" relu_launch 3 "$WORK/ext" >"$WORK/cuda-agent.json" 2>"$OUTDIR/cuda-agent.err"
t1=$(now)
record relu relu "$ADV/honest/relu" >"$WORK/relu.ndjson"
CA_CACHE=$WORK/cache-relu
t2=$(now); CA_CACHE=$WORK/cache-relu ca-verify ${CA_EVAL_OPTS:-} <"$WORK/relu.ndjson" | CA_CACHE=$WORK/cache-relu ca-profile ${CA_EVAL_OPTS:-} >"$WORK/relu-ca.ndjson"; t3=$(now)
emit "$(jq -c -s --arg wa "$(awk "BEGIN{print $t1 - $t0}")" --arg wc "$(awk "BEGIN{print $t3 - $t2}")" '{bench: "CUDA-Agent path vs ca, relu candidate, cold caches", cuda_agent: .[0], cuda_agent_wall_s: ($wa | tonumber), ca_wall_s: ($wc | tonumber), ratio: (($wa | tonumber) / ($wc | tonumber)), ca_verify_ok: .[1].verify.ok, ca_profile_ok: .[1].profile.ok}' "$WORK/cuda-agent.json" "$WORK/relu-ca.ndjson")"

cp "$WORK"/*.ndjson "$OUTDIR"/ 2>/dev/null
exit 0
