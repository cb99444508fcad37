#!/bin/sh
# ca-verify builds a candidate's kernels in its own process (lib/build; the
# compilers run under ca-sandbox): the build's record, compile errors,
# limits told from the evaluator's own faults, hostile workspaces refused
# or read in bounded time, two slots building at once. A stand-in nvcc
# compiles the C stand-in of the ReLU kernel (tests/adversarial/cpu) with cc.
. "$(dirname "$0")/test-lib.sh"

ADV=$TESTS_DIR/adversarial
if ! has_torch; then
	skip 'ca-verify building CPU kernels' 'no torch for the Python runner (make deps)'
	test_done
	exit
fi
if ! command -v cc >/dev/null 2>&1; then
	skip 'ca-verify building CPU kernels' 'no C compiler'
	test_done
	exit
fi

chmod 755 "$TRASH_BASE"
CA_CACHE=$TRASH_BASE/cache
export CA_CACHE
OUTSIDE=$TRASH_BASE/outside
mkdir -p "$OUTSIDE" && chmod 1777 "$OUTSIDE"
# nvcc as ca's builds call it, for C sources; it also tries to write outside its build directory.
NVCC=$TRASH_BASE/cc-nvcc
export NVCC
cat >"$NVCC" <<EOS
#!/bin/sh
out=; shared=; srcs=; lang=
while [ \$# -gt 0 ]; do
	case \$1 in
	--version) echo "cc-nvcc 1.0"; exit 0 ;;
	-o) out=\$2; shift ;;
	-shared) shared=-shared ;;
	*.cu) srcs="\$srcs \$1"; lang="-x c" ;;
	*.o) srcs="\$srcs \$1" ;;
	esac
	shift
done
echo escaped >"$OUTSIDE/escaped" 2>/dev/null
[ -n "\$shared" ] || shared=-c
exec cc \$shared -fPIC -I. -Ikernels -o "\$out" \$lang \$srcs
EOS
chmod 755 "$NVCC"

C=$TRASH_BASE/candidates
mkdir -p "$C"
cand() { # name: the honest ReLU with its kernel in C as kernels/relu.cu
	d=$C/$1
	rm -rf "$d" && cp -R "$ADV/honest/relu" "$d" && rm -rf "$d/kernels" && mkdir "$d/kernels" &&
		cp "$ADV/cpu/relu_cpu.c" "$d/kernels/relu.cu"
}
record() { # id dir
	jq -nc --arg id "$1" --rawfile code "$ADV/tasks/relu_small.py" --arg dir "$2" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
}
verify() { ca-verify --device cpu --no-sandbox --checks 2 --robust 0 --seed 7 "$@"; }

cand good
cand broken && printf 'int broken = ;\n' >>"$C/broken/kernels/relu.cu"
cand link && ln -s /etc/passwd "$C/link/kernels/x.cuh"
cand fifo && mkfifo "$C/fifo/kernels/pipe.cuh"
cand huge && truncate -s 40M "$C/huge/kernels/huge.cuh"
cand deep && mkdir -p "$C/deep/kernels/a/b/c/d/e/f/g" && echo 'int deep;' >"$C/deep/kernels/a/b/c/d/e/f/g/deep.cuh"
cand longline && awk 'BEGIN { for (i = 0; i < 3145728; i++) printf "#include" }' >"$C/longline/kernels/h.cuh"
cand names && echo '#define SCALE 1' >"$C/names/kernels/new
line.cuh" && echo '#define ALSO 1' >"$C/names/kernels/-o.cuh"
R=$TRASH_BASE/records.ndjson
{
	record good "$C/good"
	record good-again "$C/good"
	record broken "$C/broken"
	record link "$C/link"
	record fifo "$C/fifo"
	record huge "$C/huge"
	record deep "$C/deep"
	record longline "$C/longline"
	record names "$C/names"
	jq -nc --rawfile code "$ADV/tasks/relu_small.py" --rawfile new "$ADV/honest/relu/model_new.py" \
		--rawfile k "$ADV/cpu/relu_cpu.c" \
		'{id: "files", code: $code, candidate: {files: {"model_new.py": $new, "kernels/relu.cu": $k}}}'
} >"$R"
OUT=$TRASH_BASE/out.ndjson
expect_status 1 'a stream of candidates with kernels: each built in the process, compile failures exit 1' '
	start=$(date +%s) && verify "$R" >"$OUT" 2>err; s=$?
	cat err; test "$(wc -l <"$OUT")" -eq "$(wc -l <"$R")" || exit 9
	echo "# $(($(date +%s) - start)) s for $(wc -l <"$R") records" >&3
	exit $s
