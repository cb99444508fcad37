#!/bin/sh
# Warm steps: the step commands' --serve mode (a resident server answering
# one step per request line) gives the same checkpoints, bit for bit, and
# the same stats as one process per step; ca-train driving the servers
# gives the same run as ca-train --cold, killed and resumed too; a bad
# request is answered with an error and the server goes on.
. "$(dirname "$0")/test-lib.sh"

# A tiny policy and critic (ca-toy init, fp32) and a batch with old
# log-probs, values, advantages and returns.
setup='
	ca-toy init --seed 7 pol && ca-toy init --critic --seed 8 crit &&
	ca-toy prompts -n 6 --seed 1 | ca-sample -m pol --max-tokens 5 --token-record --seed 2 | ca-toy score |
		ca-logprob -m pol | ca-logprob -m crit | ca-gae >batch &&
	jq -c ".advantages |= map(if . == null then null else . + 0.3 end)" batch >batch2'

# same_stats A B: the stats records agree but for times and the answer-only fields.
same_stats='same_stats() {
	jq -c "del(.seconds, .update_seconds, .warm, .status)" "$1" >"$1.cmp" &&
	jq -c "del(.seconds, .update_seconds, .warm, .status)" "$2" >"$2.cmp" && cmp_output "$1.cmp" "$2.cmp"; }'

# warm_vs_cold CMD START OPTS: three steps cold (one process each, c1..c3)
# and served (w1..w3), alternating two batches.
warm_vs_cold='warm_vs_cold() {
	cmd=$1 start=$2; shift 2
	rm -rf c0 w0 c1 c2 c3 w1 w2 w3 cold warm
	cp -R "$start" c0 && cp -R "$start" w0 &&
	for i in 1 2 3; do
		b=batch; [ $i = 2 ] && b=batch2
		$cmd "$@" -m c$((i - 1)) -o c$i $b >>cold || return 1
		printf "{\"model\":\"w%d\",\"output\":\"w%d\",\"inputs\":[\"%s\"]}\n" $((i - 1)) $i $b
	done | $cmd --serve "$@" >warm &&
	for i in 1 2 3; do
		for f in model.safetensors optimizer.safetensors config.json; do
			cmp c$i/$f w$i/$f || return 1
		done
	done &&
	jq -s -e "map(.warm) == [false, true, true] and map(.status) == [0, 0, 0]" warm >/dev/null &&
	same_stats cold warm; }'

expect_success 'ca-ppo-step: three served steps give the cold steps checkpoints and stats exactly' '
	'"$setup"' && '"$same_stats"' && '"$warm_vs_cold"' &&
	warm_vs_cold ca-ppo-step pol --lr 1e-2 --whiten --mini-batches 2 --epochs 2 --entropy-coef 0.01'

expect_success 'ca-value-step and ca-sft-step: the same' '
	'"$setup"' && '"$same_stats"' && '"$warm_vs_cold"' &&
	warm_vs_cold ca-value-step crit --lr 1e-2 --clip-value 0.2 --mini-batches 2 &&
	warm_vs_cold ca-sft-step pol --lr 1e-2 --agg seq-mean-token-mean'

expect_success 'a checkpoint changed on disk since the server wrote it is read again' '
	'"$setup"' && '"$same_stats"' &&
	cp -R pol w0 &&
	{ echo "{\"model\":\"w0\",\"output\":\"w1\",\"inputs\":[\"batch\"]}"
	  sleep 0.5; rm -rf w1 && cp -R pol w1
	  echo "{\"model\":\"w1\",\"output\":\"w2\",\"inputs\":[\"batch\"]}"
	  echo "{\"model\":\"w2\",\"output\":\"w2\",\"inputs\":[\"batch\"]}"; } |
	ca-ppo-step --serve --lr 1e-2 >warm &&
	jq -s -e "map(.warm) == [false, false, true] and .[1].step == 1 and .[2].step == 2" warm &&
	ca-ppo-step --lr 1e-2 -m pol -o c1 batch >/dev/null && ca-ppo-step --lr 1e-2 -m c1 batch >/dev/null &&
	cmp c1/model.safetensors w2/model.safetensors && cmp c1/optimizer.safetensors w2/optimizer.safetensors'

