#!/bin/sh
# The fallback guard of lib/py/ca_runner.py on its own, on CPU tensors:
# creation, views, metadata and copies pass; compute is refused whichever
# way it is reached (torch.*, functional, Tensor methods, torch.ops.aten,
# nn modules), and a refusal stays recorded when the candidate catches it.
# Also the kernel-name rule the runner shares with ca-verify. One Python
# process runs every case and prints one line each.
. "$(dirname "$0")/test-lib.sh"

if ! has_torch; then
	skip 'fallback guard' 'no torch for the Python runner (make deps)'
	test_done
	exit
fi
PY=$(ca_python)
"$PY" - "$ROOT/lib/py" >"$TRASH_BASE/results" 2>"$TRASH_BASE/errors" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import torch
import re
import ca_runner as r
_print = print


def print(line):
    # The details are made plain: the shell quotes them.
    verdict, what, detail = line.split("\t", 2)
    _print("%s\t%s\t%s" % (verdict, what, re.sub(r"[^A-Za-z0-9 :._]", "_", detail)))


lin = torch.nn.Linear(8, 8)
cases = [
    ("allowed", "", "z = torch.empty_like(x); z = torch.zeros(3); z = torch.full((2,), 1.0)"),
    ("allowed", "", "z = x.view(8, 4).t().reshape(32)[3:7].unsqueeze(0).contiguous().clone()"),
    ("allowed", "", "y.copy_(x); z = x.to(torch.float64); n = x.numel(); s = x.shape; p = x.data_ptr()"),
    ("allowed", "", "a, b = x.split(2); z = x.permute(1, 0).expand(8, 4); z = x.detach()"),
    ("refused", "relu", "torch.relu(x)"),
    ("refused", "gelu", "torch.nn.functional.gelu(x)"),
    ("refused", "clamp", "x.clamp(min=0)"),
    ("refused", "mm", "torch.ops.aten.mm.default(x, x.t())"),
    ("refused", "add", "x + 1"),
    ("refused", "addmm", "lin(x)"),
    ("refused", "_softmax", "torch.softmax(x, dim=1)"),
    ("refused", "sum", "x.sum()"),
]
for want, op, code in cases:
    x = torch.randn(4, 8)
    y = torch.empty(4, 8)
    g = r.make_guard("/nonexistent/")
    got = "allowed"
    try:
        with g:
            exec(code)
    except r._Violation:
        got = "refused"
    good = got == want and (want == "allowed" and not g.violations or
                            want == "refused" and g.violations[0].startswith("aten::" + op))
    print("%s\t%s: %s\t%s" % ("ok" if good else "bad", want, code, ";".join(g.violations)))

g = r.make_guard("/nonexistent/")
x = torch.randn(3)
with g:
    try:
        torch.relu(x)
    except Exception:
        pass
    z = torch.empty(3)
print("%s\ta caught refusal is still recorded\t%s" % ("ok" if g.violations == ["aten::relu"] else "bad", g.violations))

# torch.compile and torch._dynamo.optimize refused, the latter patched when
# torch._dynamo is first imported (here, as in a candidate, after the refusal).
was = "torch._dynamo" in sys.modules
r._refuse_compile()
import torch._dynamo
refused = []
for name, f in (("torch.compile", lambda: torch.compile(torch.relu)), ("torch._dynamo.optimize", lambda: torch._dynamo.optimize("eager"))):
    try:
        f()
    except r._Violation:
        refused.append(name)
print("%s\ttorch.compile and torch._dynamo.optimize are refused (torch._dynamo imported before: %s)\t%s"
      % ("ok" if len(refused) == 2 else "bad", was, refused))

names = ["void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar>",
         "triton_poi_fused_relu_0", "void at::native::elementwise_kernel<128, 2, at::native::FillFunctor<float>>",
         "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_cublas", "relu_vec4(float4 const*, float4*, long long)"]
bad = r.forbidden_kernels([{"name": n} for n in names])
print("%s\tkernel names: ATen and torch.compile compute refused; fills, cuBLAS, own kernels allowed\t%s"
      % ("ok" if bad == names[:2] else "bad", bad))
PYEOF
# In a fresh process torch._dynamo is not imported yet: the import hook patches it.
expect_success 'torch._dynamo.optimize is refused when torch._dynamo is imported after the refusal' '
	"$PY" - "$ROOT/lib/py" <<-EOF
	import sys
	sys.path.insert(0, sys.argv[1])
	import torch
	import ca_runner as r
	r._refuse_compile()
	assert "torch._dynamo" not in sys.modules, "imported already"
	import torch._dynamo
	try:
	    torch._dynamo.optimize("eager")
	except r._Violation:
	    sys.exit(0)
	sys.exit("not refused")
	EOF
'
# A candidate's guarded checks must not pay torch._dynamo's import (its
# TorchDispatchMode wrappers are told dynamo never traces there): on the
# H200 that import made the first check 1 s slower, and a loop beside the
# thread that once did it waited for the GIL.
expect_success 'a guarded check in a candidate does not import torch._dynamo' '
	"$PY" - "$ROOT/lib/py" <<-EOF
	import sys
	sys.path.insert(0, sys.argv[1])
	import torch
	import ca_runner as r
	r._refuse_compile()
	g = r.make_guard("/nonexistent")
	with g:
	    torch.ones(4).clone()
	try:
	    with g:
	        torch.ones(4) + 1
	except r._Violation:
	    pass
	assert g.violations == ["aten::add"], g.violations
	assert "torch._dynamo" not in sys.modules, "torch._dynamo imported by the guard"
	EOF
'
expect_success 'the guard script ran' 'test -s "$TRASH_BASE/results" || { cat "$TRASH_BASE/errors"; exit 1; }'
while IFS='	' read -r verdict what detail; do
	expect_success "$what" "test '$verdict' = ok || { echo 'violations: $detail'; exit 1; }"
done <"$TRASH_BASE/results"
test_done
