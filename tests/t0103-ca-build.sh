#!/bin/sh
# ca-build: flavours, the cache key, cache hits, error trimming, the sandbox
# around the compiler. Most checks use a stand-in nvcc (fast, and CI needs no
# CUDA); one cold build and one real error use the real nvcc when present.
. "$(dirname "$0")/test-lib.sh"

chmod 755 "$TRASH_BASE"
CA_CACHE=$TRASH_BASE/cache
export CA_CACHE

# The stand-in: --version, an error for sources containing BROKEN, else it
# writes its -o file; it also tries to escape the sandbox.
FAKE=$TRASH_BASE/fake-nvcc
cat >"$FAKE" <<'EOS'
#!/bin/sh
out=; srcs=
while [ $# -gt 0 ]; do
	case $1 in
	--version) echo "fake nvcc 1.0"; exit 0 ;;
	-o) out=$2; shift ;;
	*.cu|*.cpp|*.o) srcs="$srcs $1" ;;
	esac
	shift
done
echo escaped >"$ESCAPE_TO" 2>/dev/null
echo "argv-had-arch: $(echo "$FAKE_ARGS")" >/dev/null
for s in $srcs; do
	if grep -q BROKEN "$s" 2>/dev/null; then
		line=$(grep -n BROKEN "$s" | head -n 1 | cut -d: -f1)
		echo "$PWD/$s($line): error: identifier \"BROKEN\" is undefined"
		echo "      BROKEN;"
		echo "      ^"
		echo ""
		echo "1 error detected in the compilation of \"$s\"."
		exit 1
	fi
done
printf 'ELF\n' >"$out"
EOS
chmod 755 "$FAKE"
OUTSIDE=$TRASH_BASE/outside
mkdir -p "$OUTSIDE" && chmod 1777 "$OUTSIDE"

# Stand-ins that misbehave, each answering --version as $FAKE does (so the
# cache key is the same): mkcompiler NAME 'what it does instead of compiling'
# ($out is its -o file).
mkcompiler() {
	cat >"$1" <<EOS
#!/bin/sh
out=
while [ \$# -gt 0 ]; do
	case \$1 in
	--version) echo "fake nvcc 1.0"; exit 0 ;;
	-o) out=\$2; shift ;;
	esac
	shift
done
$2
EOS
	chmod 755 "$1"
}

kernel=$(cat "$TESTS_DIR/data/build/add.cu")  # also the GPU test's (tests/gpu/t0100)
mkws() { mkdir -p "$1/kernels" && printf '%s\n' "$kernel" >"$1/kernels/add.cu"; }

expect_success 'usage is printed by --help' 'ca-build --help | grep -q "^usage: ca-build"'
expect_status 2 'a bad --arch is a usage error' 'mkws ws && ca-build --arch 90 ws'
expect_status 2 'a bad --flavour is a usage error' 'mkws ws && ca-build --flavour torch ws'
expect_status 2 'DIR is required' 'ca-build'
expect_status 3 'a directory without kernels is not a workspace' '
	mkdir ws && ca-build ws >out; status=$?; jq -e ".ok == false" out && exit $status'
expect_status 3 'a symbolic link among the sources is refused' '
	mkws ws && ln -s /etc/passwd ws/kernels/x.h && ca-build ws >out; status=$?
	jq -r .log out | grep -q "links are not followed" && exit $status'
expect_status 3 'a symbolic link to a directory among the sources is refused' '
	mkws ws && mkdir -p elsewhere && echo "int x;" >elsewhere/x.cu && ln -s "$PWD/elsewhere" ws/kernels/sub &&
	ca-build ws >out; status=$?
	jq -e ".ok == false" out && jq -r .log out | grep -q "^kernels/sub: .*links are not followed" && exit $status'
expect_status 3 'kernels/ as a symbolic link is refused, not followed' '
	mkws elsewhere && mkdir ws && ln -s "$PWD/elsewhere/kernels" ws/kernels &&
	NVCC=$FAKE ca-build ws >out; status=$?
	jq -e ".ok == false" out && jq -r .log out | grep -q "^kernels: a symbolic link" && exit $status'
