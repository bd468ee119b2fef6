"""The run's logs that the learner writes as the RL controller's commands say: the metrics log
(`RUN/metrics.jsonl` and TensorBoard, `rstar2.metrics`), the rollout trace
(`RUN/rollout_trace.jsonl` in the simulator's trace format, with `rollout_trace` on,
`rstar2.train.rollout_trace`) and the trajectory log (`RUN/trajectories.jsonl`,
`rstar2.train.trajectory_log`).

All three open together (`OpenRun`: fresh, or kept up to the step a resumed run continues
from) and close together when the run ends.

What it does not do: decide what is written or when (the controller's `OpenRun`,
`WriteMetrics`, `TraceStep` and `Recording` commands), log the progress line, or write the
checkpoints (`run_state.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rstar2.metrics import MetricsLog
from rstar2.train.rollout_trace import RolloutTrace
from rstar2.train.run_commands import Recording
from rstar2.train.trajectory_log import TrajectoryLog
from rstar2.wire import TrajectoryResult


class RunFiles:
    """The run's metrics log, rollout trace and trajectory log (none open before `open`)."""

    def __init__(self, run_dir: Path, trace: bool, trace_tokens: bool) -> None:
        self.run_dir = run_dir
        self.trace_on = trace
        """Keep the rollout trace (`TrainConfig.rollout_trace`)."""
        self.trace_tokens = trace_tokens
        """The trace keeps each trajectory's tokens (`TrainConfig.rollout_trace_tokens`)."""
        self.metrics: MetricsLog | None = None
        self.trace: RolloutTrace | None = None
        self.trajectories: TrajectoryLog | None = None

    def open(self, resume_step: int | None) -> None:
        """Open the logs (`OpenRun`): None starts them empty, a step keeps the lines up to it."""
        self.metrics = MetricsLog(self.run_dir, resume_step=resume_step)
        if self.trace_on:
            self.trace = RolloutTrace(self.run_dir, resume_step, tokens=self.trace_tokens)
        self.trajectories = TrajectoryLog(self.run_dir, resume_step)

    def write_metrics(self, row: dict[str, Any]) -> None:
        """Append one row to the metrics log."""
        if self.metrics is None:
            raise RuntimeError("a metrics row before OpenRun")
        self.metrics.write(row)

    def trace_step(self, step: int, results: list[TrajectoryResult], budget: int) -> None:
        """Append a training step's trajectories to the rollout trace (when it is kept)."""
        if self.trace is not None:
            self.trace.write(step, results, budget)

    def record(
        self,
        step: int,
        results: list[TrajectoryResult],
        record: Recording,
        trained: dict[str, float] | None,
    ) -> None:
        """Write a batch to the trajectory log (`trained`: a training step's advantages)."""
        if self.trajectories is None:
            raise RuntimeError("a recording before OpenRun")
        self.trajectories.write(
            results,
            record.problems,
            source=record.source,
            step=step,
            stage=record.stage,
            advantages=trained,
        )

    def close(self) -> None:
        """Close whichever logs are open."""
        if self.metrics is not None:
            self.metrics.close()
        if self.trace is not None:
            self.trace.close()
        if self.trajectories is not None:
            self.trajectories.close()
