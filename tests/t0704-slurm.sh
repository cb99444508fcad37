#!/bin/sh
# scripts/slurm with the fake sbatch and srun of tests/fake-slurm: shards
# made with split -n l/K, one array task per shard, a merge that checks
# count in = count out and names the shards to resubmit; srun-rollout and
# train.sbatch spreading a rollout over the tasks of an allocation.
. "$(dirname "$0")/test-lib.sh"
D=$TESTS_DIR/data/agent
S=$ROOT/scripts/slurm
DASH=$(command -v dash || echo sh)
PATH=$TESTS_DIR/fake-slurm:$PATH
FAKE_SLURM_STATE=$TRASH_BASE/slurm-state
export D S DASH PATH FAKE_SLURM_STATE
tasks() { i=1; while [ "$i" -le "$1" ]; do printf '{"id":"t%d","level":1,"code":"class Model: pass\\n"}\n' "$i"; i=$((i + 1)); done; }
ARGS="--agent-opts --unconfined --policy 'echo {\\\"content\\\":\\\"done\\\"}'"
export ARGS

for f in submit shard.sbatch merge.sbatch train.sbatch srun-rollout srun-step; do
	expect_success "$f is dash-clean" '$DASH -n "$S/'$f'"'
done
expect_status 2 'submit: an unknown pipeline is a usage error' '$S/submit -o out bake /dev/null'

expect_success 'rollout over 3 shards: every task comes back once, in order' '
	tasks 7 >t &&
	eval "$DASH \"\$S/submit\" -K 3 -o run rollout t -- $ARGS --score \"jq -c -f \$D/scores.jq\"" 2>err &&
	[ "$(cat run/shards/count)" = "3 7" ] &&
	[ $(cat run/shards/00[0-2]/in.ndjson | wc -l) -eq 7 ] &&
	[ $(wc -l <run/best.ndjson) -eq 7 ] && jq -r .id run/best.ndjson | tr "\n" " " | grep -q "^t1 t2 t3 t4 t5 t6 t7 $" &&
	grep -q "merge: 7 records in, 7 out" slurm-*.out'

expect_success 'a short shard fails the merge, which names it; resubmitting it finishes the run' '
	tasks 6 >t &&
	eval "\"\$S/submit\" -K 2 -o run rollout t -- $ARGS" 2>err && [ $(wc -l <run/best.ndjson) -eq 6 ] &&
	rm run/best.ndjson && sed -i 1d run/shards/001/best.ndjson &&
	sbatch --output=merge1.out "$S/merge.sbatch" "$PWD/run" >/dev/null &&
	grep -q "shard 1: 3 records in, 2 out" merge1.out && grep -q "resubmit: sbatch --array=1 shard.sbatch" merge1.out &&
	[ ! -f run/best.ndjson ] &&
	sbatch --array=1 "$S/shard.sbatch" "$PWD/run" >/dev/null && sbatch --output=merge2.out "$S/merge.sbatch" "$PWD/run" >/dev/null &&
	grep -q "0 of 3 tasks to roll out" slurm-*_1.out && [ $(wc -l <run/best.ndjson) -eq 6 ]'

expect_success 'eval over shards: tasks prepared, merged, tabulated per level' '
	for n in 1 2 3; do jq -cn --argjson n $n "{level: 1, num: \$n, name: \"p\", code: \"class Model: pass\n\"}"; done >kb &&
	eval "\"\$S/submit\" -K 2 -o ev eval kb -- $ARGS --score \"jq -c -f \$D/scores.jq\"" 2>err &&
	[ $(wc -l <ev/results.ndjson) -eq 3 ] && grep -q "^all  *3 " ev/table.txt'

expect_success 'srun-rollout: the batch split over SLURM_NTASKS tasks, joined in order, counted' '
	tasks 10 >t &&
	SLURM_NTASKS=3 "$S/srun-rollout" "jq -c \"{id, rank: env.SLURM_PROCID}\"" <t >out &&
	[ "$(jq -r .id out | tr "\n" " ")" = "t1 t2 t3 t4 t5 t6 t7 t8 t9 t10 " ] &&
	[ "$(jq -r .rank out | uniq | tr "\n" " ")" = "0 1 2 " ] &&
	! SLURM_NTASKS=2 "$S/srun-rollout" "head -n 1" <t >out 2>err && grep -q "10 task records in, 2 records out" err'

expect_success 'train.sbatch: ca-train gets its rollout wrapped in srun-rollout, NCCL variables set' '
	mkdir fake && cat >fake/ca-train <<-"FAKE" && chmod +x fake/ca-train &&
	#!/bin/sh
	while [ $# -gt 0 ]; do [ "$1" = --rollout ] && r=$2; shift; done
	echo "$MASTER_ADDR $MASTER_PORT $WORLD_SIZE" >env.txt
	printf "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n" | sh -c "$r"
	FAKE
	SLURM_NTASKS=2 PATH=$PWD/fake:$PATH sbatch --output=train.out "$S/train.sbatch" -a A -c C -t T -o O \
		--rollout "jq -c \". + {r: env.SLURM_PROCID}\"" >/dev/null &&
	[ "$(grep "^{" train.out | jq -r .r | tr "\n" " ")" = "0 0 1 " ] && [ "$(cut -d" " -f3 env.txt)" = 2 ]'
expect_success 'srun-step: a step over two tasks gives one process'"'"'s weights; its meeting directory is removed' '
	ca-toy init --seed 7 pol &&
	ca-toy prompts -n 12 --seed 1 | ca-sample -m pol --max-tokens 5 --token-record --seed 2 | ca-toy score |
		ca-logprob -m pol | jq -c ".advantages = [.mask[] * (.reward - 0.5)]" >batch &&
	ca-ppo-step -m pol -o one --mini-batches 2 --lr 1e-2 batch >s1 &&
	SLURM_NTASKS=2 CA_DIST_ROOT=$PWD/dist "$S/srun-step" ca-ppo-step -m pol -o two --mini-batches 2 --lr 1e-2 batch >s2 &&
	jq -e ".ranks == 2" s2 && test "$(wc -l <s2)" = 1 &&
	test-st_compare two one 1e-4 && test -z "$(ls dist)"'
test_done
