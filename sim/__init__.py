"""Discrete-event simulator of rollout scheduling (virtual clock, no GPUs)."""
