#!/bin/sh
# lib/ppo: verl's policy and value losses, aggregation modes, KL penalties
# and their gradients; lib/train: those gradients handed to the engine's
# backward pass agree with differences of the loss through whole models.
. "$(dirname "$0")/test-lib.sh"

expect_success 'lib/ppo unit tests (hand cases, padded reference, finite differences)' 'test-ppo'

expect_success 'PPO and value-loss gradients through the engine match finite differences' '
	ca-toy init --layers 2 --seed 3 pol && ca-toy init --critic --layers 2 --seed 4 crit &&
	test-train pol crit'

test_done
