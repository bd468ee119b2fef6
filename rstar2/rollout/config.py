"""`RolloutConfig`: the settings of the multi-turn agent loop, validated on load.

One dataclass (a docstring under each field) read from the `[rollout]` table of a config file
or built in code. It covers the loop only: the engine, sandbox and reward have their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from rstar2.config import require


@dataclass
class RolloutConfig:
    max_response_tokens: int = 1024
    """One token budget for everything after the prompt: model turns and tool responses alike."""

    max_turns: int = 10
    """Most assistant turns per trajectory (paper: 10 in RL stages 1-2, 15 in stage 3, 30 at eval).
    A turn that ends in a tool call at this limit is not executed; the trajectory ends "turns"."""

    temperature: float = 1.0
    """Sampling temperature (0.0 = greedy). RL samples at 1.0."""

    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 disables it."""

    tool_timeout_s: float = 5.0
    """CPU/wall limit the sandbox applies to one tool call."""

    tool_wait_s: float = 60.0
    """Hard limit on waiting for the executor's answer, queueing included; past it the call is
    answered as a timeout so one stuck call never stalls a trajectory."""

    tool_output_chars: int = 1000
    """Tool output (stdout + stderr) longer than this is cut and marked `...[truncated]`."""

    tool_show_time: bool = True
    """Append the `Execution time: 0.01s` line to successful tool responses."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        require(
            self.max_response_tokens >= 1,
            "rollout.max_response_tokens",
            self.max_response_tokens,
            "an integer >= 1",
        )
        require(self.max_turns >= 1, "rollout.max_turns", self.max_turns, "an integer >= 1")
        require(self.temperature >= 0.0, "rollout.temperature", self.temperature, "a number >= 0")
        require(0.0 < self.top_p <= 1.0, "rollout.top_p", self.top_p, "a number in (0, 1]")
        require(
            self.tool_timeout_s > 0.0, "rollout.tool_timeout_s", self.tool_timeout_s, "a number > 0"
        )
        require(
            self.tool_wait_s >= self.tool_timeout_s,
            "rollout.tool_wait_s",
            self.tool_wait_s,
            f"a number >= tool_timeout_s ({self.tool_timeout_s})",
        )
        require(
            self.tool_output_chars >= 1,
            "rollout.tool_output_chars",
            self.tool_output_chars,
            "an integer >= 1",
        )
