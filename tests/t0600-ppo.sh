#!/bin/sh
# lib/ppo: verl's policy and value losses, aggregation modes, KL penalties and their gradients.
. "$(dirname "$0")/test-lib.sh"

expect_success 'lib/ppo unit tests (hand cases, padded reference, finite differences)' 'test-ppo'

test_done
