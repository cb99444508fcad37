#!/bin/sh
# lib/safetensors: conversions, single-file and sharded round trips, broken files.
. "$(dirname "$0")/test-lib.sh"

expect_success 'lib/safetensors unit tests' 'test-safetensors "$TRASH"'
expect_success 'a missing checkpoint is a data error with the path in the message' '
	mkdir m && echo "{\"model_type\":\"qwen2\"}" >m/config.json &&
	{ echo "{\"tokens\":[1]}" | ca-logprob -m m 2>err; test $? -eq 3; } &&
	grep -q "vocab_size is missing" err &&
	{ echo "{\"tokens\":[1]}" | ca-logprob -m nowhere 2>err; test $? -eq 3; } &&
	grep -q "nowhere/config.json" err
'
expect_status 2 'ca-logprob without -m is a usage error' 'ca-logprob </dev/null'
test_done