expect_status 4 'bad requests are answered with an error, the server goes on and exits with the worst status' '
	'"$setup"' &&
	cp -R pol w0 && cp -R pol c0 &&
	jq -c "select(.id == \"toy-0\") | .mask = [.mask[] | 0] | .mask[-1] = 1" batch >one &&
	{ echo "{\"model\":\"w0\",\"output\":\"w1\",\"inputs\":[\"batch\"]}"
	  echo "{bad"
	  echo "[1,2]"
	  echo "{\"model\":\"w1\",\"inputs\":[\"batch\"],\"lr\":1}"
	  echo "{\"output\":\"w1\",\"inputs\":[\"batch\"]}"
	  echo "{\"model\":\"w1\",\"inputs\":[]}"
	  echo "{\"model\":\"w1\",\"inputs\":[\"nosuchfile\"]}"
	  echo "{\"model\":\"nosuchdir\",\"output\":\"x\",\"inputs\":[\"batch\"]}"
	  echo "{\"model\":\"crit\",\"output\":\"x\",\"inputs\":[\"batch\"]}"
	  echo "{\"model\":\"w1\",\"output\":\"x\",\"inputs\":[\"one\"]}"
	  echo "{\"model\":\"w1\",\"output\":\"w2\",\"inputs\":[\"batch\"]}"; } |
	ca-ppo-step --serve --whiten --lr 1e-2 >answers 2>err; s=$?
	test $(wc -l <answers) = 11 &&
	jq -s -e "[.[] | .error.status // .status] == [0, 3, 3, 3, 3, 3, 4, 4, 3, 3, 0]" answers &&
	jq -s -e ".[1:10] | map(.error.line) == [2, 3, 4, 5, 6, 7, 8, 9, 10]" answers &&
	jq -r "select(.error) | .error.message" answers >messages &&
	grep -q "unknown request member \"lr\" (model, output, inputs)" messages &&
	grep -q "^\"model\" (the checkpoint directory to start from) must be a string$" messages &&
	grep -q "^\"inputs\" (the files of token records) must be an array of one or more file names$" messages &&
	grep -q "^inputs\[0\]: nosuchfile: No such file or directory$" messages &&
	grep -q "^nosuchdir: No such file or directory$" messages &&
	grep -q "^crit: a critic checkpoint, wanted a policy (language-model head)$" messages &&
	grep -q "^--whiten: 1 policy token in the batch; whitening needs at least 2$" messages &&
	grep -q "^ca-ppo-step: stdin:4: unknown request member" err &&
	! test -e x &&
	jq -s -e ".[10].warm == false and .[10].step == 2" answers &&
	ca-ppo-step --whiten --lr 1e-2 -m c0 -o c1 batch >/dev/null && ca-ppo-step --whiten --lr 1e-2 -m c1 -o c2 batch >/dev/null &&
	cmp c2/model.safetensors w2/model.safetensors && cmp c2/optimizer.safetensors w2/optimizer.safetensors &&
	exit $s'

expect_status 2 '--serve takes no -m, -o or files' '
	'"$setup"' &&
	ca-sft-step --serve -m pol </dev/null 2>err; s=$?
	grep -q "^ca-sft-step: --serve takes no -m, -o or files: each request names its own$" err && exit $s'

expect_success 'an empty request stream: no answers, exit 0' '
	ca-value-step --serve </dev/null >out && test ! -s out'

# The replayed rollout of t0606: no sampler, the same batch every run.
train_setup='
	ca-toy init --seed 1 pol && ca-toy init --critic --seed 2 crit &&
	ca-toy prompts -n 40 --seed 3 >tasks &&
	rollout="jq -c \".tokens = .prompt_tokens + [3, 4, 5, 6] | .mask = [0, 0, 1, 1, 1, 1]\" | ca-toy score" &&
	stages="--batch 8 --warmup-steps 2 --rft-steps 1 --value-steps 2 --steps 2 --mini-batches 2"'

# same_run A B: the last checkpoints and the stats of two ca-train runs agree.
same_run='same_run() {
	test "$(cat $1/latest)" = "$(cat $2/latest)" &&
	n=$(printf %06d "$(cat $1/latest)") &&
	for f in actor/model.safetensors actor/optimizer.safetensors critic/model.safetensors critic/optimizer.safetensors; do
		cmp "$1/ckpt/$n/$f" "$2/ckpt/$n/$f" || return 1
	done &&
	jq -c "del(.seconds, .update_seconds, .warm)" $1/stats.ndjson >$1.stats &&
	jq -c "del(.seconds, .update_seconds, .warm)" $2/stats.ndjson >$2.stats && cmp_output $1.stats $2.stats; }'

expect_success 'ca-train: warm steps (the default) give the run --cold gives, every stage' '
	'"$train_setup"' && '"$same_run"' &&
	ca-train -a pol -c crit -t tasks -o cold --cold $stages --rollout "$rollout" 2>log &&
	ca-train -a pol -c crit -t tasks -o warm $stages --rollout "$rollout" 2>log &&
	same_run cold warm &&
	jq -s -e "map(select(.command != \"ca-train\") | .warm) | (.[0] == false and (map(select(.)) | length) > 5)" \
		warm/stats.ndjson &&
	! test -e warm/servers && ! test -e warm/work'

expect_success 'ca-train warm, killed in the middle of steps: the rerun gives the uninterrupted run' '
	'"$train_setup"' && '"$same_run"' &&
	ca-train -a pol -c crit -t tasks -o cold --cold $stages --rollout "$rollout" 2>log &&
	slow="sleep 0.3; $rollout" &&
	for i in 1 2 3; do
		setsid ca-train -a pol -c crit -t tasks -o warm $stages --rollout "$slow" 2>log & pid=$!
		sleep 0.$((5 + i * 2)); kill -9 -- -$pid 2>/dev/null; wait $pid 2>/dev/null
	done
	ca-train -a pol -c crit -t tasks -o warm $stages --rollout "$rollout" 2>log &&
	same_run cold warm'

expect_status 4 'ca-train: a step the server refuses stops the run with exit 4 and its message' '
	'"$train_setup"' &&
	one="jq -c \".tokens = .prompt_tokens + [3, 4] | .mask = [0, 0, 0, 1]\" | ca-toy score" &&
	ca-train -a pol -c crit -t tasks -o run --batch 1 --warmup-steps 0 --rft-steps 0 --value-steps 0 \
		--steps 2 --rollout "$one" 2>log; s=$?
	grep -q "^ca-ppo-step: --whiten: 1 policy token in the batch; whitening needs at least 2$" log &&
	grep -q "a step command failed" log && ! test -e run/ckpt/000001/actor/config.json && exit $s'

test_done
