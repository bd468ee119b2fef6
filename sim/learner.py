"""The learner's cost: how long one policy update and one weight push take.

An RL step's update runs forward and backward over the step's trained tokens (prompt and
response of every kept trajectory), ``epochs`` times, plus ``forwards`` extra forward passes
(a reference model for a KL term, or recomputed old/proximal logprobs; rstar2's recipe needs
none: its ratio is taken against the engine's sampling logprobs and it has no KL term). With
the usual 2 FLOPs per parameter and token forward and 4 backward:

    update_s = fixed_s + per_token_s * trained_tokens
    per_token_s = (6 * epochs + 2 * forwards) * params / (gpus * peak_flops * mfu)
    trained_tokens = train_fraction * (the step's prompt + response tokens)

(``train_fraction``: GRPO-RoC trains G of the 2G rollouts it samples, 0.5.) The push sends the
weights to the engines: ``push_s = latency_s + weight_bytes / bandwidth``. Both can instead be
fitted to a real run's `metrics.jsonl` (`from_metrics`): a least-squares line of the measured
``time_learner_s`` against each step's trained tokens, and the median ``time_sync_s``.

What it does not model: attention FLOPs (quadratic in length, small at 12K for a 14B model),
optimizer-step time apart from the fit's fixed term, pipeline bubbles, or a push that overlaps
the next update.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim.cost import GpuSpec, ModelSpec
from sim.workload import TrajectorySpec


@dataclass(frozen=True)
class LearnerCost:
    """``update_s = fixed_s + per_token_s * train_fraction * tokens``; a push takes `push_s`."""

    fixed_s: float
    """Seconds of every update whatever its size."""
    per_token_s: float
    """Seconds per trained token."""
    train_fraction: float
    """Share of a step's tokens the update trains on."""
    push_s: float
    """Seconds of one weight push to the engines (they do not generate meanwhile)."""

    def __post_init__(self) -> None:
        for name in ("fixed_s", "per_token_s", "push_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.train_fraction <= 1:
            raise ValueError(f"train_fraction must be in (0, 1], got {self.train_fraction}")

    def update_s(self, tokens: int) -> float:
        """Seconds of the update that trains on a step of `tokens` tokens (`step_tokens`)."""
        return self.fixed_s + self.per_token_s * self.train_fraction * tokens


def step_tokens(step: list[TrajectorySpec]) -> int:
    """Prompt, model and tool tokens of a step's trajectories (what the learner's forward sees)."""
    return sum(t.total_tokens for t in step)


def roofline_learner(
    model: ModelSpec,
    gpu: GpuSpec,
    gpus: int,
    mfu: float = 0.3,
    epochs: int = 1,
    forwards: int = 0,
    train_fraction: float = 0.5,
    push_bandwidth_bytes_s: float = 8.6e9,
    push_latency_s: float = 0.1,
) -> LearnerCost:
    """The update from FLOPs at `mfu` on `gpus` learner GPUs, the push from bytes / bandwidth.

    The default bandwidth is verl's checkpoint engine's figure: a 30B model (60 GB in bf16)
    synced in ~7 s on 32 H100s."""
    if gpus < 1 or not 0 < mfu <= 1 or epochs < 1 or forwards < 0:
        raise ValueError(f"need gpus >= 1, 0 < mfu <= 1, epochs >= 1, forwards >= 0: "
                         f"{gpus}, {mfu}, {epochs}, {forwards}")  # fmt: skip
    flops_per_token = (6 * epochs + 2 * forwards) * model.params
    return LearnerCost(
        fixed_s=0.0,
        per_token_s=flops_per_token / (gpus * gpu.peak_flops * mfu),
        train_fraction=train_fraction,
        push_s=push_latency_s + model.weight_bytes / push_bandwidth_bytes_s,
    )


def from_metrics(path: str | Path, steps: dict[int, list[TrajectorySpec]]) -> LearnerCost:
    """Fit the learner to a run's measured steps (`RUN/metrics.jsonl` beside the run's trace).

    For every RL step with ``time_learner_s`` and ``trained_rollouts`` whose trajectories the
    trace holds, its trained tokens are estimated as ``trained_rollouts / rollouts`` of the
    step's tokens; (fixed_s, per_token_s) is the least-squares line through (trained tokens,
    time_learner_s), neither negative; train_fraction is the mean ``trained_rollouts /
    rollouts``; push_s the median ``time_sync_s``."""
    xs, ys, fractions, syncs = [], [], [], []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e!r})") from None
        step = steps.get(row.get("step")) if isinstance(row, dict) else None
        if step is None or "time_learner_s" not in row or "trained_rollouts" not in row:
            continue
        fraction = float(row["trained_rollouts"]) / len(step)
        xs.append(fraction * step_tokens(step))
        ys.append(float(row["time_learner_s"]))
        fractions.append(fraction)
        syncs.append(float(row.get("time_sync_s", 0.0)))
    if len(xs) < 2:
        raise ValueError(f"{path}: fewer than 2 RL steps with learner timings match the trace")
    fixed_s, per_token_s = _nonnegative_line(np.array(xs), np.array(ys))
    return LearnerCost(fixed_s, per_token_s, statistics.fmean(fractions), statistics.median(syncs))


def _nonnegative_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares (intercept, slope) with neither negative (the other refitted alone)."""
    a = np.stack([np.ones_like(x), x], axis=1)
    (c0, c1), *_ = np.linalg.lstsq(a, y, rcond=None)
    if c1 < 0:
        return max(float(y.mean()), 0.0), 0.0
    if c0 < 0:
        return 0.0, float(x @ y / (x @ x))
    return float(c0), float(c1)
