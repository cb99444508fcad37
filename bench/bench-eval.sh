#!/bin/sh
# bench-eval: how fast ca evaluates candidates (run on a GPU machine;
# `make bench-eval`). Every figure and every ratio is measured in this one run:
#   1. builds: a one-kernel candidate (ca flavour) cold with ca-build, then a cache hit;
#   2. verify + profile end to end of one candidate whose task baselines are
#      cached, for a task of a few ms (4096^2 fp32 matmul through cuBLAS):
#      `ca-profile --verify` (one run does both), `ca-verify | ca-profile`,
#      the same through an evaluation server (ca-profile --serve), and a
#      stream of 4 candidates;
#   3. CUDA-Agent's path beside ca's on the same ReLU kernel: CUDA-Agent's
#      agent_workdir evaluated as its scripts do (torch.utils.cpp_extension.load
#      of all kernels, 5 checks, 5 warm-up + 10 timed calls under torch.profiler
#      for the candidate, eager and torch.compile; three processes, as
#      compile.sh, verification and profiling are), against ca-profile --verify
#      on the same kernel in ca's layout (cold build; cold and cached baselines;
#      and, unless the server section is skipped, a cold build with cached
#      baselines through a running evaluation server, the RL pipeline's case:
#      no Python, torch or CUDA start-up on the record's path) and in
#      CUDA-Agent's layout (built by ca-build);
#   2b. the cost of verify's robustness checks: ca-verify --robust 0 against
#      the default on the matmul and on a ~70 us ReLU;
#   5b. nvcc against ca-nvcc on a load_inline unit (torch/extension.h, the
#      flags of torch's ninja build), side by side with their phase times;
#   6. the first record of a new task (its baselines not cached) on a used
#      machine, one task a process and two in one stream;
#   4. repeatability: three profiles of the matmul candidate, the spread of
#      their medians (and of the host clock's, the method before CUDA
#      events), and ca's candidate time beside the sum of the kernel
#      durations CUPTI saw and, when ncu is there, Nsight Compute's.
# The steps run in the order 1, 3, 5, 5b, 6, 2, 4 (the ratio first), the stream last.
# Results: one JSON object per measurement on stdout and in $CA_BENCH_OUT/bench-eval.ndjson.
# CA_BENCH_BUDGET (seconds, default 600) bounds the whole run: steps that
# would not fit are skipped and say so; CA_BENCH_SKIP names sections to
# leave out (ratio, layouts, flavours, nvcc, newtask, single, robust, server, repeat, stream, ncu).
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
BUDGET=${CA_BENCH_BUDGET:-600}
START=$(date +%s)

now() { date +%s.%N; }
since() { awk "BEGIN{printf \"%.3f\", $(now) - $1}"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }
# fits N: whether N more seconds fit in the budget (else a skip line).
fits() {
	[ "$(left)" -ge "$1" ] && return 0
	emit "$(jq -nc --arg s "$2" '{bench: $s, skipped: "out of time (CA_BENCH_BUDGET)"}')"
	return 1
}
emit() { echo "$1" | tee -a "$RESULTS"; }
# want SECTION: not named in $CA_BENCH_SKIP (ratio, layouts, flavours, nvcc, newtask, single, robust, server, repeat, stream, ncu).
want() { case " ${CA_BENCH_SKIP:-} " in *" $1 "*) return 1 ;; esac; return 0; }
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
O=${CA_EVAL_OPTS:-}
emit "$(jq -nc --arg o "$O" --arg g "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)" '{bench: "setup", gpu: $g, sandboxed: ($o == "")}')"

# 1. Builds.
cp -R "$ADV/honest/relu" "$WORK/relu"
t0=$(now); ca-build --cache "$WORK/build-cold" "$WORK/relu" >"$WORK/b1.json"; w1=$(since "$t0")
t0=$(now); ca-build --cache "$WORK/build-cold" "$WORK/relu" >"$WORK/b2.json"; w2=$(since "$t0")
emit "$(jq -c --arg w1 "$w1" --arg w2 "$w2" -s \
	'{bench: "build, one-kernel candidate", cold_s: .[0].seconds, cold_wall_s: ($w1 | tonumber), cached: .[1].cached, hit_s: .[1].seconds, hit_wall_s: ($w2 | tonumber), target: "cold <= 2 s, hit <= 0.1 s"}' \
	"$WORK/b1.json" "$WORK/b2.json")"

