"""Where an RL run is: its saved `Progress`, the step in flight, and the stage of a step.

`Progress` goes into every checkpoint (as a dict); `StepInFlight` gathers one RL step's
replies into its metrics row; `stage_index` maps a step to its stage. What it does not do:
decide what comes next (`controller.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rstar2.train.config import StageConfig
from rstar2.train.step_metrics import engine_split, rollout_metrics, stage_split, worker_loop
from rstar2.wire import EngineLoad, TrajectoryResult


def stage_index(stages: Sequence[StageConfig], step: int) -> int:
    """Index of the stage that RL step `step` (1-based) belongs to (the last one past the end)."""
    end = 0
    for i, stage in enumerate(stages):
        end += stage.steps
        if step <= end:
            return i
    return len(stages) - 1


@dataclass
class Progress:
    """Where the run is; saved in every checkpoint."""

    step: int = 0
    """The last RL step whose update is done (0: none yet)."""
    stage_started: int = -1
    """Index of the last stage started (its filter and optimizer reset done)."""
    sft_accuracy: float | None = None
    """Validation accuracy of the SFT policy (None: not evaluated yet)."""
    last_accuracy: float | None = None
    """The latest validation accuracy."""
    sft_evaluated: bool = False
    """The SFT policy's evaluations (validation, test) are done."""
    evaluations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`rstar2.train.accuracy.Accuracy.as_dict()` by "validation_sft", "test_sft",
    "validation_final", "test_final"."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Summary values, e.g. `filter_<stage>`: {"probed", "kept"}."""


@dataclass
class StepInFlight:
    """The RL step in flight: what its metrics row gathers from the replies (the shell's
    time stamps, the update's and push's metrics)."""

    step: int
    stage: StageConfig
    results: list[TrajectoryResult] = field(default_factory=list)
    engines_before: dict[int, EngineLoad] = field(default_factory=dict)
    """Each engine's counters as last seen before this step's rollout (`engine_split`)."""
    started: float = 0.0
    last: float = 0.0
    rollout_s: float = 0.0
    update: dict[str, float] = field(default_factory=dict)
    learner_s: float = 0.0
    sync_s: float = 0.0
    staleness: dict[str, Any] = field(default_factory=dict)
    row: dict[str, Any] = field(default_factory=dict)

    def metrics_row(self) -> dict[str, Any]:
        """The step's metrics row as of its update and push (an evaluation adds to it)."""
        row: dict[str, Any] = {"step": self.step, "stage": self.stage.name}
        row.update(rollout_metrics(self.results))
        row.update(self.update)
        row.update(stage_split(self.results, self.rollout_s))
        row.update(engine_split(self.results, self.engines_before))
        row.update(worker_loop(self.results))
        row.update(time_learner_s=self.learner_s, time_sync_s=self.sync_s)
        row.update(self.staleness)
        return row