expect_status 3 'kernels/ nested deeper than 6 directories is refused, not skipped' '
	mkws ws && mkdir -p ws/kernels/a/b/c/d/e/f/g && echo "int deep;" >ws/kernels/a/b/c/d/e/f/g/deep.cu &&
	NVCC=$FAKE ca-build ws >out; status=$?
	jq -e ".ok == false" out && jq -r .log out | grep -q "^kernels/a/b/c/d/e/f/g: .*more than 6 deep" && exit $status'
expect_success 'six levels below kernels/ are still read' '
	mkws ws && mkdir -p ws/kernels/a/b/c/d/e/f && echo "int deep;" >ws/kernels/a/b/c/d/e/f/deep.cuh &&
	NVCC=$FAKE ca-build ws >a && jq -e .ok a && echo "// changed" >>ws/kernels/a/b/c/d/e/f/deep.cuh &&
	NVCC=$FAKE ca-build ws >b && test "$(jq -r .hash a)" != "$(jq -r .hash b)"'

# Hostile workspaces: ca-verify builds in its own (trusted) process, so
# reading the sources must stay bounded whatever they hold.
expect_status 3 'a FIFO among the sources is refused at once, never opened for reading' '
	mkws ws && mkfifo ws/kernels/pipe.cuh && NVCC=$FAKE timeout 20 ca-build ws >out; status=$?
	jq -r .log out | grep -q "^kernels/pipe.cuh: not a regular file" && exit $status'
expect_status 3 'a source larger than the sources limit is refused before it is read' '
	mkws ws && truncate -s 40G ws/kernels/huge.cuh && NVCC=$FAKE timeout 20 ca-build ws >out; status=$?
	jq -r .log out | grep -q "^sources larger than 32 MB" && exit $status'
expect_success 'odd file names (a newline, a leading dash, bytes not UTF-8) build, the answer still JSON' '
	mkws ws && echo "int a;" >"ws/kernels/new
line.cu" && echo "int b;" >ws/kernels/-o.cu && echo "int c;" >"$(printf "ws/kernels/\\377.cu")" &&
	NVCC=$FAKE ca-build ws >out && jq -e ".ok and .units.compiled == 4" out'
expect_success 'a 24 MB line of #include directives is read in linear time' '
	mkws ws && awk "BEGIN { for (i = 0; i < 3145728; i++) printf \"#include\" }" >ws/kernels/h.cuh &&
	NVCC=$FAKE timeout 60 ca-build ws >out && jq -e ".ok and .seconds < 10" out'
expect_success 'two hundred units that all reach a 16 MB header of includes: each file scanned and hashed once' '
	mkdir -p ws/kernels && i=0 && while [ $i -lt 200 ]; do echo "#include \"h.cuh\"" >ws/kernels/u$i.cu; i=$((i + 1)); done &&
	awk "BEGIN { for (i = 0; i < 1048576; i++) print \"#include \\\"u0.cu\\\"\"; for (i = 0; i < 65536; i++) printf \"include \" }" \
		>ws/kernels/h.cuh &&
	mkcompiler fails "echo \"kernels/u0.cu(1): error: no\"; exit 1" &&
	{ NVCC=$PWD/fails timeout 60 ca-build ws >out; test $? -eq 1; } && jq -e ".ok == false and .seconds < 10" out'

expect_success 'kernelbench: nothing to build, the hash names model_new.py' '
	mkdir ws && echo "from torch.utils.cpp_extension import load_inline" >ws/model_new.py &&
	ca-build ws >a && jq -e ".ok and .flavour == \"kernelbench\" and .library == null and (.hash | length) == 64" a &&
	ca-build ws >b && test "$(jq -r .hash a)" = "$(jq -r .hash b)" &&
	echo "# changed" >>ws/model_new.py && ca-build ws >c && test "$(jq -r .hash a)" != "$(jq -r .hash c)"
'

