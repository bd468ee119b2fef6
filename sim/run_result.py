"""What a simulated training run measured: `RunResult` (with `summary()`, the keys of
`rstar2 sim run --steps`) and each step's phase times (`StepTimes`).

What it does not do: simulate (`sim/training_run.py`) or print (`sim/report.py`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepTimes:
    """When one step's phases happened (seconds of the run's clock)."""

    step: int
    released_s: float
    """Its trajectories were submitted."""
    generated_s: float
    """Its last trajectory finished."""
    update_start_s: float
    update_end_s: float
    push_start_s: float
    """The engines were drained and the weights began to load."""
    push_end_s: float


@dataclass
class RunResult:
    """What a simulated run measured. `summary()` holds the keys of `rstar2 sim run --steps`."""

    policy: str
    steps: int
    max_staleness: int
    colocated: bool
    run_s: float
    trajectories: int
    generated_tokens: int
    preemptions: int
    busy_s: list[float]
    staleness_counts: list[int]
    """Trajectories by staleness: ``staleness_counts[s]`` were s versions behind (s = 0..k)."""
    partial_rollouts: int
    """Trajectories whose turns were generated under more than one policy version (a partial
    rollout, continued across a push)."""
    step_times: list[StepTimes]
    tool_queue_s: float
    events: int
    wall_s: float

    @property
    def trajectories_per_hour(self) -> float:
        return 3600.0 * self.trajectories / self.run_s

    @property
    def engine_idle_fraction(self) -> float:
        return 1.0 - sum(self.busy_s) / (self.run_s * len(self.busy_s))

    @property
    def step_s_mean(self) -> float:
        return self.run_s / self.steps

    @property
    def step_s_steady(self) -> float:
        """Mean time between push ends with the pipeline full: from the end of push k+1 (the
        steps released at time 0 are trained) to the end of push N-k (the last step is
        released; after it the engines drain), ``(end_{N-k} - end_{k+1}) / (N - 2k - 1)``;
        `step_s_mean` when the run is too short to have that window."""
        k, n = self.max_staleness, self.steps
        if n - 2 * k - 1 < 1:
            return self.step_s_mean
        ends = [s.push_end_s for s in self.step_times]
        return (ends[n - k - 1] - ends[k]) / (n - 2 * k - 1)

    def staleness_histogram(self) -> dict[int, int]:
        """Trajectories by staleness (0..k)."""
        return dict(enumerate(self.staleness_counts))

    def summary(self) -> dict[str, object]:
        times, counts = self.step_times, self.staleness_counts
        return {
            "policy": self.policy,
            "steps": self.steps,
            "max_staleness": self.max_staleness,
            "learner": "colocated" if self.colocated else "separate",
            "run_s": round(self.run_s, 3),
            "step_s_mean": round(self.step_s_mean, 4),
            "step_s_steady": round(self.step_s_steady, 4),
            "trajectories_per_hour": round(self.trajectories_per_hour, 1),
            "engine_idle_fraction": round(self.engine_idle_fraction, 4),
            "staleness_mean": round(sum(s * c for s, c in enumerate(counts)) / sum(counts), 4),
            "staleness_max": max(s for s, c in enumerate(counts) if c),
            "staleness_histogram": self.staleness_histogram(),
            "partial_rollout_fraction": round(self.partial_rollouts / self.trajectories, 4),
            "generation_s_mean": round(
                statistics.fmean(s.generated_s - s.released_s for s in times), 4
            ),
            "update_s_mean": round(
                statistics.fmean(s.update_end_s - s.update_start_s for s in times), 4
            ),
            "push_wait_s_mean": round(
                statistics.fmean(s.push_start_s - s.update_end_s for s in times), 4
            ),
            "tool_queue_s": round(self.tool_queue_s, 3),
            "preemptions": self.preemptions,
            "generated_tokens": self.generated_tokens,
            "events": self.events,
            "wall_s": round(self.wall_s, 3),
        }
