#!/bin/sh
# lib/hash: SHA-256 test vectors and sorted directory-tree hashes.
. "$(dirname "$0")/test-lib.sh"

expect_success 'lib/hash unit tests' 'test-hash'

test_done
