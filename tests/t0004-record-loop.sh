#!/bin/sh
# The record loop's contract (ca(7)) on every command that writes one
# record for each it reads (their man pages say so): ca-agent, ca-filter,
# ca-gae, ca-logprob, ca-profile, ca-reward, ca-rft-filter --keep-marked,
# ca-sample, ca-toy score, ca-verify. Around a malformed line and a 100 MB
# malformed line: count in = count out, in place an error record
# {"error": {"file", "line", "message"}} under 4 KB, stderr that does not
# echo the line, exit 3; the valid records' other fields passed byte for
# byte (a big integer, -0.0, an escape, a non-ASCII byte that takes a fast
# path off it). ca-best is left out: it groups and joins (t0401).
. "$(dirname "$0")/test-lib.sh"

M=$TRASH_BASE/model
ca-toy init "$M" >/dev/null 2>&1 || { echo "cannot write the toy checkpoint"; exit 1; }
export M

# The fields every valid record carries; they must come out as written.
PASS=$(printf '"n":123456789012345678901234567890,"z":-0.0,"e":"\\u0041\\/","x":"caf\\u00e9 \303\251"')
BIG=$TRASH_BASE/big-line
{ printf '{"id":"big","blob":"'; head -c 100000000 /dev/zero | tr '\0' a; printf '\n'; } >"$BIG"

# record CMD: a record CMD handles (its own field added, or an error of
# its own in it) with the fields of PASS; the rest of the line is CMD's argv.
record() {
	case $1 in
	ca-agent) printf '{"id":"t/1","code":"import torch\\nclass Model(torch.nn.Module):\\n    pass\\n",%s}' "$PASS" ;;
	ca-filter) printf '{"id":"f","code":"not a task",%s}' "$PASS" ;;
	ca-gae) printf '{"values":[0.5,0.25],"reward":1,%s}' "$PASS" ;;
	ca-logprob) printf '{"tokens":[0,3,4],%s}' "$PASS" ;;
	ca-profile | ca-verify) printf '{"id":"v",%s}' "$PASS" ;;
	ca-reward) printf '{"verify":{"ok":false},%s}' "$PASS" ;;
	ca-rft-filter) printf '{"id":"r","trajectory":{"stop":"done"},%s}' "$PASS" ;;
	ca-sample) printf '{"prompt_tokens":[0,3],%s}' "$PASS" ;;
	ca-toy) printf '{"prompt_tokens":[0,3],"completion_tokens":[4,5],%s}' "$PASS" ;;
	esac
	printf '\n'
}

check() { # name command line
	expect_status 3 "$1: bad lines become bounded error records in place; other fields byte for byte" '
		{ record '"$1"'; echo "{bad"; cat "$BIG"; record '"$1"'; } >in &&
		'"$2"' in >out 2>err; s=$?
		test "$(wc -l <out)" = 4 || { echo "$(wc -l <out) records out of 4"; head -c 2000 err; exit 9; }
		for k in 2 3; do
			sed -n ${k}p out >e
			test "$(wc -c <e)" -lt 4096 || { echo "error record $k: $(wc -c <e) bytes"; exit 9; }
			jq -e --argjson k $k "(.error | keys) == [\"file\", \"line\", \"message\"] and .error.file == \"in\" and
				.error.line == \$k and (.error.message | length) > 0 and (keys == [\"error\"])" e >/dev/null ||
				{ echo "error record $k:"; cat e; exit 9; }
		done
		test "$(wc -c <err)" -lt 16384 || { echo "stderr: $(wc -c <err) bytes"; exit 9; }
		grep -q "^'"${2%% *}"': in:2: " err && grep -q "^'"${2%% *}"': in:3: " err || { head -c 2000 err; exit 9; }
		for k in 1 4; do
			line=$(sed -n ${k}p out)
			for f in "\"n\":123456789012345678901234567890" "\"z\":-0.0" "\"e\":\"\\u0041\\/\"" \
					"$(printf "\"x\":\"caf\\\\u00e9 \303\251\"")"; do
				case $line in *"$f"*) ;; *) echo "record $k lost $f: $(echo "$line" | head -c 600)"; exit 9 ;; esac
			done
		done
		exit $s'
}

check ca-gae 'ca-gae'
check ca-logprob 'ca-logprob -m "$M"'
check ca-reward 'ca-reward'
check ca-rft-filter 'ca-rft-filter --keep-marked'
check ca-sample 'ca-sample --max-tokens 2 -m "$M"'
check ca-toy 'ca-toy score'
check ca-agent 'ca-agent --unconfined --max-turns 1 --policy "echo {\\\"content\\\":\\\"x\\\"}"'
if has_torch; then
	check ca-filter 'ca-filter --device cpu --no-compile'
	check ca-verify 'ca-verify --device cpu --no-sandbox'
	check ca-profile 'ca-profile --device cpu --no-sandbox'
else
	skip 'ca-filter, ca-verify and ca-profile' 'no torch for the Python runner (make deps)'
fi
test_done
