#!/bin/sh
# Finite-difference gradient checks of every CPU layer of the policy engine (lib/nn).
. "$(dirname "$0")/test-lib.sh"

expect_success 'linear, rmsnorm, rope, packed GQA attention, swiglu, log-prob+entropy' 'test-nn'
test_done