' 3>&1
pick() { jq -c --arg id "$1" 'select(.id == $id) | .verify' "$OUT"; }
outcome() { # id stage|ok [error pattern]
	expect_success "$1: ${2}${3:+ ($3)}" "
		v=\$(pick '$1') && printf '%s\n' \"\$v\" | jq -c '{ok, stage, error}' | sed 's/^/# /'
		printf '%s\n' \"\$v\" | jq -e --arg want '$2' --arg pat '${3:-}' \\
			'(if .ok then \"ok\" else .stage end) == \$want and ((.error // \"\") | test(\$pat))' >/dev/null"
}
outcome good ok
expect_success 'the build is recorded without its log; a second record finds it in the cache' '
	pick good | jq -e ".build | .ok and .flavour == \"ca\" and .cached == false and (.hash | length) == 64 and has(\"log\") == false" &&
	pick good-again | jq -e ".ok and .build.cached and .build.hash == $(pick good | jq .build.hash)"
'
outcome broken compile 'kernels/relu.cu:[0-9]+:.*error'
expect_success 'a compile error is the candidate'"'"'s: not transient, no limit, not an evaluator fault' '
	pick broken | jq -e ".build.transient == false and .build.limit == null and .evaluator_fault == null"
'
outcome link compile '^kernels/x.cuh: not a regular file \(links are not followed\)'
outcome fifo compile '^kernels/pipe.cuh: not a regular file'
outcome huge compile '^sources larger than 32 MB'
outcome deep compile 'more than 6 deep'
outcome longline ok
outcome names ok
outcome files ok
expect_success 'a 24 MB line of #include directives costs the build seconds at most' '
	pick longline | jq -e ".build_s < 10"
'
ca-sandbox --report "$TRASH_BASE/probe.json" -- true 2>/dev/null
if jq -e '.isolation.landlock_fs or .isolation.mount_namespace' "$TRASH_BASE/probe.json" >/dev/null 2>&1; then
	expect_success 'the compilers ran in the sandbox though the candidates did not (--no-sandbox)' '
		test ! -e "$OUTSIDE/escaped"'
else
	skip 'compiler confinement' 'ca-sandbox has neither Landlock nor a mount namespace here'
fi

