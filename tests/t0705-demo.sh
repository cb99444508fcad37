#!/bin/sh
# scripts/demo (make demo) on a machine without a GPU: synthesis without
# the workload check (and the compile check on one task), the agent loop over the shipped
# KernelBench problems with the replay policy (builds only), the recorded
# candidates scored into Table 1, the toy RL loop; a line for each part
# that needs a GPU.
. "$(dirname "$0")/test-lib.sh"

expect_success 'demo --cpu: every part runs or says it needs a GPU, Table 1 is printed' '
	CA_DEMO_COMPILE_CHECKS=1 "$ROOT/scripts/demo" --cpu --no-crawl -n 4 -o d >out 2>err || { cat out err; exit 1; }
	cat out &&
	grep -q "^== machine: no GPU" out &&
	[ "$(grep -c "needs a GPU" out)" -ge 2 ] &&
	[ $(wc -l <d/synth/filtered.ndjson) -eq 4 ] &&
	grep -q "torch.compile check on the CPU: 1 of 1 tasks agree with eager" out &&
	jq -e -s "length == 3 and all(.[]; .trajectory.stop == \"done\" and .trajectory.invalid_tool_calls == 0)" d/rollout/trajectories.ndjson &&
	grep -q "kernelbench/L1/14: 9 turns, stop done" out &&
	grep -q "^level  *count  *errors  *pass" out && grep -q "^all  *24 " out &&
	grep -q "step  *20  *ppo  *reward" out &&
	[ -s d/toy-rl/training.tsv ] &&
	grep -q "^== done in" out
'
expect_status 2 'demo: a bad option is a usage error' '"$ROOT/scripts/demo" --bogus'
test_done
