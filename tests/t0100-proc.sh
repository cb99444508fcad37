#!/bin/sh
# lib/proc: statuses, timeouts that kill the process group, capped capture, coprocesses.
. "$(dirname "$0")/test-lib.sh"

expect_success 'lib/proc unit tests' 'test-proc'

test_done