expect_success 'flavours are detected: cuda-agent by its binding files, ca by kernels/*.cu' '
	mkws ca && mkws agent && echo "// binding" >agent/kernels/add_binding.cpp &&
	mkws agent2 && echo "// b" >agent2/binding.cpp &&
	NVCC=/bin/false ca-build agent >a 2>/dev/null; jq -e ".flavour == \"cuda-agent\"" a &&
	NVCC=/bin/false ca-build agent2 >b 2>/dev/null; jq -e ".flavour == \"cuda-agent\"" b &&
	NVCC=/bin/false ca-build ca >c 2>/dev/null; jq -e ".flavour == \"ca\"" c
'
expect_status 1 'the ca flavour refuses torch headers' '
	mkws ws && echo "#include <torch/extension.h>" >ws/kernels/bad.cu &&
	NVCC=$FAKE ca-build --flavour ca ws >out; status=$?
	jq -r .log out | grep -q "includes torch headers" && exit $status'
expect_status 4 'a missing nvcc is a system failure' '
	mkws ws && NVCC=/nonexistent PATH=/usr/bin:/bin CUDA_HOME=/nonexistent "$CA_BIN/ca-build" ws'

expect_success 'build, then a cache hit in under 0.1 s with the same answer' '
	mkws ws && NVCC=$FAKE ca-build ws >a && NVCC=$FAKE ca-build ws >b &&
	jq -e ".ok and .cached == false and (.library | test(\"libkernels.so$\")) and .transient == false and .limit == null" a &&
	jq -e ".ok and .cached and .seconds < 0.1" b &&
	test "$(jq -r .library a)" = "$(jq -r .library b)" && test -f "$(jq -r .library b)" &&
	test "$(jq -r .hash a)" = "$(jq -r .hash b)"
'

expect_success 'the cache key changes with a source, a new file, the arch and the compiler version' '
	mkws ws && h0=$(NVCC=$FAKE ca-build ws | jq -r .hash) &&
	echo "// more" >>ws/kernels/add.cu && h1=$(NVCC=$FAKE ca-build ws | jq -r .hash) &&
	echo "#define X 1" >ws/kernels/util.cuh && h2=$(NVCC=$FAKE ca-build ws | jq -r .hash) &&
	h3=$(NVCC=$FAKE ca-build --arch sm_80 ws | jq -r .hash) &&
	sed "s/fake nvcc 1.0/fake nvcc 2.0/" "$FAKE" >nvcc2 && chmod 755 nvcc2 && h4=$(NVCC=$PWD/nvcc2 ca-build ws | jq -r .hash) &&
	h5=$(NVCC=$PWD/nvcc2 ca-build ws | jq -r .hash) &&
	test "$(printf "%s\n" $h0 $h1 $h2 $h3 $h4 | sort -u | wc -l)" -eq 5 && test "$h4" = "$h5"
'

expect_success 'a hand build or timestamps do not change the key' '
	mkws ws && h0=$(NVCC=$FAKE ca-build ws | jq -r .hash) &&
	touch ws/kernels/add.cu && echo obj >ws/kernels/add.o && echo so >ws/kernels/libkernels.so &&
	h1=$(NVCC=$FAKE ca-build ws | jq -r .hash) && test "$h0" = "$h1"
'

expect_status 1 'errors are trimmed and relative; failures are cached too' '
	mkws ws && printf "int ok;\n\nBROKEN;\n" >ws/kernels/bad.cu && echo "int helper;" >ws/kernels/helper.cpp &&
	NVCC=$FAKE ca-build ws >out; status=$?
	jq -r .log out >log; cat log
	grep -q "^kernels/bad.cu(3): error: identifier \"BROKEN\" is undefined$" log &&
	! grep -q "/tmp/" log && ! grep -q "error detected" log &&
	jq -e ".transient == false and .limit == null" out &&
	NVCC=$FAKE ca-build ws >again; jq -e ".cached and .ok == false and .transient == false" again && exit $status
'

ca-sandbox --report "$TRASH_BASE/probe.json" -- true 2>/dev/null
if jq -e '.isolation.landlock_fs or .isolation.mount_namespace' "$TRASH_BASE/probe.json" >/dev/null 2>&1; then
	expect_success 'the compiler runs in the sandbox: no writes outside the build directory' '
		mkws ws && ESCAPE_TO=$OUTSIDE/escaped NVCC=$FAKE ca-build ws >out && jq -e .ok out &&
		test ! -e "$OUTSIDE/escaped"
	'
