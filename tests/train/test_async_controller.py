"""The RL controller with bounded staleness (`rl.max_staleness = k`), on fakes.

`AsyncDriver` answers like the learner actor with engines that hold the last pushed version:
a `Submit`ted rollout starts generating at once, so its trajectories carry the engines' version
at submission (their oldest token's); a rollout awaited without a submission starts then.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from rstar2.train.controller import Controller
from rstar2.train.run_commands import (
    Checkpoint,
    Command,
    PushWeights,
    RollOut,
    Submit,
    Update,
)
from rstar2.wire import TrajectoryResult
from tests.train.test_controller import (
    HELDOUT,
    PROBLEMS,
    Driver,
    encode,
    make_config,
    rows,
    scored,
    solves,
)


@dataclass
class AsyncDriver(Driver):
    version: int = -1
    """The engines' policy version (the last push)."""
    frozen_at: int | None = None
    """Pushes after this version fail to reach the engines (None: every push does)."""
    submitted: dict[tuple[str, int], list[TrajectoryResult]] = field(default_factory=dict)

    def generate(self, rollout: RollOut) -> list[TrajectoryResult]:
        return [
            msgspec.structs.replace(scored(t, self.reward(t)), policy_versions=[self.version])
            for t in reversed(rollout.tasks)
        ]

    def reply(self, command: Command) -> list[Command]:
        c = self.controller
        match command:
            case PushWeights(version=version):
                if self.frozen_at is None or version <= self.frozen_at:
                    self.version = version
            case Submit(rollout=rollout):
                self.submitted[(rollout.kind, rollout.step)] = self.generate(rollout)
                return []
            case RollOut(step=step) if (command.kind, step) in self.submitted:
                results = self.submitted.pop((command.kind, step))
                started, self.clock = self.clock, self.clock + 1.0
                return c.rollouts_done(step, results, started, self.clock)
            case RollOut():
                results = self.generate(command)
                started, self.clock = self.clock, self.clock + 1.0
                return c.rollouts_done(command.step, results, started, self.clock)
        return super().reply(command)


STAGES: list[dict[str, Any]] = [
    {"name": "rl1", "steps": 4},
    {"name": "rl2", "steps": 3, "filter_solved": True, "filter_samples": 2},
]


def run(k: int, **over: Any) -> tuple[AsyncDriver, list[Command]]:
    cfg = make_config(stages=STAGES, rl={"group_size": 2, "max_staleness": k}, **over)
    controller = Controller(cfg, PROBLEMS, HELDOUT, encode)
    driver = AsyncDriver(controller, reward=solves({"p0", "p5"}))
    return driver, driver.run(controller.start(resume=False))


def train_tasks(commands: list[Command]) -> list[tuple[int, list[str]]]:
    seen = [c for c in commands if isinstance(c, RollOut) and c.kind == "train"]
    return [(r.step, [t.answer for t in r.tasks]) for r in seen]


@pytest.mark.parametrize("k", [1, 2])
def test_later_steps_are_submitted_before_the_update_within_the_stage(k: int) -> None:
    _, commands = run(k)
    order = [
        (type(c).__name__, c.rollout.step if isinstance(c, Submit) else c.step)
        for c in commands
        if isinstance(c, Submit | Update)
    ]
    # before step t's update, steps t+1..t+k of t's stage (stage rl1: 1-4, rl2: 5-7)
    expected: list[tuple[str, int]] = []
    submitted: set[int] = set()
    for t in range(1, 8):
        stage_end = 4 if t <= 4 else 7
        for u in range(t + 1, min(t + k, stage_end) + 1):
            if u not in submitted:
                expected.append(("Submit", u))
                submitted.add(u)
        expected.append(("Update", t))
    assert order == expected


