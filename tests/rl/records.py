"""Hand-built trajectory records and a scripted random source for the RL tests."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Rec:
    """The Trajectory fields RL math reads (docs/interfaces.md), nothing else."""

    reward: float = 0.0
    tool_calls: int = 1
    tool_errors: int = 0
    tool_timeouts: int = 0
    answer_tags: int = 1
    turns: int = 2
    name: str = ""
    infra_failure: str = ""


class ScriptedRandom:
    """`random()` returns the given values in order (fails loudly when they run out)."""

    def __init__(self, values: Iterable[float]) -> None:
        self.values = list(values)

    def random(self) -> float:
        if not self.values:
            raise AssertionError("the code drew more random numbers than the test scripted")
        return self.values.pop(0)
