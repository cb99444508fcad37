#!/bin/sh
# Unit tests of the foundation's lib/ modules (tests/unit/*.c, built to $CA_BIN/test-NAME).
. "$(dirname "$0")/test-lib.sh"

for m in err json rl opt dist cpu; do
	expect_success "lib/$m unit tests" "test-$m"
done
expect_success 'lib/ndjson unit tests' 'test-ndjson "$TRASH"'
expect_success 'lib/paths unit tests' 'test-paths "$TRASH"'
expect_success 'lib/file unit tests' 'test-file "$TRASH"'
test_done