else
	skip 'compiler confinement' 'ca-sandbox has neither Landlock nor a mount namespace here'
fi

expect_success 'ca_build_trim_log keeps errors with context and caps the size' 'test-build'
expect_success 'unit cache keys follow includes; torch'"'"'s precompiled header only where it changes nothing' 'test-build_units "$TRASH"'
expect_success 'eight threads building two workspaces into one cache at once agree (ca-verify builds in its slots'"'"' threads)' '
	NVCC=$FAKE test-build_threads "$TRASH"'

# The unit cache: a unit whose sources did not change is not compiled again.
expect_success 'units are cached by content: an edit compiles only the units it reaches' '
	mkdir -p ws/kernels && printf "#include \"common.cuh\"\nint a;\n" >ws/kernels/a.cu &&
	echo "int b;" >ws/kernels/b.cu && echo "#pragma once" >ws/kernels/common.cuh &&
	NVCC=$FAKE ca-build --cache c ws >1 && jq -e ".ok and .units == {compiled: 2, cached: 0} and .pch == false" 1 &&
	echo "int b2;" >>ws/kernels/b.cu && NVCC=$FAKE ca-build --cache c ws >2 &&
	jq -e ".ok and .cached == false and .units == {compiled: 1, cached: 1}" 2 &&
	echo "// edited" >>ws/kernels/common.cuh && NVCC=$FAKE ca-build --cache c ws >3 &&
	jq -e ".ok and .units == {compiled: 1, cached: 1}" 3 &&
	NVCC=$FAKE ca-build --cache c ws >4 && jq -e ".cached and .units == {compiled: 0, cached: 0}" 4 &&
	echo "int a0;" >ws/kernels/0.cu && NVCC=$FAKE ca-build --cache c ws >5 &&
	jq -e ".ok and .units == {compiled: 1, cached: 2}" 5
'
expect_status 1 'a unit that failed is not cached: fixed, it compiles; broken again, it fails' '
	mkdir -p ws/kernels && echo "int a;" >ws/kernels/a.cu && echo "BROKEN;" >ws/kernels/b.cu &&
	NVCC=$FAKE ca-build --cache c ws >1; jq -e ".ok == false" 1 &&
	echo "int b;" >ws/kernels/b.cu && NVCC=$FAKE ca-build --cache c ws >2 && jq -e ".ok and .units.compiled >= 1" 2 &&
	echo "BROKEN; int x;" >ws/kernels/b.cu && NVCC=$FAKE ca-build --cache c ws >3; status=$?
	jq -e ".ok == false and .units.cached == 1" 3 && exit $status
'

# Limits. ulimit -v is in KB, -f in 512-byte blocks.
expect_success 'every compiler gets the limits: defaults, then CA_BUILD_*, then options' '
	mkcompiler probe "{ ulimit -t; ulimit -v; ulimit -f; } >\"\$out\"" && mkws ws &&
	NVCC=$PWD/probe ca-build --cache c1 ws >a && jq -e .ok a &&
	test "$(cat "$(jq -r .library a)" | tr "\n" " ")" = "120 4194304 524288 " &&
	CA_BUILD_CPU_S=7 CA_BUILD_MEM_MB=1000 CA_BUILD_FSIZE_MB=3 NVCC=$PWD/probe ca-build --cache c2 ws >b &&
	test "$(cat "$(jq -r .library b)" | tr "\n" " ")" = "7 1024000 6144 " &&
	CA_BUILD_CPU_S=7 CA_BUILD_MEM_MB=1000 NVCC=$PWD/probe ca-build --cache c3 --cpu 9 --mem 2000 --fsize 5 ws >c &&
	test "$(cat "$(jq -r .library c)" | tr "\n" " ")" = "9 2048000 10240 "
'
expect_success 'a bad limit is a usage error, from an option or the environment' '
	mkws ws && { ca-build --mem 0 ws 2>err; test $? -eq 2; } && grep -q -- "--mem" err &&
	{ CA_BUILD_MEM_MB=lots ca-build ws >out 2>err; test $? -eq 2; } &&
	grep -q "CA_BUILD_MEM_MB: .lots.: not an integer" err && jq -e ".ok == false" out'
