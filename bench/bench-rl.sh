#!/bin/sh
# bench-rl: the three training steps (ca-sft-step, ca-value-step,
# ca-ppo-step) against the same steps in PyTorch (lib/py/ca_rl_ref.py on
# transformers models), same checkpoints, same batch, same run.
#
#   bench/bench-rl.sh [--device cpu|cuda] [--repeat N] [--seq N] [--shape small|0.5b]
#                     [--tokens N] [-o DIR]
#
# A random Qwen2-shaped policy and critic (--shape small: 4 layers, width
# 256; 0.5b: Qwen2-0.5B's shape), a batch of --tokens tokens in sequences
# of --seq (a 32-token prompt, the rest policy tokens) with old log-probs
# and values from ca-logprob and advantages from ca-gae, then --repeat
# updates of each step. Prints per step: updates/s and tokens/s of ca (the
# mean update_seconds of the cold processes: forward, backward, optimizer,
# timed inside a process that does one step, so first use is in it: the
# cuBLAS handle, lazily loaded kernels, the AdamW state's allocation; the
# records' ca_update_s) and of PyTorch, their ratio,
# and peak memory (ca: the process's max RSS, and with --device cuda the
# engine's peak GPU allocation, device_peak_bytes; PyTorch on a GPU: peak
# allocated). Both sides run on --device: on cuda, ca's bf16 engine with
# fp32 master weights against PyTorch under autocast(bfloat16) with fp32
# parameters (one untimed PyTorch update first; ca's update_seconds leave
# out loading).
#
# Cold and warm, per update, in the same run: cold is a step command run as
# its own process, as a pipeline runs it, timed from start to exit
# (ca_cold_update_s: starting up, reading the checkpoint and optimizer
# state, the CUDA context and first kernel use, the update, writing the
# checkpoint); warm is the same command as a resident server (--serve, as
# ca-train runs it), --repeat requests after a first that loads the model,
# each from the checkpoint the one before wrote: ca_warm_update_s is its
# forward, backward and optimizer (update_seconds), ca_warm_step_s the
# whole request with the checkpoint write. Both against PyTorch's warm
# update (ratio_cold_ca_over_torch, ratio_warm_ca_over_torch: above 1, ca is
# faster). The records go to DIR/bench-rl.ndjson.
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${CA_BIN:-$ROOT/bin}
PATH=$BIN:$ROOT/scripts:$PATH
export PATH
PY=${CA_PYTHON:-}
[ -n "$PY" ] || { [ -x .venv/bin/python3 ] && PY=.venv/bin/python3; } || PY=python3
export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1

device=cpu repeat=3 seq=512 shape=small tokens=4096 out=bench-rl.out
while [ $# -gt 0 ]; do
	case $1 in
	--device) device=$2; shift ;;
	--repeat) repeat=$2; shift ;;
	--seq) seq=$2; shift ;;
	--shape) shape=$2; shift ;;
	--tokens) tokens=$2; shift ;;
	-o) out=$2; shift ;;
	*) echo "usage: bench/bench-rl.sh [--device cpu|cuda] [--repeat N] [--seq N] [--shape small|0.5b] [--tokens N] [-o DIR]" >&2
		exit 2 ;;
	esac
	shift
done
if ! "$PY" -c 'import torch, transformers' 2>/dev/null; then
	echo "bench-rl: $PY lacks torch or transformers (make deps)" >&2
	exit 4
fi
autocast=
[ "$device" = cpu ] || autocast=--autocast
mkdir -p "$out"
if [ ! -f "$out/$shape/actor/config.json" ]; then
	"$PY" lib/py/ca_rl_ref.py init "$out/$shape/actor" --shape "$shape" 2>/dev/null
	"$PY" lib/py/ca_rl_ref.py init "$out/$shape/critic" --shape "$shape" --critic --seed 2 2>/dev/null
fi
vocab=$(jq .vocab_size "$out/$shape/actor/config.json")

# The batch: random ids (deterministic), a 32-token prompt, a random outcome reward.
awk -v n=$((tokens / seq)) -v len="$seq" -v vocab="$vocab" 'BEGIN {
	srand(1)
	for (s = 0; s < n; s++) {
		printf "{\"id\":\"b%d\",\"reward\":%d,\"tokens\":[", s, int(rand() * 4)
		for (i = 0; i < len; i++) printf "%s%d", (i ? "," : ""), int(rand() * vocab)
		printf "],\"mask\":["
		for (i = 0; i < len; i++) printf "%s%d", (i ? "," : ""), (i >= 32)
		print "]}"
	}
}' | ca-logprob -m "$out/$shape/actor" --device "$device" | ca-logprob -m "$out/$shape/critic" --device "$device" |
	ca-gae >"$out/batch.ndjson"

now() { date +%s.%N; }
rss() { # command...: run it, print its max RSS in KiB to fd 3
	if command -v /usr/bin/time >/dev/null 2>&1; then
		/usr/bin/time -f %M -o "$out/rss" "$@" && cat "$out/rss" >&3
	else
		"$@" && echo null >&3
	fi
}

