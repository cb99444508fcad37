#!/bin/sh
# The three step commands against an independent PyTorch implementation of
# verl's losses (lib/py/ca_rl_ref.py, transformers models) on the same tiny
# checkpoints and batch: loss, clip fractions, KL, entropy and gradient
# norm of the first update agree to fp32 rounding, for two aggregation
# modes, with dual clip, entropy bonus and value clipping on.
. "$(dirname "$0")/test-lib.sh"

if ! has_torch || ! "$(ca_python)" -c 'import transformers' >/dev/null 2>&1; then
	skip 'step commands vs PyTorch' 'torch/transformers not installed (make deps)'
	test_done
	exit 0
fi
REF="$(ca_python) $ROOT/lib/py/ca_rl_ref.py"
export REF TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1

# Old log-probs moved by -0.4, 0 or +0.4 so both clip bounds are met;
# advantages of both signs; old values off by 0.05 against a 0.02 clip.
make_batch='
	ca-toy init --layers 2 --seed 3 pol && ca-toy init --critic --layers 2 --seed 4 crit &&
	ca-toy prompts -n 12 --seed 1 | ca-sample -m pol --max-tokens 6 --token-record --seed 2 |
	ca-toy score | ca-logprob -m pol | ca-logprob -m crit | ca-gae |
	jq -c ".logprobs |= [to_entries[] | if .value == null then null else .value + 0.4 * (.key % 3 - 1) end] |
		.advantages |= [to_entries[] | .value * (if .key % 2 == 0 then 1 else -1 end) + 0.1] |
		.values |= map(. + 0.05) |
		if (.id | ltrimstr(\"toy-\") | tonumber) % 2 == 1 then .mask[3] = 0 else . end" >batch'

# close FIELD: ca's stats ($1) and torch's ($2) agree on FIELD within 1e-5 relative.
close='close() { jq -n -e --slurpfile a "$1" --slurpfile b "$2" --arg f "$3" "
	(\$a[0][\$f] - \$b[0][\$f]) | fabs <= 1e-5 * (1 + (\$b[0][\$f] | fabs))" >/dev/null ||
	{ echo "$3: ca $(jq ".$3" "$1"), torch $(jq ".$3" "$2")"; return 1; }; }'

expect_success "ca-ppo-step, ca-value-step, ca-sft-step = PyTorch (token-mean, seq-mean-token-mean)" '
	'"$make_batch"' && '"$close"' &&
	$REF ppo,value,sft pol batch --critic crit --agg token-mean,seq-mean-token-mean --lr 1e-3 \
		--dual-clip 3 --entropy-coef 0.01 --clip-value 0.02 >ref 2>err || { cat err; exit 1; }
	line=0
	for agg in token-mean seq-mean-token-mean; do
		opts="--agg $agg --lr 1e-3"
		ca-ppo-step -m pol -o p2 $opts --dual-clip 3 --entropy-coef 0.01 <batch >ppo &&
		ca-value-step -m crit -o c2 $opts --clip-value 0.02 <batch >value &&
		ca-sft-step -m pol -o p3 $opts <batch >sft || exit 1
		for kind in ppo value sft; do
			line=$((line + 1)); sed -n ${line}p ref >ref.$kind
		done
		jq -e ".pg_clipfrac > 0.2 and .ratio_min < 0.8 and .ratio_max > 1.28" ppo >/dev/null &&
		jq -e ".vf_clipfrac > 0" value >/dev/null || exit 1
		for f in loss pg_loss pg_clipfrac pg_clipfrac_lower approx_kl entropy grad_norm ratio_min ratio_max tokens; do
			close ppo ref.ppo $f || exit 1
		done
		for f in vf_loss vf_clipfrac grad_norm tokens; do close value ref.value $f || exit 1; done
		for f in loss entropy grad_norm tokens; do close sft ref.sft $f || exit 1; done
		echo "$agg: ppo loss $(jq .loss ppo), value loss $(jq .vf_loss value), sft loss $(jq .loss sft): as PyTorch"
	done
	# The modes differ on this batch (records with 5 and 6 policy tokens).
	test "$(sed -n 1p ref | jq .loss)" != "$(sed -n 4p ref | jq .loss)"'

# rel FILE_A FILE_B FIELD: ca's stats (FILE_A) and verl's (FILE_B) agree on FIELD within 1e-9 relative.
rel='rel() { jq -n -e --slurpfile a "$1" --slurpfile b "$2" --arg f "$3" "
	(\$a[0][\$f] - \$b[0][\$f]) | fabs <= 1e-9 * (\$b[0][\$f] | fabs)" >/dev/null ||
	{ echo "$3: ca $(jq ".$3" "$1"), verl $(jq ".$3" "$2")"; return 1; }; }'

