"""Rollout: the multi-turn agent loop with the code tool (`run_trajectory`) and its pieces."""
