"""The commands the RL controller issues and its shell (the learner actor) executes.

`rstar2.train.controller.Controller` decides; it answers each event with a list of these
commands, in the order they are to be executed. At most one command of a list expects a reply,
and it comes last: `PushWeights` (answered by `Controller.weights_pushed`), `RollOut`
(`Controller.rollouts_done`) or `Update` (`Controller.update_done`). The others are effects
without a reply (files, the optimizer, the profiler's window, `Submit`: rollouts started
ahead); `Finish` ends the run.

What it does not do: decide anything (`controller.py`) or execute anything (`learner_actor.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rstar2.problem import Problem
from rstar2.wire import RolloutTask, TrajectoryResult


@dataclass(frozen=True)
class Recording:
    """Write a batch's scored rollouts to the trajectory log (`RUN/trajectories.jsonl`,
    `rstar2.train.trajectory_log`) once they are back (a `RollOut`'s) or trained on (an
    `Update`'s, with which rollouts trained)."""

    source: Literal["train", "validation", "test"]
    stage: str
    """The RL stage's name, or "sft" / "final" for the evaluations before and after RL."""
    problems: tuple[Problem, ...]
    """The batch's problems, by prompt index (`RolloutTask.prompt`)."""


@dataclass(frozen=True)
class OpenRun:
    """Open the run's metrics log and rollout trace (the first command of a run)."""

    resume_step: int | None
    """None: a fresh run (the files start empty); else a resumed run, and the files keep only
    the lines of steps up to this one (the steps after it are run again)."""


@dataclass(frozen=True)
class PushWeights:
    """Push the policy to every engine and wait for their acks; reply: `weights_pushed`."""

    version: int
    """The RL step the policy has been trained through (0: the SFT policy)."""


@dataclass(frozen=True)
class RollOut:
    """Roll these trajectories out on the graph and collect them scored; reply: `rollouts_done`."""

    step: int
    """The step of the `RolloutBatch` (negative for a stage's solved-filter probe)."""
    tasks: list[RolloutTask]
    """Every trajectory, all of one kind ("train", "eval" or "filter")."""
    problems: tuple[Problem, ...] = ()
    """The problems of `tasks`, by prompt index (a training step's; empty: not kept)."""
    record: Recording | None = None
    """Record the results in the trajectory log when they are back (an evaluation's)."""

    @property
    def kind(self) -> str:
        return self.tasks[0].kind if self.tasks else "train"


@dataclass(frozen=True)
class Submit:
    """Start rolling `rollout`'s trajectories out now and keep collecting them in the
    background (asynchronous RL: a later step generates while the learner updates); no reply.
    The same `RollOut` is issued again when the controller wants its results: the shell then
    only waits for them."""

    rollout: RollOut


@dataclass(frozen=True)
class Update:
    """Update the policy on a step's scored rollouts, grouped by prompt (`group_results`:
    prompts in order, samples in order) (selection, advantages, optimizer step); reply:
    `update_done`."""

    step: int
    groups: list[list[TrajectoryResult]]
    record: Recording | None = None
    """Record the step's rollouts (these groups) in the trajectory log after the update, with
    which of them trained (None: the step is not recorded)."""


@dataclass(frozen=True)
class ResetOptimizer:
    """Replace the optimizer and its schedule with fresh ones (a stage's `reset_optimizer`)."""

    stage: str


@dataclass(frozen=True)
class TraceStep:
    """Append a training step's trajectories to the rollout trace."""

    step: int
    results: list[TrajectoryResult]
    max_response_tokens: int
    """The stage's response budget (0 = the worker's configured one)."""


@dataclass(frozen=True)
class WriteMetrics:
    """Append one row to the metrics log, and log `line` when there is one (an RL step's
    fixed-width progress line)."""

    row: dict[str, Any]
    line: str | None = None


@dataclass(frozen=True)
class Checkpoint:
    """Save a checkpoint of `step`: the policy, optimizer, schedule and RNG states (the
    shell's) together with `state` (the controller's: "stream", "stage", "progress")."""

    step: int
    state: dict[str, Any]


@dataclass(frozen=True)
class EnterPhase:
    """The RL steps begin ("rl") or are over ("final"): the bounds of the profiler's window."""

    phase: Literal["rl", "final"]


@dataclass(frozen=True)
class Finish:
    """The run is done: stop the graph with this summary."""

    summary: dict[str, Any]


Command = (
    OpenRun
    | PushWeights
    | RollOut
    | Submit
    | Update
    | ResetOptimizer
    | TraceStep
    | WriteMetrics
    | Checkpoint
    | EnterPhase
    | Finish
)
"""Everything the controller may ask of its shell."""