# The aggregation alone, in float64 on both sides: old log-probs of -1000
# put every ratio at the clamp (e^20), so with dual clip 3 a token costs
# -1.28 A (A > 0) or -3 A (A < 0) whatever the model computes, pg_loss is
# verl's agg_loss of those numbers, and pg_clipfrac and pg_clipfrac_lower
# are the shares of positive and negative advantages. Two batches: the
# whole one with a record whose mask is all 0, and a small one (that
# record and one with a single policy token) where the 1e-8 epsilons are
# 1e-8 of the result. seq-mean-token-sum-norm's horizon is the batch's
# padded width on both sides (the longest record's tokens but the first),
# then a constant.
expect_success 'pg_loss = verl'"'"'s agg_loss in float64 (1e-9 relative), every mode, fully masked records' '
	'"$make_batch"' && '"$rel"' &&
	jq -c ".logprobs |= map(if . == null then null else -1000 end) |
		if .id == \"toy-0\" then .mask |= map(0) else . end" batch >clamped &&
	jq -c "select(.id == \"toy-0\" or .id == \"toy-1\") |
		if .id == \"toy-1\" then .mask = [.mask | to_entries[] | if .key == 4 then 1 else 0 end] else . end" \
		clamped >small &&
	modes="token-mean seq-mean-token-mean seq-mean-token-sum seq-mean-token-sum-norm" fail=0 &&
	for b in clamped small; do
		$REF ppo pol $b --agg "$(echo $modes | tr " " ,)" --dual-clip 3 >ref.$b 2>err || { cat err; exit 1; }
		line=0
		for agg in $modes; do
			line=$((line + 1)); sed -n ${line}p ref.$b >verl
			ca-ppo-step -m pol -o p2 --agg $agg --dual-clip 3 <$b >ca || exit 1
			for f in pg_loss pg_clipfrac pg_clipfrac_lower; do rel ca verl $f || { echo "  ($b, $agg)"; fail=1; }; done
		done
	done
	# A constant horizon in place of the batch'"'"'s width.
	$REF ppo pol clamped --agg seq-mean-token-sum-norm --loss-scale-factor 100 --dual-clip 3 >verl 2>err &&
	ca-ppo-step -m pol -o p2 --agg seq-mean-token-sum-norm --loss-scale-factor 100 --dual-clip 3 <clamped >ca &&
	rel ca verl pg_loss || fail=1
	exit $fail'

# Whitening before it, on the same clamped batch and on one of two policy
# tokens (the smallest verl whitens, where its epsilons are 1e-8 of the result).
expect_success 'ca-ppo-step --whiten = verl'"'"'s masked_whiten then agg_loss in float64 (1e-9 relative)' '
	'"$make_batch"' && '"$rel"' &&
	jq -c ".logprobs |= map(if . == null then null else -1000 end) |
		if .id == \"toy-0\" then .mask |= map(0) else . end" batch >clamped &&
	jq -c "select(.id == \"toy-0\" or .id == \"toy-1\") |
		if .id == \"toy-1\" then .mask = [.mask | to_entries[] | if .key == 4 or .key == 6 then 1 else 0 end] else . end" \
		clamped >two &&
	modes="token-mean seq-mean-token-sum" fail=0 &&
	for b in clamped two; do
		$REF ppo pol $b --agg "$(echo $modes | tr " " ,)" --dual-clip 3 --whiten >ref.$b 2>err || { cat err; exit 1; }
		line=0
		for agg in $modes; do
			line=$((line + 1)); sed -n ${line}p ref.$b >verl
			ca-ppo-step -m pol -o p2 --agg $agg --dual-clip 3 --whiten <$b >ca || exit 1
			for f in pg_loss pg_clipfrac pg_clipfrac_lower; do rel ca verl $f || { echo "  ($b, $agg)"; fail=1; }; done
		done
	done
	exit $fail'

test_done
