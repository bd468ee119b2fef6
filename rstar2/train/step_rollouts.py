"""An RL step's rollouts: drawn from the data cursor, submitted ahead (asynchronous RL), and
kept when fresh enough.

`StepRollouts.take(step)` is step `step`'s `RollOut`: the one submitted ahead for it, or one
on the next `prompts_per_step` problems of the data cursor. With `rl.max_staleness = k`,
`ahead(t)` (before step t's update) draws the rollouts of steps t+1..t+k not drawn yet: the
engines hold version t-1, and step u may start generating once they hold u-1-k, so u <= t+k;
never across a stage's start (its solved-filter probe and optimizer reset come first, as in a
synchronous run). `probe(index)` is a stage's solved-filter probe. `cursor()` is the data cursor a checkpoint saves: from before the problems
of steps submitted ahead were drawn, so a resumed run draws them again. `within_staleness`
keeps the groups at most `k` versions behind the learner.

What it does not do: decide when a step runs (`controller.py`) or weigh stale rollouts
(`rstar2.rl.staleness`).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

from rstar2.problem import Problem
from rstar2.rl.staleness import fresh_groups, staleness, staleness_metrics
from rstar2.train.config import TrainConfig
from rstar2.train.problem_stream import ProblemStream
from rstar2.train.progress import stage_index
from rstar2.train.rollout_groups import Encode, group_results, rollout_tasks
from rstar2.train.run_commands import RollOut
from rstar2.wire import TrajectoryResult

log = logging.getLogger(__name__)


class StepRollouts:
    """The RL steps' `RollOut`s, in step order (see the module)."""

    def __init__(self, cfg: TrainConfig, stream: ProblemStream, encode: Encode) -> None:
        self.cfg = cfg
        self.stream = stream
        self.encode = encode
        self._ahead: dict[int, tuple[RollOut, dict[str, Any]]] = {}
        """The steps submitted ahead, not yet taken: their `RollOut` and the data cursor from
        before their problems were drawn."""

    def take(self, step: int) -> RollOut:
        """Step `step`'s rollouts: submitted ahead, or drawn now."""
        ahead = self._ahead.pop(step, None)
        return ahead[0] if ahead is not None else self._draw(step)

    def ahead(self, t: int) -> list[RollOut]:
        """Before step `t`'s update: the rollouts of the steps to submit ahead now."""
        cfg, k = self.cfg, self.cfg.rl.max_staleness
        submitted: list[RollOut] = []
        for u in range(t + 1, min(t + k, cfg.total_steps) + 1):
            if stage_index(cfg.stages, u) != stage_index(cfg.stages, t):
                break
            if u in self._ahead:
                continue
            before = copy.deepcopy(self.stream.state())
            rollout = self._draw(u)
            self._ahead[u] = (rollout, before)
            submitted.append(rollout)
        return submitted

    def probe(self, index: int) -> RollOut:
        """Stage `index`'s solved-filter probe (at step `-1 - index`): `filter_samples` of
        each problem of `probe_pool`."""
        stage = self.cfg.stages[index]
        tasks = rollout_tasks(
            self.probe_pool(index),
            self.encode,
            self.cfg.seed,
            -1 - index,
            "filter",
            stage.filter_samples,
            self.cfg.rollout.temperature,
            stage.max_response_tokens,
            stage.max_turns,
        )
        return RollOut(-1 - index, tasks)

    def probe_pool(self, index: int) -> list[Problem]:
        """The problems stage `index`'s probe rolls out: the data cursor's pool (its first
        `filter_pool`)."""
        stage = self.cfg.stages[index]
        pool = [self.stream.all[i] for i in self.stream.pool]
        return pool[: stage.filter_pool] if stage.filter_pool else pool

    def cursor(self) -> dict[str, Any]:
        """The data cursor a checkpoint saves (a copy)."""
        state = self._ahead[min(self._ahead)][1] if self._ahead else self.stream.state()
        return copy.deepcopy(state)

    def _draw(self, step: int) -> RollOut:
        cfg = self.cfg
        stage = cfg.stages[stage_index(cfg.stages, step)]
        problems = tuple(self.stream.next_batch(cfg.prompts_per_step))
        tasks = rollout_tasks(
            problems,
            self.encode,
            cfg.seed,
            step,
            "train",
            cfg.rollouts_per_prompt,
            cfg.rollout.temperature,
            stage.max_response_tokens,
            stage.max_turns,
        )
        return RollOut(step, tasks, problems)


def within_staleness(
    results: Sequence[TrajectoryResult], step: int, learner: int, max_staleness: int
) -> tuple[list[list[TrajectoryResult]], dict[str, Any]]:
    """Step `step`'s rollouts by prompt (`group_results`), the groups at most `max_staleness`
    versions behind the learner (version `learner`), and the step's staleness figures."""
    ages = [staleness(r.trajectory.policy_versions, learner) for r in results]
    kept, dropped = fresh_groups(
        group_results(results), learner, max_staleness, lambda r: r.trajectory.policy_versions
    )
    if dropped:
        log.warning(
            "step %d: %d rollout(s) dropped, their groups more than %d version(s) stale",
            step,
            dropped,
            max_staleness,
        )
    return kept, {**staleness_metrics(ages), "stale_dropped": dropped}
