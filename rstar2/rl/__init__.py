"""RL math as pure functions: advantages, RoC penalties and selection, the policy loss, the
training-inference logprob mismatch."""