# Each of these has a cache of its own: the sources are those $FAKE built.
expect_success 'the wall-clock limit stops a hung compiler and names itself' '
	mkcompiler hang "exec sleep 60" && mkws ws &&
	{ NVCC=$PWD/hang ca-build --cache c --time 1 ws >out; test $? -eq 1; } &&
	jq -r .log out | grep -q "^compilation timed out: over the wall-clock limit of 1 s" &&
	jq -e ".ok == false and .seconds < 15" out'
expect_success 'the file-size limit stops a compiler writing a huge file and names itself' '
	mkcompiler big "exec head -c 3000000 /dev/zero >\"\$out\"" && mkws ws &&
	{ NVCC=$PWD/big ca-build --cache c --fsize 1 ws >out; test $? -eq 1; } &&
	jq -r .log out | grep -q "^the compiler.s output grew too large: over the limit of 1 MB"'
expect_success 'a compiler out of memory is named, and not cached as a compile error' '
	mkcompiler oom "echo \"cc1plus: out of memory allocating 4294967312 bytes after a total of 2187264 bytes\"; exit 1" &&
	mkws ws && { NVCC=$PWD/oom ca-build --cache c ws >a; test $? -eq 1; } &&
	jq -r .log a | grep -q "^the compiler ran out of memory: over the limit of 4096 MB" &&
	{ NVCC=$PWD/oom ca-build --cache c ws >b; test $? -eq 1; } && jq -e ".cached == false" b'

# Transient failures: marked so, never cached, so the same sources build
# once the fault is gone (the stand-ins share $FAKE's cache key).
expect_success 'a compiler killed by a signal: status 4, transient, then the same sources build' '
	mkcompiler killed "kill -KILL \$\$" && mkws ws &&
	{ NVCC=$PWD/killed ca-build --cache c ws >a; test $? -eq 4; } &&
	jq -e ".ok == false and .transient and .limit == null" a &&
	jq -r .log a | grep -q "^the compiler was killed by signal 9" &&
	NVCC=$FAKE ca-build --cache c ws >b && jq -e ".ok and .cached == false and .transient == false" b'
expect_success 'a timeout: status 1, transient, limit "time", then the same sources build' '
	mkcompiler hang "exec sleep 60" && mkws ws &&
	{ NVCC=$PWD/hang ca-build --cache c --time 1 ws >a; test $? -eq 1; } &&
	jq -e ".ok == false and .transient and .limit == \"time\"" a &&
	NVCC=$FAKE ca-build --cache c ws >b && jq -e ".ok and .cached == false" b'
expect_success 'out of memory: limit "memory", then the same sources build' '
	mkcompiler oom "echo \"cc1plus: out of memory allocating 4294967312 bytes after a total of 2187264 bytes\"; exit 1" &&
	mkws ws && { NVCC=$PWD/oom ca-build --cache c ws >a; test $? -eq 1; } &&
	jq -e ".ok == false and .transient and .limit == \"memory\"" a &&
	NVCC=$FAKE ca-build --cache c ws >b && jq -e ".ok and .cached == false" b'
expect_success 'no space left with room on the disks: the private /tmp, limit "fsize", then the same sources build' '
	mkcompiler full "echo \"/tmp/tmpxft_01-6.stub.c:4:27: fatal error: error closing /tmp/ccEq.s: No space left on device\"; exit 1" &&
	mkws ws && { NVCC=$PWD/full ca-build --cache c ws >a; test $? -eq 1; } &&
	jq -e ".ok == false and .transient and .limit == \"fsize\"" a &&
	NVCC=$FAKE ca-build --cache c ws >b && jq -e ".ok and .cached == false" b'
