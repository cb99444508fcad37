#!/bin/sh
# The decontamination measure: a lightly renamed KernelBench problem scores
# above 0.9 against the shipped fingerprints, unrelated tasks far below.
# Needs no torch (--fingerprint and the similarity run in C; the torch
# checks are skipped for contaminated tasks, and we give --max-sim 0 so
# every task is).
. "$(dirname "$0")/test-lib.sh"
fp=$ROOT/data/kernelbench-fingerprints.ndjson

# A level-2 style problem written here with our own names: conv, bias, scale, sigmoid, group norm.
cat >"$TRASH_BASE/renamed.py" <<'PY'
import torch
import torch.nn as nn


class Model(nn.Module):
    """Renamed: every identifier differs from the benchmark's."""

    def __init__(self, cin, cout, k, groups, bshape, sshape):
        super(Model, self).__init__()
        self.c = nn.Conv2d(cin, cout, k)
        self.b = nn.Parameter(torch.randn(bshape))
        self.s = nn.Parameter(torch.randn(sshape))
        self.g = nn.GroupNorm(groups, cout)

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        h = self.c(inp)
        h = h + self.b
        h = h * self.s
        h = torch.sigmoid(h)
        h = self.g(h)
        return h


def get_inputs():
    return [torch.rand(128, 3, 32, 32)]


def get_init_inputs():
    return [3, 16, 3, 8, (16, 1, 1), (16, 1, 1)]
PY
jq -cRs '{id: "renamed", code: .}' "$TRASH_BASE/renamed.py" >"$TRASH_BASE/renamed.ndjson"

expect_success 'the shipped fingerprints cover the 270 KernelBench problems' '
	[ "$(wc -l <"'"$fp"'")" -eq 270 ] && jq -e ".fingerprint | length > 0" "'"$fp"'" >/dev/null'
expect_success 'a renamed KernelBench problem scores above 0.9 and names its original' '
	ca-filter --max-sim 0 <"$TRASH_BASE/renamed.ndjson" >out &&
	jq -e ".filter.max_sim > 0.9 and (.filter.nearest | startswith(\"kernelbench/L2/\")) and (.filter.ok | not)" out'
# A two-operator composition can be KernelBench-like by chance (seed 9 draws
# linear, dropout, softmax: 0.87 to L2/66 Matmul_Dropout_Softmax), so the
# bound on every task is the rubric's cut; the median shows the distance.
expect_success 'unrelated composed tasks score below the cut (all <= 0.9, median < 0.8)' '
	ca-compose --no-seeds -n 200 --seed 9 --distribution 0,1,1 | ca-filter --max-sim 0 >out &&
	[ "$(jq -r "select(.filter.max_sim > 0.9) | .id" out | wc -l)" -eq 0 ] &&
	[ "$(jq -r .filter.max_sim out | sort -n | sed -n 100p | awk "{print (\$1 < 0.8)}")" = 1 ]'
expect_success '--against takes raw problems (code) or fingerprints' '
	ca-filter --max-sim 0 --against "'"$TRASH_BASE/renamed.ndjson"'" <"$TRASH_BASE/renamed.ndjson" >out &&
	jq -e ".filter.max_sim == 1 and .filter.nearest == \"renamed\"" out'
expect_success 'renaming is invisible (1.0); swapping and adding operators lowers the score' '
	sed "s/torch.sigmoid/torch.tanh/; s/self.g(h)/torch.relu(self.g(h))/" "$TRASH_BASE/renamed.py" |
		jq -cRs "{id: \"changed\", code: .}" >changed.ndjson &&
	ca-filter --max-sim 0 --against "'"$TRASH_BASE/renamed.ndjson"'" <changed.ndjson >out &&
	jq -e ".filter.max_sim < 0.97 and .filter.max_sim > 0.6" out'
if [ -f "$SHARED_DATA/kernelbench.ndjson" ]; then
	expect_success 'the shipped fingerprints are current with lib/pylex' '
		ca-filter --fingerprint "$SHARED_DATA/kernelbench.ndjson" | jq -c "{level, num, name, path, fingerprint}" >now &&
		cmp_output "'"$fp"'" now'
	expect_success 'every level-1/2 problem, its names rewritten, still scores above 0.9' '
		jq -c "select(.level <= 2) | .code |= gsub(\"(?<a>[^a-zA-Z_.])x(?<b>[^a-zA-Z_0-9])\"; \"\(.a)inp\(.b)\")
			| .code |= gsub(\"self[.](?<n>[a-z_]+)\"; \"self.my_\(.n)\")" "$SHARED_DATA/kernelbench.ndjson" |
			ca-filter --max-sim 0 >out &&
		[ "$(jq -r "select(.filter.max_sim <= 0.9) | .id" out | wc -l)" -eq 0 ]'
else
	skip 'fingerprints current; renamed benchmark' "no $SHARED_DATA/kernelbench.ndjson"
fi
test_done