: >"$out/bench-rl.ndjson"
rm -f "$out"/ca.* "$out"/rss* "$out"/warm.* "$out"/wall.* "$out/torch"
for kind in sft value ppo; do
	model=$out/$shape/actor opts=""
	[ $kind = value ] && model=$out/$shape/critic
	[ $kind = ppo ] && opts="--whiten"
	for _ in $(seq "$repeat"); do
		t0=$(now)
		# shellcheck disable=SC2086
		rss ca-$kind-step -m "$model" -o "$out/scratch" --lr 1e-6 --device "$device" $opts <"$out/batch.ndjson" \
			3>>"$out/rss.$kind" >>"$out/ca.$kind"
		awk -v a="$t0" -v b="$(now)" 'BEGIN { print b - a }' >>"$out/wall.$kind"
	done
	# Warm: one server, a first request that reads the model, then --repeat
	# steps each from the checkpoint the one before wrote.
	rm -rf "$out/scratch"
	{
		jq -cn --arg m "$model" --arg o "$out/scratch" --arg i "$out/batch.ndjson" '{model: $m, output: $o, inputs: [$i]}'
		for _ in $(seq "$repeat"); do
			jq -cn --arg m "$out/scratch" --arg i "$out/batch.ndjson" '{model: $m, inputs: [$i]}'
		done
	} | {
		# shellcheck disable=SC2086
		ca-$kind-step --serve --lr 1e-6 --device "$device" $opts
	} >"$out/warm.$kind"
	jq -s -e 'length > 1 and (map(has("error") | not) | all) and (.[1:] | map(.warm) | all)' "$out/warm.$kind" \
		>/dev/null || { echo "bench-rl: ca-$kind-step --serve did not serve warm:" >&2; cat "$out/warm.$kind" >&2; exit 1; }
	rm -rf "$out/scratch"
done
"$PY" lib/py/ca_rl_ref.py sft,value,ppo "$out/$shape/actor" "$out/batch.ndjson" \
	--critic "$out/$shape/critic" --repeat "$repeat" --lr 1e-6 --device "$device" $autocast >"$out/torch" 2>"$out/torch.err" ||
	{ tail -5 "$out/torch.err" >&2; exit 1; }

for kind in sft value ppo; do
	torch_line=$(jq -c "select(.kind == \"$kind\")" "$out/torch")
	jq -s -c --argjson t "$torch_line" --arg kind "$kind" --arg shape "$shape" --arg device "$device" \
		--slurpfile warm "$out/warm.$kind" --slurpfile wall "$out/wall.$kind" \
		--argjson rss "$(sort -n "$out/rss.$kind" | tail -1)" '
		def mean: add / length;
		(map(.update_seconds) | mean) as $s |
		(($wall | mean) / .[0].updates) as $cold |
		($warm[1:] | map(.update_seconds) | mean) as $w |
		($warm[1:] | map(.seconds) | mean) as $ws |
		{kind: $kind, shape: $shape, torch_device: $device, tokens: .[0].tokens_total,
		 ca_update_s: $s, ca_updates_per_s: (1 / $s), ca_tokens_per_s: (.[0].tokens_total / $s),
		 ca_max_rss_kb: $rss, ca_device_peak_bytes: (map(.device_peak_bytes) | max),
		 torch_update_s: $t.seconds_per_step, torch_tokens_per_s: $t.tokens_per_s,
		 torch_peak_memory_bytes: $t.peak_memory_bytes,
		 ratio_ca_over_torch: ($t.seconds_per_step / $s),
		 ca_cold_update_s: $cold, ratio_cold_ca_over_torch: ($t.seconds_per_step / $cold),
		 ca_warm_update_s: $w, ca_warm_step_s: $ws, ca_warm_tokens_per_s: (.[0].tokens_total / $w),
		 ratio_warm_ca_over_torch: ($t.seconds_per_step / $w)}' "$out/ca.$kind" >>"$out/bench-rl.ndjson"
done
rm -f "$out"/ca.* "$out"/rss* "$out"/warm.* "$out"/wall.* "$out/torch"
jq -r '"\(.kind)-step  \(.tokens) tokens  ca update in a cold process (first use included) \(.ca_tokens_per_s | floor) tok/s (\(.ca_update_s * 1000 | floor) ms/update, max RSS \(.ca_max_rss_kb) KiB\(if .ca_device_peak_bytes then ", GPU peak \(.ca_device_peak_bytes / 1048576 | floor) MiB" else "" end))  torch[\(.torch_device)] \(.torch_tokens_per_s | floor) tok/s\(if .torch_peak_memory_bytes then " (GPU peak \(.torch_peak_memory_bytes / 1048576 | floor) MiB)" else "" end)  ratio \(.ratio_ca_over_torch * 100 | floor / 100)x"' \
	"$out/bench-rl.ndjson"
echo "per update, against PyTorch's warm update (ratio: torch time / ca time, above 1 ca is faster):"
jq -r '"\(.kind)-step  cold (one process per step) \(.ca_cold_update_s * 1000 | floor) ms \(.ratio_cold_ca_over_torch * 100 | floor / 100)x  warm (--serve) \(.ca_warm_update_s * 1000 | floor) ms \(.ratio_warm_ca_over_torch * 100 | floor / 100)x (\(.ca_warm_step_s * 1000 | floor) ms with the checkpoint write)  torch \(.torch_update_s * 1000 | floor) ms"' \
	"$out/bench-rl.ndjson"
