#!/bin/sh
# Torch extensions are built with ca's lighter torch/extension.h first
# (lib/py/light) and with torch's own when that fails: a unit that needs
# what the light one leaves out builds as it did, a compile error reads
# as it did. Those a candidate builds when it is imported (load_inline,
# KernelBench's form) and ca-build's of CUDA-Agent's layout; CPU
# extensions (C++ units alone) with the host compiler.
. "$(dirname "$0")/test-lib.sh"

if ! has_torch; then
	skip 'load_inline with the light header' 'no torch for the Python runner (make deps)'
	test_done
	exit
fi
if ! command -v c++ >/dev/null 2>&1 || ! "$(ca_python)" -c 'import ninja' >/dev/null 2>&1 && ! command -v ninja >/dev/null 2>&1; then
	skip 'load_inline with the light header' 'no c++ or ninja for torch extensions'
	test_done
	exit
fi

ADV=$TESTS_DIR/adversarial
CA_CACHE=$TRASH_BASE/cache
export CA_CACHE
C=$TRASH_BASE/candidates
# The body of a CPU ReLU of x into y (raw loops: no torch operator to refuse).
RELU='auto y = torch::empty_like(x);
const float *p = x.data_ptr<float>();
float *q = y.data_ptr<float>();
for (int64_t i = 0; i < x.numel(); i++)
	q[i] = p[i] > 0 ? p[i] : 0;'