# Limits and faults: each stand-in answers --version as cc-nvcc does, so the key is the same.
mkcompiler() { # name 'what it does instead of compiling'
	printf '#!/bin/sh\ncase "$*" in *--version*) echo "cc-nvcc 1.0"; exit 0 ;; esac\n%s\n' "$2" >"$TRASH_BASE/$1" &&
		chmod 755 "$TRASH_BASE/$1"
}
mkcompiler hang 'exec sleep 60'
mkcompiler killed 'kill -KILL $$'
cand limit && echo '// limit' >>"$C/limit/kernels/relu.cu"
expect_status 1 'a compile over the time limit (CA_BUILD_TIME_S) is the candidate'"'"'s: stage compile, limit "time"' '
	record limit "$C/limit" | CA_BUILD_TIME_S=2 NVCC=$TRASH_BASE/hang verify >out; s=$?
	jq -c ".verify | {stage, error, build}" out | sed "s/^/# /"
	jq -e ".verify | .stage == \"compile\" and .build.transient and .build.limit == \"time\" and
		(.error | test(\"^compilation timed out: over the wall-clock limit of 2 s\"))" out >/dev/null &&
	exit $s
'
expect_status 4 'a compiler killed by a signal is the evaluator'"'"'s: stage system, ok null, exit 4' '
	record killed "$C/limit" | NVCC=$TRASH_BASE/killed verify >out; s=$?
	jq -c ".verify | {ok, stage, error}" out | sed "s/^/# /"
	jq -e ".verify | .ok == null and .evaluator_fault and .stage == \"system\" and .build.transient and .build.limit == null and
		(.error | test(\"killed by signal 9\"))" out >/dev/null &&
	exit $s
'
expect_success 'after the fault, the same sources build' '
	record again "$C/limit" | verify >out && jq -e ".verify | .ok and .build.cached == false" out
'

# Two slots (--gpus 0,1 on the CPU) build at once, in one process, into one cache.
for i in 1 2 3 4; do cand "pool$i" && echo "// $i" >>"$C/pool$i/kernels/relu.cu"; done
expect_success 'two slots building at once: every record built and passed, in input order' '
	for i in 1 2 3 4; do record "p$i" "$C/pool$i"; record "q$i" "$C/pool$i"; done >pool.ndjson &&
	CA_CACHE=$TRASH_BASE/pool-cache verify --gpus 0,1 pool.ndjson >out &&
	test "$(jq -r .id out | tr "\n" " ")" = "p1 q1 p2 q2 p3 q3 p4 q4 " &&
	jq -e -s "all(.[]; .verify.ok and .verify.build.ok) and ([.[].verify.build.hash] | unique | length) == 4" out >/dev/null
'

# A profile that times torch.compile (inductor's C++ code on the CPU) builds
# in a thread while the reference loads the task and, the build still
# running (a compiler that takes 4 s), compiles the model (its "warm"
# request, read before the next request): the first compile then is not
# in the baselines' loop, as it is with CA_EVAL_WARM_COMPILE=0; a compile
# error is still the candidate's, and the next record reads the posted
# reply first. Judged on w2: w1's task waits for the broken record's
# posted compile, which may outlast w1's 4-s build.
printf '#!/bin/sh\nsleep 4\nexec "%s" "$@"\n' "$NVCC" >"$TRASH_BASE/slow-nvcc" && chmod 755 "$TRASH_BASE/slow-nvcc"
cand warm0 && echo '// warm 0' >>"$C/warm0/kernels/relu.cu"
cand warm1 && echo '// warm 1' >>"$C/warm1/kernels/relu.cu"
cand warm2 && echo '// warm 2' >>"$C/warm2/kernels/relu.cu"
cand wbroken && printf 'int broken = ;\n' >>"$C/wbroken/kernels/relu.cu"
profile() { # records: torch.compile on, baselines timed every record, each build slow
	CA_CACHE=$TRASH_BASE/warm-cache NVCC=$TRASH_BASE/slow-nvcc \
		ca-profile --verify --device cpu --no-sandbox --no-cache --seed 7 --iters 5 --warmup 1 "$@"
}
expect_success 'ca-profile with torch.compile: the model compiled beside the build, failures and passes in order' '
	record w0 "$C/warm0" | CA_EVAL_WARM_COMPILE=0 profile >cold.ndjson; test $? -le 1 &&
	{ record wbroken "$C/wbroken"; record w1 "$C/warm1"; record w2 "$C/warm2"; } >warm.ndjson &&
	profile warm.ndjson >out; test $? -eq 1 &&
	jq -c "{id, v: .verify | {ok, stage, b: .build_s}, p: .profile | {ok, stage, compile_us, baselines: .phases.baselines}}" cold.ndjson out | sed "s/^/# /" &&
	test "$(jq -r .id out | tr "\n" " ")" = "wbroken w1 w2 " &&
	jq -e -s ".[0].verify | .stage == \"compile\" and (.error | test(\"kernels/relu.cu:[0-9]+:.*error\"))" out >/dev/null &&
	jq -e -s "all(.[1:][]; .verify.ok and .verify.build.ok and .verify.build_s > 3 and (.verify.phases | has(\"build\") and has(\"task\")) and
		(.profile.ok or .profile.stage == \"timing\") and .profile.compile_us > 0)" out >/dev/null &&
	jq -e ".verify.ok and .profile.compile_us > 0" cold.ndjson >/dev/null &&
	jq -e -s --slurpfile c cold.ndjson ".[2].profile.phases.baselines < \$c[0].profile.phases.baselines / 4" out >/dev/null
'
test_done