# 3. CUDA-Agent's path vs ca's on the same ReLU kernel (task relu_mid).
if want ratio && fits 70 "CUDA-Agent path vs ca"; then
	CA_DIR=$ADV/flavours/cuda_agent
	t0=$(now)
	for phase in compile verify profile; do
		"$PY" "$ROOT/lib/py/ca_bench_cuda_agent.py" $phase "$ADV/tasks/relu_mid.py" "$CA_DIR" "$WORK/ext" >>"$WORK/cuda-agent.json" 2>>"$OUTDIR/cuda-agent.err" || break
	done
	wa=$(since "$t0")
	record relu relu_mid "$ADV/honest/relu" >"$WORK/relu.ndjson"
	record relu-cuda-agent relu_mid "$CA_DIR" >"$WORK/relu-agent.ndjson"
	# ca, everything cold: an empty build cache and no baselines.
	t0=$(now); CA_CACHE=$WORK/cache-relu ca-profile --verify $O <"$WORK/relu.ndjson" >"$WORK/relu-cold.ndjson"; wc=$(since "$t0")
	# ca, a new candidate of a task whose baselines are cached (the RL case): cold build.
	rm -rf "$WORK/cache-relu/build"
	t0=$(now); CA_CACHE=$WORK/cache-relu ca-profile --verify $O <"$WORK/relu.ndjson" >"$WORK/relu-warm.ndjson"; ww=$(since "$t0")
	# The same through a running server (its start-up not counted: it serves a whole run).
	ws=0
	: >"$WORK/relu-srv.ndjson"
	if want server; then
		mkdir -p "$WORK/srvr" && chmod 700 "$WORK/srvr"
		CA_CACHE=$WORK/cache-relu CA_EVAL_SERVE_IDLE=120 ca-profile --serve "$WORK/srvr/s" $O 2>"$OUTDIR/serve-ratio.err" &
		srv=$!
		i=0; while [ ! -S "$WORK/srvr/s" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
		sleep 8  # the server's workers start
		rm -rf "$WORK/cache-relu/build"
		t0=$(now); CA_CACHE=$WORK/cache-relu CA_EVAL_SERVER=$WORK/srvr/s ca-profile --verify $O <"$WORK/relu.ndjson" >"$WORK/relu-srv.ndjson"; ws=$(since "$t0")
		kill $srv 2>/dev/null
		wait $srv 2>/dev/null
	fi
	wg=0 wk1=0 wk2=0
	: >"$WORK/relu-agent-ca.ndjson"; : >"$WORK/relu-kb1.ndjson"; : >"$WORK/relu-kb2.ndjson"
	if want layouts; then
		# ca on CUDA-Agent's own layout (a torch extension built by ca-build), baselines cached.
		t0=$(now); CA_CACHE=$WORK/cache-relu ca-profile --verify $O <"$WORK/relu-agent.ndjson" >"$WORK/relu-agent-ca.ndjson"; wg=$(since "$t0")
		# and on KernelBench's layout (load_inline at import), cold, then again (its build cached by ca).
		record relu-kernelbench relu_mid "$ADV/flavours/kernelbench" >"$WORK/relu-kb.ndjson"
		t0=$(now); CA_CACHE=$WORK/cache-relu ca-profile --verify $O <"$WORK/relu-kb.ndjson" >"$WORK/relu-kb1.ndjson"; wk1=$(since "$t0")
		t0=$(now); CA_CACHE=$WORK/cache-relu ca-profile --verify $O <"$WORK/relu-kb.ndjson" >"$WORK/relu-kb2.ndjson"; wk2=$(since "$t0")
	fi
	emit "$(jq -nc --arg wa "$wa" --arg wc "$wc" --arg ww "$ww" --arg ws "$ws" --arg wg "$wg" --arg wk1 "$wk1" --arg wk2 "$wk2" --slurpfile a "$WORK/cuda-agent.json" \
		--slurpfile c "$WORK/relu-cold.ndjson" --slurpfile w "$WORK/relu-warm.ndjson" --slurpfile s "$WORK/relu-srv.ndjson" --slurpfile g "$WORK/relu-agent-ca.ndjson" \
		--slurpfile k1 "$WORK/relu-kb1.ndjson" --slurpfile k2 "$WORK/relu-kb2.ndjson" \
		'def ok(r): if (r | length) == 0 then null else (r | map(.verify.ok and .profile.ok) | all) end;
		{bench: "CUDA-Agent path vs ca, ReLU 2048x2048, one candidate end to end",
		cuda_agent: $a, cuda_agent_ok: ($a | length == 3), cuda_agent_wall_s: ($wa | tonumber),
		ca_all_cold_wall_s: ($wc | tonumber), ca_cached_baselines_wall_s: ($ww | tonumber), ca_cuda_agent_layout_wall_s: ($wg | tonumber),
		ca_server_wall_s: ($ws | tonumber),
		ratio_all_cold: (($wa | tonumber) / ($wc | tonumber)), ratio_cached_baselines: (($wa | tonumber) / ($ww | tonumber)),
		ratio_server: (if ($ws | tonumber) > 0 then ($wa | tonumber) / ($ws | tonumber) else null end),
		ratio_same_layout: (if ($wg | tonumber) > 0 then ($wa | tonumber) / ($wg | tonumber) else null end), target: "ratio >= 10",
		ca_kernelbench_layout_wall_s: [($wk1 | tonumber), ($wk2 | tonumber)], ca_kernelbench_extension_cached: ($k2 | map(.verify.extension_cached)),
		ca_ok: [ok($c), ok($w), ok($g), ok($k1), ok($k2), ok($s)],
		errors: ([$c, $w, $g, $k1, $k2, $s] | map(.[0] // {} | (.verify.error // .profile.error)))}')"
fi

# 5. Builds per workspace flavour, each beside its anchor building the same sources in one run.
#    cuda-agent (CUDA-Agent's agent_workdir: binding.cpp, the registry, kernels/relu.cu and
#    relu_binding.cpp): the anchor is CUDA-Agent's compile step (torch.utils.cpp_extension.load
#    of every source, -O3, a fresh build directory); ca-build with an empty cache (torch's
#    precompiled header made in the background meanwhile), the same waiting for the header
#    (CA_BUILD_PCH=wait, another empty cache), a new candidate whose binding changed (header made;
#    binding.cpp's unit cached), one whose kernel alone changed, every unit cold with the header
#    made, and a hit.
#    kernelbench (model_new.py with load_inline): the anchor is torch's own load_inline of it at
#    import, cold; ca's whole verify+profile of it cold (baselines cached; ninja's time of each
#    unit and the run's phases) and again. Then a new CUDA-Agent candidate's whole verify+profile,
#    the header made.
if want flavours && fits 300 "builds per flavour"; then
	FA=$WORK/fl-agent C=$WORK/cache-fl
	cp -R "$ADV/flavours/cuda_agent" "$FA"
	t0=$(now); "$PY" "$ROOT/lib/py/ca_bench_cuda_agent.py" compile "$ADV/tasks/relu_mid.py" "$FA" "$WORK/ext-fl" >"$WORK/fl-anchor.json" 2>>"$OUTDIR/cuda-agent.err"; wa=$(since "$t0")
	t0=$(now); ca-build --cache "$C" "$FA" >"$WORK/fl-b1.json"
	# The header made in the background: ready (or failed) within 300 s.
	pch_done() { for f in "$C"/pch/*/torch.h.gch "$C"/pch/*/torch.h.pch "$C"/pch/*.failed; do [ -e "$f" ] && return 0; done; return 1; }
	i=0; while [ $i -lt 600 ] && ! pch_done; do sleep 0.5; i=$((i + 1)); done; wp=$(since "$t0")
	CA_BUILD_PCH=wait ca-build --cache "$WORK/cache-fl-wait" "$FA" >"$WORK/fl-b0.json"
	echo "// a new candidate" >>"$FA/kernels/relu_binding.cpp"
	ca-build --cache "$C" "$FA" >"$WORK/fl-b2.json"
	echo "// a new kernel" >>"$FA/kernels/relu.cu"
	ca-build --cache "$C" "$FA" >"$WORK/fl-b3.json"
	rm -rf "$C/units"; echo "// all units cold" >>"$FA/kernels/relu.cu"
	ca-build --cache "$C" "$FA" >"$WORK/fl-b4.json"
	ca-build --cache "$C" "$FA" >"$WORK/fl-b5.json"
	emit "$(jq -nc --arg wa "$wa" --arg wp "$wp" --slurpfile a "$WORK/fl-anchor.json" --slurpfile b0 "$WORK/fl-b0.json" \
		--slurpfile b1 "$WORK/fl-b1.json" --slurpfile b2 "$WORK/fl-b2.json" \
		--slurpfile b3 "$WORK/fl-b3.json" --slurpfile b4 "$WORK/fl-b4.json" --slurpfile b5 "$WORK/fl-b5.json" \
		'def r(b): {s: b[0].seconds, ok: b[0].ok, units: b[0].units, pch: b[0].pch, light: b[0].light, cxx: b[0].cxx, linker: b[0].linker, ratio: (($wa | tonumber) / b[0].seconds)};
		{bench: "build, cuda-agent layout (CUDA-Agent agent_workdir, ReLU), anchor: CUDA-Agent compile (cpp_extension.load)",
		anchor_wall_s: ($wa | tonumber), anchor: $a[0], first_ever: r($b1), pch_ready_after_s: ($wp | tonumber),
		first_ever_waiting_for_pch: r($b0), new_binding: r($b2), new_kernel_only: r($b3),
		all_units_cold: r($b4), hit: r($b5), target: "build <= 3 s"}')"
	KB=$ADV/flavours/kernelbench
	t0=$(now); (cd "$KB" && TORCH_EXTENSIONS_DIR=$WORK/te-fl "$PY" -c 'import model_new' >/dev/null 2>>"$OUTDIR/kernelbench-anchor.err"); wk=$(since "$t0")
	record relu-kernelbench relu_mid "$KB" >"$WORK/fl-kb.ndjson"
	rm -rf "$WORK/cache-relu/torch-ext"  # cold, whether or not the layouts section built it
	t0=$(now); CA_CACHE=$WORK/cache-relu ca-profile --verify $O <"$WORK/fl-kb.ndjson" >"$WORK/fl-kb1.ndjson"; k1=$(since "$t0")
	# The cold build's units as ninja logged them ({target: seconds}; a retry with a heavier header logs again).
	find "$WORK/cache-relu/torch-ext" -name .ninja_log -exec awk 'NR > 1 {printf "{\"%s\": %.3f}\n", $4, ($2 - $1) / 1000}' {} + >"$WORK/fl-kb-units.ndjson"
	t0=$(now); CA_CACHE=$WORK/cache-relu ca-profile --verify $O <"$WORK/fl-kb.ndjson" >"$WORK/fl-kb2.ndjson"; k2=$(since "$t0")
	emit "$(jq -nc --arg wk "$wk" --arg k1 "$k1" --arg k2 "$k2" --slurpfile x "$WORK/fl-kb1.ndjson" --slurpfile y "$WORK/fl-kb2.ndjson" \
		--slurpfile u "$WORK/fl-kb-units.ndjson" \
		'{bench: "kernelbench layout (load_inline at import, ReLU), anchor: torch load_inline cold",
		anchor_import_wall_s: ($wk | tonumber), ca_verify_profile_cold_s: ($k1 | tonumber), ca_verify_profile_again_s: ($k2 | tonumber),
		cold_build_units_s: $u, cold_phases: {verify: $x[0].verify.phases, profile: $x[0].profile.phases},
		ratio_cold: (($wk | tonumber) / ($k1 | tonumber)), ok: [($x + $y)[] | (.verify.ok and .profile.ok)],
		extension_cached: [($x + $y)[] | .verify.extension_cached], target: "load_inline build <= 5 s"}')"
	# Issue 20's whole-run case: CUDA-Agent's layout, a new candidate (its binding changed) verified
	# and profiled by one run, torch's header made (the build cache above), the task's baselines as
	# the kernelbench runs left them (cached).
	echo "// a newer candidate" >>"$FA/kernels/relu_binding.cpp"
	record relu-cuda-agent relu_mid "$FA" >"$WORK/fl-ca.ndjson"
	t0=$(now); CA_CACHE=$WORK/cache-relu ca-profile --verify --build-cache "$C" $O <"$WORK/fl-ca.ndjson" >"$WORK/fl-ca1.ndjson"; g1=$(since "$t0")
	emit "$(jq -nc --arg g1 "$g1" --slurpfile r "$WORK/fl-ca1.ndjson" '($r[0] // {}) as $x |
		{bench: "cuda-agent layout, a new candidate, whole verify+profile (torch header made, baselines cached)",
		wall_s: ($g1 | tonumber), ok: ($x.verify.ok and $x.profile.ok), build: ($x.verify.build | {seconds, pch, light, cxx, linker, units}),
		phases: {verify: $x.verify.phases, profile: $x.profile.phases}, baseline_retimed: $x.profile.baseline_retimed,
		error: ($x.verify.error // $x.profile.error), target: "<= 5 s"}')"
fi

# 5b. nvcc against ca-nvcc on the kernelbench flavour's load_inline unit (torch/extension.h): its
#     import with load_inline through ca-nvcc (PYTORCH_NVCC, cold; section 5's anchor is the same
#     import through nvcc), then the unit alone with the flags torch's ninja gave it, nvcc and
#     ca-nvcc in turn, twice each; the phase times of each (nvcc --time, CA_NVCC_VERBOSE), and
#     whether the objects and dependency files agree (nvcc's temporary file name masked).
if want nvcc && fits 400 "nvcc vs ca-nvcc"; then
	NV=$WORK/nv
	mkdir -p "$NV"
	t0=$(now); (cd "$ADV/flavours/kernelbench" && TORCH_EXTENSIONS_DIR=$NV/te PYTORCH_NVCC=$CA_BIN/ca-nvcc \
		"$PY" -c 'import model_new' >/dev/null 2>>"$OUTDIR/nvcc.err"); wi=$(since "$t0")
	ninja=$(ls "$NV"/te/*/build.ninja 2>/dev/null | head -n 1)
	real=$("$PY" -c 'from torch.utils.cpp_extension import _join_cuda_home as j; print(j("bin", "nvcc"))' 2>/dev/null)
	flags=$(sed -n 's/^cuda_cflags = //p' "$ninja" 2>/dev/null) post=$(sed -n 's/^cuda_post_cflags = //p' "$ninja" 2>/dev/null)
	src=$(dirname "${ninja:-.}")/cuda.cu
	ns= cs=
	for r in 1 2; do
		t0=$(now); (cd "$NV" && sh -c "\"$real\" --time n$r.csv -MD -MF n$r.o.d $flags -c \"$src\" -o n$r.o $post") >>"$OUTDIR/nvcc.err" 2>&1
		ns="$ns${ns:+,}$(since "$t0")"
		t0=$(now); (cd "$NV" && CA_NVCC_REAL=$real CA_NVCC_VERBOSE=1 sh -c "ca-nvcc -MD -MF c$r.o.d $flags -c \"$src\" -o c$r.o $post") 2>"$NV/c$r.err"
		cs="$cs${cs:+,}$(since "$t0")"
	done
	mask() { sed 's/tmpxft_[0-9a-f]\{8\}_[0-9a-f]\{8\}/tmpxft_XXXXXXXX_XXXXXXXX/g' "$1"; }
	same_o=false same_d=false
	[ -s "$NV/n1.o" ] && mask "$NV/n1.o" >"$NV/n.masked" && mask "$NV/c1.o" >"$NV/c.masked" && cmp -s "$NV/n.masked" "$NV/c.masked" && same_o=true
	[ -s "$NV/n1.o.d" ] && sed 's/^n1\.o :/c1.o :/' "$NV/n1.o.d" | cmp -s - "$NV/c1.o.d" && same_d=true
	awk -F' , ' 'NR > 1 && $7 != "" { gsub(/^ +| +$/, "", $2); print $2 "\t" $7 / 1000 }' "$NV/n1.csv" >"$NV/n.phases" 2>/dev/null
	sed -n 's/^ca-nvcc: step [0-9]* \(([^)]*) \)\{0,1\}\([^:]*\): \([0-9.]*\) s.*/\2\t\3/p' "$NV/c1.err" >"$NV/c.phases"
	emit "$(jq -nc --arg wi "$wi" --arg ns "$ns" --arg cs "$cs" --argjson so "$same_o" --argjson sd "$same_d" \
		--rawfile np "$NV/n.phases" --rawfile cp "$NV/c.phases" --arg said "$(grep -v '^ca-nvcc: step' "$NV/c1.err" | tail -n 3)" \
		'def phases(t): [t | split("\n")[] | select(length > 0) | split("\t") | {phase: .[0], s: (.[1] | tonumber)}];
		($ns | split(",") | map(tonumber)) as $n | ($cs | split(",") | map(tonumber)) as $c |
		{bench: "nvcc vs ca-nvcc, load_inline unit (kernelbench flavour, torch/extension.h, torch ninja flags)",
		nvcc_s: $n, ca_nvcc_s: $c, speedup: (if ($c | min) > 0 then ($n | min) / ($c | min) else null end),
		load_inline_import_through_ca_nvcc_s: ($wi | tonumber), same_object: $so, same_dependency_file: $sd,
		nvcc_phases_s: phases($np), ca_nvcc_phases_s: phases($cp), ca_nvcc_said: $said,
		target: "nvcc ~66 s -> ca-nvcc ~45 s"}')"
fi

# 6. The first record of a new task on a used machine: its baselines and torch.compile's
#    caches of it empty, the rest (bytecode, builds) as a machine that ran before has them;
#    ReLU (relu_mid) and the matmul, each a process of its own, then both as one stream.
if want newtask && fits 60 "first record of a new task"; then
	NT=$WORK/nt-cache
	record sum sum "$ADV/honest/sum" | CA_CACHE=$NT ca-profile --verify $O >/dev/null  # a used machine
	newtask() { # records-file out
		rm -rf "$NT/baselines" "$NT/torch-compile"
		t0=$(now); CA_CACHE=$NT ca-profile --verify $O <"$1" >"$2"; since "$t0"
	}
	for t in relu_mid matmul; do
		record "$t" "$t" "$ADV/honest/${t%_mid}" >"$WORK/nt-$t.ndjson"
		s=$(newtask "$WORK/nt-$t.ndjson" "$WORK/nt-out.ndjson")
		emit "$(jq -c --arg s "$s" --arg t "$t" '{bench: ("first record of a new task, ca flavour, " + $t), wall_s: ($s | tonumber),
			ok: (.verify.ok and .profile.ok), baselines_s: .profile.phases.baselines, target: "<= 8 s"}' "$WORK/nt-out.ndjson")"
	done
	cat "$WORK/nt-relu_mid.ndjson" "$WORK/nt-matmul.ndjson" >"$WORK/nt-two.ndjson"
	s=$(newtask "$WORK/nt-two.ndjson" "$WORK/nt-two-out.ndjson")
	emit "$(jq -c -s --arg s "$s" '{bench: "two new tasks in one stream (ReLU, then the matmul)", wall_s: ($s | tonumber),
		ok: map(.verify.ok and .profile.ok), seconds: map(.profile.seconds)}' "$WORK/nt-two-out.ndjson")"
fi

# 2. Verify + profile of the matmul candidate; the first run fills the baseline cache.
record matmul matmul "$ADV/honest/matmul" >"$WORK/mm.ndjson"
phases='(.profile.phases // {} | with_entries(.value |= (. * 100 | round / 100)))'
if want single && fits 30 "verify+profile, matmul"; then
	t0=$(now); ca-profile --verify $O <"$WORK/mm.ndjson" >"$WORK/first.ndjson"; w=$(since "$t0")
	emit "$(jq -c --arg w "$w" '{bench: "verify+profile, baselines not cached (ca-profile --verify)", wall_s: ($w | tonumber), verify_ok: .verify.ok, profile_ok: .profile.ok, eager_us: .profile.eager_us, compile_us: .profile.compile_us, candidate_us: .profile.candidate_us, error: (.profile.error // .verify.error)}' "$WORK/first.ndjson")"
	for i in 1 2; do
		t0=$(now); ca-profile --verify $O <"$WORK/mm.ndjson" >"$WORK/warm$i.ndjson"; w=$(since "$t0")
		emit "$(jq -c --arg w "$w" "{bench: \"verify+profile, baselines cached, ca-profile --verify, single shot\", wall_s: (\$w | tonumber), ok: (.verify.ok and .profile.ok), baseline_cached: .profile.baseline_cached, phases_s: $phases, target: \"<= 5 s\"}" "$WORK/warm$i.ndjson")"
	done
	t0=$(now); ca-verify $O <"$WORK/mm.ndjson" | ca-profile $O >"$WORK/pipe.ndjson"; w=$(since "$t0")
	emit "$(jq -c --arg w "$w" '{bench: "verify+profile, baselines cached, ca-verify | ca-profile, single shot", wall_s: ($w | tonumber), ok: (.verify.ok and .profile.ok), verify_s: .verify.seconds, profile_s: .profile.seconds}' "$WORK/pipe.ndjson")"
fi
# What verify's robustness checks cost: ca-verify of one candidate with
# --robust 0 (the paper's 5 checks) and the default 3, three times each,
# interleaved, on the 2.7 ms matmul and on a ReLU of about 70 us
# (4096 x 6144 fp32). The ratio is of the medians of whole single shots.
if want robust && fits 60 "robustness checks' cost"; then
	sed 's/^dim = 32768$/dim = 6144/' "$ADV/tasks/relu.py" >"$WORK/relu70.py"
	jq -nc --rawfile code "$WORK/relu70.py" --arg dir "$ADV/honest/relu" '{id: "relu70", code: $code, candidate: {dir: $dir}}' >"$WORK/relu70.ndjson"
	for t in mm relu70; do
		for i in 1 2 3; do
			for n in 0 3; do
				t0=$(now); ca-verify --robust $n $O <"$WORK/$t.ndjson" >"$WORK/rob-$t-$n-$i.ndjson"; w=$(since "$t0")
				jq -c --arg w "$w" --argjson n $n '{robust: $n, wall_s: ($w | tonumber), ok: .verify.ok, checks_s: ((.verify.phases.checks // 0) + (.verify.phases.compare // 0)), robust_s: (.verify.phases.robust // 0)}' \
					"$WORK/rob-$t-$n-$i.ndjson" >>"$WORK/rob-$t.ndjson"
			done
		done
		emit "$(jq -c -s --arg t "$t" 'def med: sort | .[(length / 2 | floor)];
			(map(select(.robust == 0) | .wall_s) | med) as $a | (map(select(.robust == 3) | .wall_s) | med) as $b |
			{bench: ("verify with robustness checks, " + (if $t == "mm" then "matmul 4096^2 (2.7 ms)" else "ReLU 4096x6144 (~70 us)" end)),
			robust0_wall_s: $a, robust3_wall_s: $b, added: ($b / $a - 1), ok: map(.ok), robust_s: map(select(.robust == 3) | .robust_s),
			target: "added <= 0.20"}' "$WORK/rob-$t.ndjson")"
	done
fi
# The same single shots through an evaluation server (warm reference worker and spare candidates).
if want server && fits 25 "verify+profile through a server"; then
	mkdir -p "$WORK/srv" && chmod 700 "$WORK/srv"
	CA_EVAL_SERVE_IDLE=120 ca-profile --serve "$WORK/srv/s" $O 2>"$OUTDIR/serve.err" &
	server=$!
	i=0; while [ ! -S "$WORK/srv/s" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	sleep 6  # the server's workers start
	for i in 1 2 3; do
		t0=$(now); CA_EVAL_SERVER=$WORK/srv/s ca-profile --verify $O <"$WORK/mm.ndjson" >"$WORK/srv$i.ndjson"; w=$(since "$t0")
		emit "$(jq -c --arg w "$w" "{bench: \"verify+profile, baselines cached, through ca-profile --serve, single shot\", wall_s: (\$w | tonumber), ok: (.verify.ok and .profile.ok), phases_s: $phases, target: \"<= 5 s\"}" "$WORK/srv$i.ndjson")"
		sleep 3  # think time: the server starts the next spare
	done
	kill $server 2>/dev/null
	wait $server 2>/dev/null
fi
# 4. Repeatability on the matmul candidate (baselines cached): three profiles.
if want repeat && fits 20 "repeatability"; then
	# Three profiles of the same candidate, each its own candidate process (eager baseline only).
	for i in 1 2 3; do cat "$WORK/mm.ndjson"; done | ca-profile --no-compile $O >"$WORK/repeat.ndjson"
	emit "$(jq -c -s 'def spread(f): (map(f | numbers)) as $v | if ($v | length) < 2 then null else ($v | max) / ($v | min) - 1 end;
		{bench: "repeatability, 3 profiles of the matmul candidate (4096^2 fp32, cuBLAS)", ok: map(.profile.ok), candidate_us: map(.profile.candidate_us), spread: spread(.profile.candidate_us),
		cv: map(.profile.cv), kernel_us: map(.profile.kernel_us), candidate_over_kernel: map(.profile | if (.candidate_us | type) == "number" and (.kernel_us | type) == "number" then .candidate_us / .kernel_us else null end),
		host_us: map(.profile.host_us), host_spread: spread(.profile.host_us), wall_us: map(.profile.wall_us), method: .[0].profile.method, target: "spread <= 0.02"}' "$WORK/repeat.ndjson")"
	NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
	if [ -n "$NCU" ] && want ncu && fits 30 "Nsight Compute"; then
		cat >"$WORK/ncu.py" <<'EOS'
import os, sys, torch
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
os.environ["CA_KERNELS_LIB"] = sys.argv[3]
import importlib.util
def imp(p, n):
    s = importlib.util.spec_from_file_location(n, p); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); return m
task = imp(sys.argv[4], "task"); new = imp(os.path.join(sys.argv[2], "model_new.py"), "model_new")
m = new.ModelNew(*task.get_init_inputs()).cuda()
x = [t.cuda() for t in task.get_inputs()]  # drawn on the host: no kernels but the candidate's
with torch.no_grad():
    for _ in range(3):
        m(*x)
    torch.cuda.synchronize()
EOS
		lib=$(ca-build "$ADV/honest/matmul" | jq -r .library)
		# --clock-control none: the GPU's own clocks, as ca times under (ncu locks them to base by default).
		timeout 60 "$NCU" --csv --clock-control none --metrics gpu__time_duration.sum "$PY" "$WORK/ncu.py" "$ROOT/lib/py" "$ADV/honest/matmul" "$lib" "$ADV/tasks/matmul.py" >"$WORK/ncu.csv" 2>"$OUTDIR/ncu.err"
		ncu_us=$(awk -F'","' '/gpu__time_duration.sum/ { v = $NF; gsub(/[",]/, "", v); unit = $(NF-1); t += (unit ~ /^ms/ ? v * 1000 : unit ~ /^ns/ ? v / 1000 : unit ~ /^s/ ? v * 1e6 : v); n++ } END { if (n) printf "%.3f", t / 3 }' "$WORK/ncu.csv")
		emit "$(jq -nc --arg n "${ncu_us:-}" --slurpfile r "$WORK/repeat.ndjson" '{bench: "Nsight Compute vs ca, matmul candidate", ncu_kernel_us_per_call: (if $n == "" then null else ($n | tonumber) end), ca_candidate_us: ($r | map(.profile.candidate_us) | sort | .[1]), ca_kernel_us: ($r | map(.profile.kernel_us) | sort | .[1]), clock_control: "none", ratio: (if $n == "" then null else (($r | map(.profile.candidate_us) | sort | .[1]) / ($n | tonumber)) end)}')"
	fi
fi

if want stream && fits 15 "verify+profile, stream of 4"; then
	for i in 1 2 3 4; do cat "$WORK/mm.ndjson"; done >"$WORK/mm4.ndjson"
	t0=$(now); ca-profile --verify $O <"$WORK/mm4.ndjson" >"$WORK/stream.ndjson"; w=$(since "$t0")
	emit "$(jq -c -s --arg w "$w" '{bench: "verify+profile, stream of 4 candidates (ca-profile --verify)", wall_s: ($w | tonumber), per_candidate_s: (($w | tonumber) / 4), all_ok: (map(.verify.ok and .profile.ok) | all), seconds: map(.profile.seconds)}' "$WORK/stream.ndjson")"
fi

cp "$WORK"/*.ndjson "$WORK"/*.json "$OUTDIR"/ 2>/dev/null
exit 0
