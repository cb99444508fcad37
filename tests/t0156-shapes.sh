#!/bin/sh
# verify's checks at other sizes (--shapes N): after the checks and the
# robustness checks, the task rebuilt with its size globals (batch_size,
# dim, ...) made smaller and the candidate with it, so a kernel that
# hard-codes the benchmark's sizes fails with stage "shapes". Honest
# candidates pass; a reference that cannot run at a size moves on to
# another; a task without size globals is skipped with a reason;
# --shapes 0 (the default) is verify as before. Python candidates
# (--allow-torch) stand in for kernels.
. "$(dirname "$0")/test-lib.sh"

if ! has_torch; then
	skip 'checks at other sizes' 'needs torch for the Python runner'
	test_done
	exit
fi
W=$TRASH_BASE/py
mkdir -p "$W"
task() { # name init-args forward-body get_inputs-body globals...
	n=$1 init=$2 fwd=$3 inp=$4
	shift 4
	{
		printf "%s\n" "import torch" "import torch.nn as nn" "$@" "class Model(nn.Module):" \
			"    def __init__(self$init):" "        super().__init__()"
		[ -n "$init" ] && echo "        self.lin = nn.Linear(dim, dim)"
		printf "%s\n" "    def forward(self, x):" "        $fwd" "def get_inputs():" "    $inp" \
			"def get_init_inputs():" "    return [${init#, }]"
	} >"$W/$n.py"
}
cand() { # name init-args forward-body
	mkdir -p "$W/$1"
	{
		printf "%s\n" "import torch" "import torch.nn as nn" "class ModelNew(nn.Module):" \
			"    def __init__(self$2):" "        super().__init__()"
		[ -n "$2" ] && echo "        self.lin = nn.Linear(dim, dim)"
		printf "%s\n" "    def forward(self, x):" "        $3"
	} >"$W/$1/model_new.py"
}
task linear ', dim' 'return torch.relu(self.lin(x))' 'return [torch.randn(batch_size, dim)]' 'batch_size = 16' 'dim = 64'
cand linear ', dim' 'return torch.relu(self.lin(x))'
# Hard-coded sizes: a reshape to the benchmark's (16, 64), a divisor of 64.
cand reshape ', dim' 'return torch.relu(self.lin(x.reshape(16, 64)))'
task mean '' 'return x.mean(dim=1)' 'return [torch.rand(batch_size, dim)]' 'batch_size = 16' 'dim = 64'
cand mean '' 'return x.mean(dim=1)'
cand mean64 '' 'return x.sum(dim=1) / 64'
# Sizes that constrain each other: dim must stay a multiple of 4.
task heads '' 'return x.view(x.shape[0], 4, -1).softmax(-1).reshape(x.shape)' 'return [torch.randn(batch_size, dim)]' \
	'batch_size = 16' 'dim = 12'
cand heads '' 'return x.view(x.shape[0], 4, -1).softmax(-1).reshape(x.shape)'
# A reference whose output at any smaller size cannot judge (all zero): every proposal skipped.
task small_zero '' 'return torch.relu(x) if x.numel() >= 1024 else x * 0' 'return [torch.randn(batch_size, dim)]' \
	'batch_size = 16' 'dim = 64'
cand small_zero '' 'return torch.relu(x)'
task literal '' 'return torch.tanh(x)' 'return [torch.randn(16, 64)]'
cand literal '' 'return torch.tanh(x)'
record() { # id task dir
	jq -nc --arg id "$1" --rawfile code "$2" --arg dir "$3" '{id: $id, code: $code, candidate: {dir: $dir}}'
}
{
	record honest/linear "$W/linear.py" "$W/linear"
	record cheat/reshape "$W/linear.py" "$W/reshape"
	record honest/mean "$W/mean.py" "$W/mean"
	record cheat/mean64 "$W/mean.py" "$W/mean64"
	record honest/heads "$W/heads.py" "$W/heads"
	record honest/literal "$W/literal.py" "$W/literal"
} >"$TRASH_BASE/in.ndjson"
OPTS="--device cpu --no-sandbox --allow-torch --robust 0 --seed 7"
pick() { jq -c --arg id "$1" 'select(.id == $id) | .verify' "$TRASH_BASE/out.ndjson"; }