cand() { # name extra-line: a load_inline ReLU on the CPU
	mkdir -p "$C/$1" && cat >"$C/$1/model_new.py" <<EOF
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = r'''
torch::Tensor relu_cpu(torch::Tensor x) {
$RELU
$2
    return y;
}
'''
ext = load_inline(name="relu_$1", cpp_sources=src, functions=["relu_cpu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cpu(x)
EOF
}
cand light ''
cand middle '    torch::autograd::Variable v = y; (void)v;'
cand frontend '    torch::optim::SGDOptions unused(0.1);'
cand broken '    q[0] = not_declared_here;'
R=$TRASH_BASE/records.ndjson
for id in light middle frontend broken; do
	jq -nc --arg id "$id" --rawfile code "$ADV/tasks/relu_small.py" --arg dir "$C/$id" \
		'{id: $id, code: $code, candidate: {dir: $dir}}'
done >"$R"
OUT=$TRASH_BASE/out.ndjson
expect_status 1 'four load_inline candidates verified on the CPU; the broken one exits 1' '
	ca-verify --device cpu --no-sandbox --checks 2 --robust 0 --seed 7 "$R" >"$OUT" 2>err; s=$?
	tail -3 err; test "$(wc -l <"$OUT")" -eq 4 || exit 9
	exit $s
'
pick() { # id: its verify object, or failure when it has none
	v=$(jq -c --arg id "$1" 'select(.id == $id) | .verify' "$OUT") && test -n "$v" && printf '%s\n' "$v"
}
# What ninja recorded of a build's headers (its deps log, kept in the
# cache): with -MMD not torch's (-isystem), but ca's light one (CPATH).
deps() { cat "$CA_CACHE"/torch-ext/*/relu_"$1"/.ninja_deps 2>/dev/null | tr -c '[:print:]' '\n'; }
expect_success 'a unit that needs no more than the ATen operators it calls is built with the lightest header' '
	pick light | jq -e .ok >/dev/null &&
	deps light | grep -q "/ca-light-[0-9a-f]*/torch/extension.h" && ! deps light | grep -q "torch/python.h"
'
expect_success 'one that needs torch'"'"'s autograd (no ATen operator): built again with ca'"'"'s light header' '
	pick middle | jq -e .ok >/dev/null &&
	deps middle | grep -q "py/light/torch/extension.h"
'
expect_success 'a unit that needs the C++ frontend is built again with torch'"'"'s header, and passes' '
	pick frontend | jq -e .ok >/dev/null &&
	deps frontend | grep -q "relu_frontend/main.cpp" && ! deps frontend | grep -q "py/light/torch/extension.h"
'
expect_success 'a compile error is stage load, and shows the compiler'"'"'s message of the full build' '
	pick broken | jq -e ".ok == false and .stage == \"load\" and (.error | test(\"not_declared_here\"))" >/dev/null
'
expect_success 'CA_LIGHT_HEADERS=0: torch'"'"'s header from the start' '
	cand plain "" && jq -nc --rawfile code "$ADV/tasks/relu_small.py" --arg dir "$C/plain" \
		"{id: \"plain\", code: \$code, candidate: {dir: \$dir}}" >one.ndjson &&
	CA_LIGHT_HEADERS=0 ca-verify --device cpu --no-sandbox --checks 2 --robust 0 --seed 7 one.ndjson >o.ndjson &&
	jq -e .verify.ok o.ndjson >/dev/null &&
	deps plain | grep -q "relu_plain/main.cpp" && ! deps plain | grep -q "py/light/torch/extension.h"
'
# CUDA-Agent's layout built by ca-build: its binding and registry, a CPU ReLU.
agent() { # dir extra-line
	mkdir -p "$1/kernels" && cp "$TESTS_DIR/adversarial/flavours/cuda_agent/binding.cpp" \
		"$TESTS_DIR/adversarial/flavours/cuda_agent/binding_registry.h" "$1/" &&
	cat >"$1/kernels/relu_binding.cpp" <<EOF
#include "../binding_registry.h"

static torch::Tensor relu_forward(torch::Tensor x)
{
$RELU
$2
	return y;
}

static void register_relu(pybind11::module &m)
{
	m.def("relu_forward", &relu_forward, "ReLU (CPU)");
}

REGISTER_BINDING(relu, register_relu);
EOF
}
loads() { # build.json: the library imports and computes a ReLU
	(cd "$(dirname "$(jq -r .library "$1")")" && "$(ca_python)" -c "import torch, cuda_extension as e
x = torch.randn(1000); assert torch.equal(e.relu_forward(x), torch.relu(x))")
}
# ca-build's compilers run in ca-sandbox as another uid where we are root:
# a torch installed where that uid cannot read has no headers for them.
TORCH_INC=$("$(ca_python)" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
	skip 'ca-build with the light header' 'nvcc not found (ca-build asks it its version)'
elif ! ca-sandbox --show "$TORCH_INC" -- test -r "$TORCH_INC/torch/extension.h" 2>/dev/null; then
	skip 'ca-build with the light header' "torch's headers ($TORCH_INC) cannot be read inside ca-sandbox"
else
	BC=$TRASH_BASE/build-cache
	# The header made, or known not to be makeable (each pattern alone: one
	# ls of both fails while either is missing).
	pch_done() { for f in "$BC"/pch/*/torch.h.gch "$BC"/pch/*/torch.h.pch "$BC"/pch/*.failed; do [ -e "$f" ] && return 0; done; return 1; }
	# The C++ units' compiler: clang++ where PATH has one (ca-build(1)).
	CXX_WANT=g++
	command -v clang++ >/dev/null 2>&1 && CXX_WANT=clang++
	# With clang, the link goes through lld, else gold, where there is one; the result says which,
	# and lld's library says so too.
	LINKER=ld
	if [ $CXX_WANT = clang++ ]; then
		command -v ld.gold >/dev/null 2>&1 && LINKER=gold
		command -v ld.lld >/dev/null 2>&1 && LINKER=lld
	fi
	linked_fast() {
		jq -e --arg l "$LINKER" '.linker == $l' "$1" >/dev/null &&
		case $LINKER in
		lld) ! command -v readelf >/dev/null 2>&1 || readelf -p .comment "$(jq -r .library "$1")" | grep -q "Linker: .*LLD" ;;
		esac
	}
	# The first build starts torch's precompiled header in the background
	# and compiles without it; the next one uses it.
	expect_success 'ca-build, CUDA-Agent'"'"'s layout: every unit with the light header, and it loads; the header made meanwhile' '
		agent ws "" && CA_BUILD_PCH= ca-build --cache "$BC" ws >b.json 2>err; cat err
		jq -c "{ok, seconds, units, pch, light, cxx}" b.json | sed "s/^/# /" &&
		jq -e --arg cxx "$CXX_WANT" ".ok and .light and .pch == false and .units.compiled == 2 and .cxx == \$cxx" b.json >/dev/null &&
		loads b.json &&
		i=0; while [ $i -lt 600 ] && ! pch_done; do sleep 0.5; i=$((i + 1)); done
		say "# the header ready after another $((i / 2)) s" && ls "$BC"/pch/*/torch.h.?ch >/dev/null &&
		agent ws "    // a new binding" && ca-build --cache "$BC" ws >b2.json &&
		jq -c "{ok, seconds, units, pch, light, cxx}" b2.json | sed "s/^/# /" &&
		jq -e --arg cxx "$CXX_WANT" ".ok and .light and .pch and .units == {compiled: 1, cached: 1} and .cxx == \$cxx" b2.json >/dev/null &&
		loads b2.json &&
		linked_fast b2.json
	'
	expect_success 'ca-build: a binding that needs the C++ frontend is built again with torch'"'"'s header' '
		agent ws "    torch::optim::SGDOptions unused(0.1);" && ca-build --cache "$BC" ws >b.json 2>err; cat err
		jq -c "{ok, seconds, units, pch, light}" b.json | sed "s/^/# /" &&
		jq -e ".ok and .light == false" b.json >/dev/null && loads b.json
	'
	expect_status 1 'ca-build: a compile error is the full build'"'"'s, cached as the candidate'"'"'s' '
		agent ws "    q[0] = not_declared_here;" && ca-build --cache "$BC" ws >b.json; s=$?
		jq -e ".ok == false and .transient == false and .light == false and .cxx == \"g++\" and (.log | test(\"not_declared_here\"))" b.json >/dev/null &&
		ca-build --cache "$BC" ws >again.json; jq -e ".cached and .ok == false" again.json >/dev/null && exit $s
	'
	# g++ warns of a narrowing from a value not constant in braces; clang refuses it.
	expect_success 'ca-build: a binding only g++ compiles is built again with g++, and loads' '
		agent ws "    int narrow{x.numel()}; (void)narrow;" && ca-build --cache "$BC" ws >b.json 2>err; cat err
		jq -c "{ok, units, pch, light, cxx}" b.json | sed "s/^/# /" &&
		jq -e ".ok and .cxx == \"g++\"" b.json >/dev/null && loads b.json && jq -e ".linker == \"ld\"" b.json >/dev/null &&
		# The g++ header such a build wants is made in the background with its flags, and the next one uses it.
		i=0; while [ $i -lt 600 ] && ! ls "$BC"/pch/*/torch.h.gch >/dev/null 2>&1; do sleep 0.5; i=$((i + 1)); done
		agent ws "    int narrow{x.numel()}; (void)narrow; // again" && ca-build --cache "$BC" ws >b2.json &&
		jq -c "{ok, units, pch, light, cxx}" b2.json | sed "s/^/# /" &&
		jq -e ".ok and .pch and .cxx == \"g++\"" b2.json >/dev/null && ! ls "$BC"/pch/*.failed 2>/dev/null
	'
	expect_success 'CA_CXX=g++: g++ from the start (its own precompiled header)' '
		agent ws "    // g++ asked for" && CA_CXX=g++ CA_BUILD_PCH=wait ca-build --cache "$BC" ws >b.json &&
		jq -c "{ok, units, pch, light, cxx}" b.json | sed "s/^/# /" &&
		jq -e ".ok and .light and .pch and .cxx == \"g++\"" b.json >/dev/null && loads b.json &&
		ls "$BC"/pch/*/torch.h.gch >/dev/null
	'
	expect_status 2 'ca-build --cxx: a compiler not in PATH is a usage error' '
		agent ws "" && ca-build --cache "$BC" --cxx no-such-c++ ws >b.json 2>err; s=$?
		cat err; grep -qF "no-such-c++" err && exit $s
	'
fi
test_done