expect_success 'a failure an older ca-build cached though it was out of memory is built again' '
	mkws ws && echo "BROKEN;" >>ws/kernels/add.cu &&
	{ NVCC=$FAKE ca-build --cache c ws >a; test $? -eq 1; } &&
	{ NVCC=$FAKE ca-build --cache c ws >b; test $? -eq 1; } && jq -e ".cached" b &&
	entry=c/$(jq -r .hash a) && echo "cc1plus: out of memory allocating 4294967312 bytes" >>"$entry/build.log" &&
	{ NVCC=$FAKE ca-build --cache c ws >d; test $? -eq 1; } && jq -e ".cached == false and .transient == false" d &&
	{ NVCC=$FAKE ca-build --cache c ws >e; test $? -eq 1; } && jq -e ".cached" e'

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
	expect_success 'real nvcc: a cold build makes a loadable library, then a cache hit' '
		mkws ws && start=$(date +%s.%N) && ca-build --arch sm_90 ws >a && end=$(date +%s.%N) &&
		ca-build --arch sm_90 ws >b &&
		jq -e ".ok and .cached == false" a && jq -e ".ok and .cached and .seconds < 0.1" b &&
		nm -D "$(jq -r .library a)" | grep -q " T add_launcher" &&
		{ ! command -v python3 >/dev/null ||
		  python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]).add_launcher" "$(jq -r .library a)"; } &&
		echo "# cold build $(awk "BEGIN { print $end - $start }") s wall, cache hit $(jq .seconds b) s" >&3
	' 3>&1
	expect_status 1 'real nvcc: an error comes back trimmed, relative, with the source line' '
		mkws ws && printf "__global__ void k(float *x) { x[0] = n_rows; }\n" >ws/kernels/bad.cu &&
		ca-build --arch sm_90 ws >out; status=$?
		jq -r .log out | tee log
		grep -q "^kernels/bad.cu(1): error: identifier \"n_rows\" is undefined" log && ! grep -q "/tmp" log &&
		exit $status
	'
	# The kernels of the outside tests; each must stop in seconds, far below any limit of time.
	expect_success 'real nvcc: #include "/dev/zero" stops at the default memory limit, promptly' '
		mkdir -p ws/kernels && echo "#include \"/dev/zero\"" >ws/kernels/zero.cu &&
		{ ca-build --arch sm_90 ws >out; test $? -eq 1; } && jq -r .log out >log && head -n 3 log &&
		grep -q "^the compiler ran out of memory: over the limit of 4096 MB" log &&
		jq -e ".ok == false and .seconds < 60" out
	'
	bomb='template <int N, int M> struct B {
	enum { v = B<N - 1, 2 * M>::v + B<N - 1, 2 * M + 1>::v };
};
template <int M> struct B<0, M> { enum { v = 1 }; };
__global__ void k(int *x) { x[0] = B<30, 0>::v; }'
	expect_success 'real nvcc: a template-instantiation bomb stops at the memory limit' '
		mkdir -p ws/kernels && printf "%s\n" "$bomb" >ws/kernels/bomb.cu &&
		{ ca-build --arch sm_90 --mem 768 ws >out; test $? -eq 1; } && jq -r .log out >log && head -n 3 log &&
		grep -q "^the compiler ran out of memory: over the limit of 768 MB" log &&
		jq -e ".ok == false and .seconds < 60" out
	'
	expect_success 'real nvcc: the same bomb stops at the CPU limit when memory lasts longer' '
		mkdir -p ws/kernels && printf "%s\n" "$bomb" >ws/kernels/bomb.cu &&
		{ ca-build --arch sm_90 --cpu 1 ws >out; test $? -eq 1; } && jq -r .log out >log && head -n 3 log &&
		grep -q "^the compiler ran out of CPU time: over the limit of 1 s" log &&
		jq -e ".ok == false and .seconds < 60" out
	'
	expect_success 'real nvcc: a huge initialised static array stops at the memory limit' '
		mkdir -p ws/kernels &&
		printf "__device__ char big[1 << 28] = {1};\n__global__ void k(char *x) { x[0] = big[threadIdx.x]; }\n" \
			>ws/kernels/big.cu &&
		{ ca-build --arch sm_90 --mem 1024 ws >out; test $? -eq 1; } && jq -r .log out >log && head -n 3 log &&
		grep -q "^the compiler ran out of memory: over the limit of 1024 MB" log &&
		jq -e ".ok == false and .seconds < 60" out
	'
else
	skip 'real nvcc builds' 'nvcc not found'
fi

test_done
