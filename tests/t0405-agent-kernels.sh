#!/bin/sh
# The kernels the replayed agent writes in the GPU tests and in make demo
# (the shipped solutions of examples/kernelbench), checked without a GPU:
# they compile for sm_90, and the steps of L1/14's and L2/18's, run on the
# CPU, match a double-precision reference. Needs nvcc.
. "$(dirname "$0")/test-lib.sh"

D=$TESTS_DIR/data/agent
KB=$ROOT/examples/kernelbench
SOL=$KB/solutions
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
if [ -z "$NVCC" ]; then
	skip 'agent kernels compile and match a CPU reference' 'nvcc not found'
	test_done
	exit 0
fi

for k in L1-1/kernels/gemm.cu L1-14-v1/kernels/triu_matmul.cu \
	"L1-14-v1/kernels/triu_matmul.cu L1-14-v2/kernels/triu_blocked.cu" L2-18/kernels/linear_sum.cu; do
	expect_success "$k: compiles for sm_90 as ca-build compiles it" '
		(cd "$SOL" && "$NVCC" -shared -Xcompiler -fPIC -arch=sm_90 -O3 -std=c++17 -o "$TRASH/k.so" '"$k"' -lcublas)
	'
done

expect_success 'emulated on the CPU, the kernels and the cuBLAS plan match the reference' '
	(cd "$D" && "$NVCC" -O2 -std=c++17 -I"$SOL" -o "$TRASH/emulate" emulate-kernels.cu -lcublas) && "$TRASH/emulate"
'

expect_success 'through ca-agent: the agent writes the L2/18 solution and the real ca-build builds its snapshot' '
	jq -c "select(.id == \"kernelbench/L2/18\")" "$KB/tasks.ndjson" >task &&
	for f in kernels/linear_sum.cu model_new.py; do
		jq -cn --arg p "$f" --rawfile c "$SOL/L2-18/$f" \
			"{role: \"assistant\", content: null, tool_calls: [{id: \"w\", type: \"function\",
			  function: {name: \"write\", arguments: ({path: \$p, content: \$c} | tojson)}}]}"
	done >turns &&
	jq -cn "{role: \"assistant\", content: null, tool_calls: [{id: \"b\", type: \"function\",
		function: {name: \"bash\", arguments: \"{\\\"command\\\": \\\"ca-build\\\"}\"}}]}" >>turns &&
	CA_CACHE=$TRASH/cache ca-agent --policy "policy-replay turns" task >traj &&
	jq -e ".trajectory.snapshots[0].result.ok == true and .trajectory.snapshots[0].result.flavour == \"ca\"
		and (.trajectory.snapshots[0].files | keys) == [\"kernels/linear_sum.cu\", \"model_new.py\"]" traj
'

test_done
