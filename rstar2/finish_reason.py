"""Why a rollout ended: the values of `Trajectory.finish_reason`.

The rollout loop sets them (`rstar2.rollout.trajectory`, whose docstring says when each one
applies); the reward actor and evaluation read them, scoring a truncated rollout 0 without
verifying its answer, as in the paper:

- ended on its own: "answer" (an `<answer>` tag), "no_tool_call" (a turn without a tool call
  and without an answer tag);
- truncated: "budget" (the token budget ran out), "turns" (the turn limit), "abort" (the engine
  aborted the request), "prompt_too_long" (the prompt leaves no room under the engine's context
  limit: the rollout has no turns and no response, and the problem counts as not solved).

What it does not do: decide the reason (`TrajectoryState` does), or score (`rstar2.reward`).
"""

from __future__ import annotations

FINISH_REASONS = ("answer", "no_tool_call", "budget", "turns", "abort", "prompt_too_long")
"""Every finish reason of a rollout."""
TRUNCATED_REASONS = frozenset({"budget", "turns", "abort", "prompt_too_long"})
"""Finish reasons of rollouts that did not end on their own; reward scores them 0."""
