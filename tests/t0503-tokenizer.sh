#!/bin/sh
# lib/tokenizer against the tokenizers library (which transformers uses):
# byte-level BPE tokenizers of the Qwen2 and Llama 3 styles trained by the
# test on a code+prose corpus; the same ids for every text (the corpus by
# lines, whole, and 300 random strings of awkward characters: contractions,
# CRLF, Unicode spaces, combining marks, special tokens) and exact round trips.
. "$(dirname "$0")/test-lib.sh"

if ! "$(ca_python)" -c 'import tokenizers' >/dev/null 2>&1; then
	skip 'tokenizer vs tokenizers' 'the tokenizers library is not installed (make deps)'
	test_done
	exit 0
fi
FX=$TRASH_BASE/fx
export FX
if ! "$(ca_python)" "$ROOT/lib/py/ca_hf.py" tokenizer-fixture "$FX" "$TESTS_DIR/data/t0503-corpus.txt" \
	>"$TRASH_BASE/fixture.log" 2>&1; then
	cat "$TRASH_BASE/fixture.log"
	skip 'tokenizer vs tokenizers' 'building the fixture failed'
	test_done
	exit 0
fi
for style in qwen2 llama3; do
	expect_success "$style: encode gives the reference ids on $(wc -l <"$FX/texts.ndjson") texts" '
		test-tokenizer "$FX/tok-'$style'" <"$FX/texts.ndjson" >out &&
		jq -c .ids out >ca && jq -c .ids "$FX/tok-'$style'/ref-ids.ndjson" >ref && cmp_output ref ca
	'
	expect_success "$style: decode(encode(text)) is the text" '
		test-tokenizer "$FX/tok-'$style'" <"$FX/texts.ndjson" >out &&
		jq -c .text out >ca && jq -c .text "$FX/texts.ndjson" >ref && cmp_output ref ca
	'
done
# NFC: the Qwen2-style tokenizer with the normalizer Qwen2 declares, on the
# texts above and on decomposed, reordered and singleton forms.
expect_success 'an NFC normalizer gives the reference ids (decomposed marks, Hangul jamo, singletons)' '
	mkdir nfc && jq ".normalizer = {\"type\": \"NFC\"}" "$FX/tok-qwen2/tokenizer.json" >nfc/tokenizer.json &&
	{ cat "$FX/texts.ndjson"; jq -nc "\"e\u0301t\u00e9 A\u030angstr\u00f6m \u212b \u2126 a\u0323\u0302 a\u0302\u0323 \u1100\u1161\u11a8 \uac00\u11a8 q\u0307\u0323 \u0344 \u0958\", \"\u0301leading mark, n\u0303o, \u1e0b\u0323, <|im_end|>e\u0301\" | {text: .}"; } >texts &&
	test-tokenizer nfc <texts >out && "$(ca_python)" "$ROOT/lib/py/ca_hf.py" encode nfc <texts >ref &&
	jq -c .ids out >ca && jq -c .ids ref >want && cmp_output want ca &&
	test "$(tail -n 1 ca)" != "$(echo "{\"text\":\"x\"}" | test-tokenizer nfc | jq -c .ids)"
'
expect_success 'a normalizer other than NFC is refused' '
	jq ".normalizer = {\"type\": \"NFKC\"}" "$FX/tok-qwen2/tokenizer.json" >tokenizer.json &&
	{ echo "{\"text\":\"x\"}" | test-tokenizer . 2>err; test $? -eq 3; } && grep -q "normalizer NFKC" err
'
expect_success 'an unsupported tokenizer.json is refused with a reason' '
	echo "{\"model\":{\"type\":\"WordPiece\"}}" >tokenizer.json &&
	{ echo "{\"text\":\"x\"}" | test-tokenizer . 2>err; test $? -eq 3; } && grep -q "not BPE" err
'
test_done
