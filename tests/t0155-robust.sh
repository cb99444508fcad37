#!/bin/sh
# verify's robustness checks (--robust N): after the paper's checks, the
# same shapes, dtypes and weights with values from other distributions,
# so a kernel right only on get_inputs()'s draws fails with stage
# "robust": the identity for a ReLU of non-negative draws, a polynomial
# fitted to [0, 1), sums over a subset of the rows. Honest kernels pass;
# the moved values keep the draw's structure (zeros, symmetry, ties); a
# task defined only on positive values gets magnitudes alone; --robust 0
# is the paper's verify. CPU stand-ins for the CUDA kernels, as in t0151.
. "$(dirname "$0")/test-lib.sh"

ADV=$TESTS_DIR/adversarial
if ! has_torch || ! command -v cc >/dev/null 2>&1; then
	skip 'robustness checks' 'needs torch for the Python runner and a C compiler'
	test_done
	exit
fi
PY=$(ca_python)
C=$TRASH_BASE/candidates
mkdir -p "$C"
prep() { # KIND/NAME [stand-in]: the candidate with its CUDA replaced by cpu/NAME.c or the stand-in given
	d=$C/$(basename "$1") src=$ADV/cpu/$(basename "$1").c
	[ -f "$src" ] || src=$ADV/cpu/$2
	cp -R "$ADV/$1" "$d" && rm -rf "$d/kernels" && mkdir -p "$d/build" &&
		cc -O2 -shared -fPIC -o "$d/build/libkernels.so" "$src" -lm
}
prep honest/relu_pos relu_cpu.c && prep cheat/dist_identity && prep honest/tanh && prep cheat/range_poly &&
	prep honest/sum_long sum.c && prep cheat/sum_strided && prep cheat/sum_half || exit 1
record() { # id task dir
	jq -nc --arg id "$1" --rawfile code "$2" --arg dir "$3" '{id: $id, code: $code, candidate: {dir: $dir}}'
}
{
	record honest/relu_pos "$ADV/tasks/relu_pos.py" "$C/relu_pos"
	record cheat/dist_identity "$ADV/tasks/relu_pos.py" "$C/dist_identity"
	record honest/tanh "$ADV/tasks/tanh_unit.py" "$C/tanh"
	record cheat/range_poly "$ADV/tasks/tanh_unit.py" "$C/range_poly"
	record honest/sum_long "$ADV/tasks/sum_long.py" "$C/sum_long"
	record cheat/sum_strided "$ADV/tasks/sum_long.py" "$C/sum_strided"
	record cheat/sum_half "$ADV/tasks/sum_long.py" "$C/sum_half"
} >"$TRASH_BASE/in.ndjson"
OPTS="--device cpu --no-sandbox --gpus 0,0"
pick() { jq -c --arg id "$1" 'select(.id == $id) | .verify' "$TRASH_BASE/out.ndjson"; }