@pytest.mark.parametrize("k", [1, 2])
def test_the_same_problems_and_seeds_as_a_synchronous_run(k: int) -> None:
    _, sync = run(0)
    _, ahead = run(k)
    assert train_tasks(ahead) == train_tasks(sync)
    sync_seeds = [t.seed for c in sync if isinstance(c, RollOut) for t in c.tasks]
    ahead_seeds = [t.seed for c in ahead if isinstance(c, RollOut) for t in c.tasks]
    assert ahead_seeds == sync_seeds
    assert not any(isinstance(c, Submit) for c in sync)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_every_step_is_within_the_bound_and_lags_as_far_as_it_may(k: int) -> None:
    _, commands = run(k)
    train_rows = [r for r in rows(commands) if r["stage"] in ("rl1", "rl2")]
    assert [r["stage"] for r in train_rows] == ["rl1"] * 4 + ["rl2"] * 3
    assert all(r["staleness_max"] <= k and r["stale_dropped"] == 0 for r in train_rows)
    # step t was submitted before update t-k (engines at t-k-1): k stale, except a stage's
    # first k steps (not submitted across the stage's start)
    lags = [r["staleness_max"] for r in train_rows]
    assert lags == [min(k, i) for i in range(4)] + [min(k, i) for i in range(3)]
    hist = train_rows[-1]["staleness_hist"]
    assert sum(hist) == 8 and len(hist) == lags[-1] + 1


@pytest.mark.parametrize("k", [1, 2])
def test_checkpoints_hold_the_cursor_of_the_synchronous_run(k: int) -> None:
    """Problems drawn for steps submitted ahead are not in a checkpoint: resuming draws them
    again, so a resumed run trains on what an uninterrupted one does."""
    _, sync = run(0)
    _, ahead = run(k)
    sync_states = {c.step: c.state["stream"] for c in sync if isinstance(c, Checkpoint)}
    ahead_states = {c.step: c.state["stream"] for c in ahead if isinstance(c, Checkpoint)}
    assert ahead_states == sync_states


@pytest.mark.parametrize("at", [1, 2, 5])
def test_resume_keeps_the_bound_and_the_run_trains_what_it_would_have(at: int) -> None:
    k = 2
    driver, reference = run(k)
    checkpoint = next(c for c in reference if isinstance(c, Checkpoint) and c.step == at)
    saved = pickle.loads(pickle.dumps(checkpoint.state))
    resumed = Controller(driver.controller.cfg, PROBLEMS, HELDOUT, encode)
    again = AsyncDriver(resumed, reward=solves({"p0", "p5"}))
    first = resumed.start(resume=True, saved=saved)
    assert first[1] == PushWeights(version=at)  # the engines get the checkpoint's version
    commands = again.run(first)
    assert train_tasks(commands) == [t for t in train_tasks(reference) if t[0] > at]
    after = [r for r in rows(commands) if r["stage"] in ("rl1", "rl2")]
    assert after and all(r["staleness_max"] <= k and r["stale_dropped"] == 0 for r in after)


def test_a_push_that_never_reaches_the_engines_makes_groups_stale_and_they_are_dropped() -> None:
    cfg = make_config(rl={"group_size": 2, "max_staleness": 1})
    controller = Controller(cfg, PROBLEMS, HELDOUT, encode)
    driver = AsyncDriver(controller, reward=solves({"p0", "p5"}), frozen_at=0)
    commands = driver.run(controller.start(resume=False))
    updates = [c for c in commands if isinstance(c, Update)]
    train_rows = [r for r in rows(commands) if r["stage"] == "rl1"]
    # step 3's learner is at version 2, its rollouts at 0: 2 stale, every group dropped
    assert [sum(map(len, u.groups)) for u in updates] == [8, 8, 0]
    assert [r["stale_dropped"] for r in train_rows] == [0, 0, 8]
    assert train_rows[2]["staleness_max"] == 2


def test_a_synchronous_run_has_zero_staleness_and_no_submission() -> None:
    _, commands = run(0)
    assert not any(isinstance(c, Submit) for c in commands)
    train_rows = [r for r in rows(commands) if r["stage"] in ("rl1", "rl2")]
    assert all(r["staleness_max"] == 0 and r["staleness_hist"] == [8] for r in train_rows)