expect_status 1 'kernels that hard-code the benchmark sizes fail at stage shapes; honest ones pass' '
	ca-verify $OPTS --shapes 2 "$TRASH_BASE/in.ndjson" >"$TRASH_BASE/out.ndjson"; s=$?
	jq -c "{id, ok: .verify.ok, stage: .verify.stage, shapes: .verify.shapes}" "$TRASH_BASE/out.ndjson" | sed "s/^/# /"
	jq -e -s "map({key: .id, value: (.verify | if .ok then \"ok\" else .stage end)}) | from_entries ==
		{\"honest/linear\": \"ok\", \"cheat/reshape\": \"shapes\", \"honest/mean\": \"ok\", \"cheat/mean64\": \"shapes\",
		 \"honest/heads\": \"ok\", \"honest/literal\": \"ok\"}" "$TRASH_BASE/out.ndjson" >/dev/null &&
	exit $s
'
expect_success 'a passing record says which sizes ran, under which seeds' '
	pick honest/linear | jq -e ".checks_passed == 5 and (.shapes | .asked == 2 and .checks == 2 and .passed == 2
		and .failed == null and .skipped == []
		and .sizes == [{globals: {batch_size: 8, dim: 32}, seed: 13}, {globals: {batch_size: 12, dim: 48}, seed: 14}])"
'
expect_success 'a failure names the sizes and what the kernel must do' '
	pick cheat/reshape | jq -e "(.shapes | .failed == {batch_size: 8, dim: 32} and .passed == 0 and .checks == 1) and
		(.error | test(\"^shapes check 1 \\\\(batch_size=8, dim=32; seed 13\\\\) \\\\(run\\\\): .*other sizes of the same task\"))" &&
	pick cheat/mean64 | jq -e ".shapes.failed == {batch_size: 8, dim: 32} and (.error | test(\"^shapes check 1 .*: .*not from the benchmark\"))"
'
expect_success 'sizes the reference cannot run are skipped with its reason; others are tried' '
	pick honest/heads | jq -c .shapes
	pick honest/heads | jq -e ".ok and (.shapes | .checks == 1 and .passed == 1
		and (.skipped | length == 3 and all(.[]; test(\"the reference fails there: .*invalid for input\")))
		and .sizes == [{globals: {batch_size: 8, dim: 12}, seed: 15}])"
'
expect_success 'a task without size globals is skipped with a reason' '
	pick honest/literal | jq -c .shapes
	pick honest/literal | jq -e ".ok and (.shapes | .checks == 0 and (.skipped[0] | test(\"no sizes to change\")))"
'
expect_success '--shapes 0, the default, is verify as before: the cheats pass' '
	grep "cheat/" "$TRASH_BASE/in.ndjson" | ca-verify $OPTS >out &&
	jq -e -s "length == 2 and all(.[]; .verify.ok and .verify.shapes == null)" out
'
expect_success 'ca-profile --verify --shapes: the profile follows at the benchmark sizes' '
	grep "honest/linear" "$TRASH_BASE/in.ndjson" |
		ca-profile $OPTS --verify --shapes 1 --no-compile --warmup 1 --iters 3 >out 2>err || { cat err; exit 1; }
	jq -e ".verify.ok and .verify.shapes.passed == 1 and .profile.ok" out
'
expect_success 'every proposal skipped: the reference is back at the benchmark sizes for the profile' '
	record honest/small_zero "$W/small_zero.py" "$W/small_zero" |
		ca-profile $OPTS --verify --shapes 1 --no-compile --warmup 1 --iters 3 >out 2>err || { cat err; exit 1; }
	jq -c "{shapes: .verify.shapes.skipped, profile: (.profile | {ok, error, inputs_shipped})}" out
	jq -e ".verify.ok and .verify.shapes.checks == 0 and (.verify.shapes.skipped | length == 4) and .profile.ok and
		(.profile.inputs_shipped | not)" out
'
test_done