expect_status 1 'cheats right only on the draws fail at stage robust; honest kernels pass' '
	ca-verify $OPTS --seed 7 "$TRASH_BASE/in.ndjson" >"$TRASH_BASE/out.ndjson"; s=$?
	jq -c "{id, ok: .verify.ok, stage: .verify.stage, robust: (.verify.robust | {checks, failed})}" "$TRASH_BASE/out.ndjson" | sed "s/^/# /"
	jq -e -s "map({key: .id, value: (.verify | if .ok then \"ok\" else .stage end)}) | from_entries ==
		{\"honest/relu_pos\": \"ok\", \"cheat/dist_identity\": \"robust\", \"honest/tanh\": \"ok\", \"cheat/range_poly\": \"robust\",
		 \"honest/sum_long\": \"ok\", \"cheat/sum_strided\": \"robust\", \"cheat/sum_half\": \"robust\"}" "$TRASH_BASE/out.ndjson" >/dev/null &&
	exit $s
'
expect_success 'a passing record says which distributions ran, under which seeds' '
	pick honest/relu_pos | jq -e ".checks_passed == 5 and (.robust | .asked == 3 and .checks == 3 and .passed == 3 and .failed == null
		and ([.dists[].dist] == [\"signed\", \"spikes\", \"ties\"]) and ([.dists[].seed] == [13, 14, 15])
		and all(.dists[]; .atol > 0))"
'
expect_success 'a failure names the distribution, the seed and what the kernel must do' '
	pick cheat/sum_strided | jq -e "(.robust | .failed == \"signed\" and .passed == 0) and
		(.error | test(\"^robustness check 1 \\\\(signed: .*seed 13\\\\): .*correct for any input of the task.s shapes and dtypes\"))"
'
expect_success '--robust 0 is the paper verify: the same cheats pass its five checks' '
	grep "cheat/" "$TRASH_BASE/in.ndjson" | ca-verify $OPTS --robust 0 >out &&
	jq -e -s "length == 4 and all(.[]; .verify.ok and .verify.robust == null)" out
'

# Python-only candidates (--allow-torch) for what the kernels do not show.
W=$TRASH_BASE/py
mkdir -p "$W"
task() { # name forward-body get_inputs-body
	printf "%s\n" "import torch" "import torch.nn as nn" "class Model(nn.Module):" \
		"    def forward(self, a, b=None):" "        $2" "def get_inputs():" "    $3" \
		"def get_init_inputs():" "    return []" >"$W/$1.py"
}
cand() { # name forward-body
	mkdir -p "$W/$1" && printf "%s\n" "import torch" "import torch.nn as nn" "class ModelNew(nn.Module):" \
		"    def forward(self, a, b=None):" "        $2" >"$W/$1/model_new.py"
}
task log 'return torch.log(a)' 'return [torch.rand(64, 64) + 0.5]'
cand log 'return torch.log(a)'
task triu 'return torch.triu(a @ b)' 'return [torch.triu(torch.rand(64, 64)), torch.triu(torch.rand(64, 64))]'
# Right for triangular inputs only: the blocks below the diagonal are taken as zero.
cand triu 'return torch.triu(torch.triu(a) @ torch.triu(b))'
task symm 'return a @ b' 'x = torch.rand(64, 64); return [x + x.T, torch.rand(64, 64)]'
# Right for a symmetric a only.
cand symm 'return a.T.contiguous() @ b'
task const 'return torch.ones_like(a)' 'return [torch.rand(8, 8)]'
cand const 'return torch.ones_like(a)'
{
	record log "$W/log.py" "$W/log"
	record triu "$W/triu.py" "$W/triu"
	record symm "$W/symm.py" "$W/symm"
	record const "$W/const.py" "$W/const"
} >"$TRASH_BASE/py.ndjson"
expect_success 'structure kept, positive-only tasks get magnitudes, degenerate outputs are skipped' '
	ca-verify $OPTS --allow-torch --seed 3 "$TRASH_BASE/py.ndjson" >out 2>err || { cat err; jq -c .verify out; exit 1; }
	jq -c "{id, ok: .verify.ok, robust: (.verify.robust | {checks, skipped})}" out | sed "s/^/# /"
	jq -e -s "all(.[]; .verify.ok)" out >/dev/null &&
	jq -e -s ".[0].verify.robust | .checks == 3 and (.skipped[0] | startswith(\"signed: \")) and
		all(.dists[]; .dist != \"signed\") and any(.dists[]; .signed == false)" out >/dev/null &&
	jq -e -s ".[1].verify.robust.checks == 3 and .[2].verify.robust.checks == 3" out >/dev/null &&
	jq -e -s ".[3].verify.robust | .checks == 0 and (.skipped | length) >= 6 and (.skipped[0] | test(\"constant\"))" out >/dev/null
'
expect_success 'the moved values: zeros, symmetry and ties kept, signs mixed, repeatable, integers untouched' '
	"$PY" - "$ROOT/lib/py" <<-PYEOF
	import sys, torch
	sys.path.insert(0, sys.argv[1])
	import ca_runner as r
	torch.manual_seed(0)
	x = torch.triu(torch.rand(32, 32)); s = torch.rand(16, 16); s = s + s.T
	idx = torch.randint(0, 10, (7,)); h = torch.rand(8, 8).half()
	for d in r.ROBUST_DISTS:
	    for signed in (True, False):
	        spec = {"dist": d, "signed": signed, "seed": 12345}
	        y, z, i, hh = r.robust_inputs([x, s, idx, h], spec)
	        assert (y[x == 0] == 0).all() and (d == "ties" or torch.equal(y == 0, x == 0)), d
	        assert torch.equal(z, z.T), d
	        assert torch.equal(i, idx) and hh.dtype == torch.float16, d
	        assert not torch.equal(y, x) or (d, signed) == ("signed", False), d
	        assert torch.equal(r.robust_inputs([x], spec)[0], y), d
	        if signed and d != "shifted":
	            assert (y < 0).any() and (y > 0).any(), d
	        if not signed:
	            assert (y >= 0).all(), d
	ties = r.robust_inputs([x], {"dist": "ties", "signed": True, "seed": 1})[0]
	assert ties.abs().unique().numel() < 20
	other = r.robust_inputs([x], {"dist": "signed", "signed": True, "seed": 2})[0]
	assert not torch.equal(other, r.robust_inputs([x], {"dist": "signed", "signed": True, "seed": 1})[0])
	PYEOF
'
test_done
