"""Rollout scheduling policies shared by the live scheduler actor and the simulator."""
