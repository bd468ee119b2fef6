"""A simulated RL run: N steps of rollouts, the learner's updates and the weight pushes between
them, with bounded staleness.

The staleness model (rstar2's live trainer implements the same, docs/sim.md):

- The policy version v is the number of learner updates applied; it starts at 0. Step t
  (t = 1..N) trains on its P x G trajectories; its update moves the learner from version t-1
  to t, and the push then brings version t to the engines.
- With ``max_staleness = k``, step t's trajectories are submitted to the dispatch core as soon
  as the engines hold version >= t-1-k: steps 1..k+1 at time 0, step t+k+1 when push t ends.
  k = 0 is synchronous: step t starts only after update t-1 and its push.
- The learner trains step t once every trajectory of step t has finished and it is done with
  step t-1 (update and push); meanwhile the engines go on generating the steps released.
- A push reaches the engines at *turn boundaries* (`rstar2.rollout.weight_gate`, as live):
  when the update ends the gate closes, so new turns (a trajectory's first or the turn after a
  tool call) are held; the turns in flight finish; once no engine runs or queues a turn the
  weights load for `push_s`, then the engines hold version t and the held turns go on. Every
  token of a turn comes from one version; a trajectory's oldest version is the version its
  first turn started under, and its staleness is ``(t - 1) - oldest`` for the step t that
  trains it, at most k by construction (asserted).
- The learner is a separate resource (``colocated=False``: its own devices, it updates while
  the engines generate), or shares the engines' devices (``colocated=True``: the gate closes
  when the update is due, the update and the push run once the engines are drained, and the
  engines generate nothing meanwhile: time-slicing, no speed-up for either).

The engines, the dispatch core, the workload and the tool model are the one-step simulator's
(`sim.simulator.Playback`, which this class extends); the run ends when the last push ends.

Memory follows the steps in flight, not the run's length: a step's trajectories are made
(`RunSteps`) when the step is released, a trajectory's state is dropped when it finishes
(its staleness and versions go into the run's counts) and a step's when its push ends (its
`StepTimes` are kept: ~90 B a step).

A run's measurements (`RunResult`, `StepTimes`) are in `sim/run_result.py`, its steps' lazily
made trajectories (`RunSteps`) in `sim/run_steps.py`.

What it does not do: drop or re-generate stale work (nothing exceeds k, so nothing is
dropped), decode-step-grain weight swaps, the learner slowing the engines it shares a device
with beyond time-slicing, or a learner that overlaps a push with its next update.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rstar2.scheduler.dispatcher import Placement
from rstar2.scheduler.length_predictor import LengthPredictor
from rstar2.scheduler.policy import Policy
from sim.cluster import Cluster
from sim.engine import EngineModel
from sim.events import PRIORITY_CONTROL
from sim.learner import LearnerCost, step_tokens
from sim.run_result import RunResult, StepTimes
from sim.run_steps import RunSteps, step_specs
from sim.simulator import Playback, ProgressFn, Released
from sim.workload import TrajectorySpec


@dataclass(slots=True)
class _Versions:
    """The policy versions a released trajectory's turns were generated under."""

    step: int
    oldest: int = -1
    """The version its first turn started under (-1: not started)."""
    latest: int = -1
    """The version of its latest turn."""
    count: int = 0
    """Distinct versions (consecutive turns under the same version count once)."""


@dataclass
class _Step:
    """A released step until its push ends: what its update and its `StepTimes` need."""

    left: int
    """Its trajectories not yet finished."""
    tokens: int
    """Its prompt, model and tool tokens (`sim.learner.step_tokens`: the update's cost)."""
    prompt_ids: set[str]
    """Its prompts, forgotten by the engines once its last trajectory finishes."""
    released_s: float
    generated_s: float = 0.0


@dataclass
class _Learner:
    """The learner's state: which step it trains next and what it is doing."""

    next_step: int = 1
    state: str = "idle"
    """idle, updating, draining (the gate is closed, waiting for the turns in flight), pushing."""
    times: dict[str, float] = field(default_factory=dict)
    """The current step's phase times."""


class TrainingRun(Playback):
    """N RL steps under bounded staleness. Build it, call `run_steps()` once.

    `steps` is asked for step t when step t is released; what is kept of a trajectory after it
    finishes is its share of the run's counts (staleness, partial rollouts), and of a step after
    its push its `StepTimes`."""

    def __init__(
        self,
        policy: Policy,
        steps: RunSteps | Sequence[Sequence[TrajectorySpec]],
        cluster: Cluster,
        learner: LearnerCost,
        *,
        max_staleness: int = 0,
        colocated: bool = False,
        progress: ProgressFn | None = None,
        move_turns: bool = True,
        predictor: LengthPredictor | None = None,
        tool_workers: int | None = None,
    ) -> None:
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.steps = steps if isinstance(steps, RunSteps) else RunSteps.of(steps)
        super().__init__(
            policy, cluster, sum(self.steps.sizes), progress=progress, move_turns=move_turns,
            predictor=predictor, tool_workers=tool_workers, timeline=False,
        )  # fmt: skip
        t, longest = self.steps.longest
        self._check_fits(step_specs(t, [longest]))
        self.learner_cost = learner
        self.max_staleness = max_staleness
        self.colocated = colocated
        self._released = 0
        self._next_key = 0
        self.version = 0
        """The policy version the engines hold (pushes that have ended)."""
        self._versions: dict[int, _Versions] = {}  # per trajectory released and not finished
        self._steps: dict[int, _Step] = {}  # per step released and not pushed
        self._staleness_counts = [0] * (max_staleness + 1)
        self._partial = 0
        self._gate_closed = False
        self._held: list[tuple[int, int]] = []
        self._learner = _Learner()
        self._times: list[StepTimes] = []
        self._end = 0.0

    def run_steps(self) -> RunResult:
        start = time.perf_counter()
        self._play()
        if len(self._times) != len(self.steps):
            raise RuntimeError(f"stalled: {len(self._times)}/{len(self.steps)} steps trained")
        return RunResult(
            policy=self.policy.name,
            steps=len(self.steps),
            max_staleness=self.max_staleness,
            colocated=self.colocated,
            run_s=self._end,
            trajectories=self._finished,
            generated_tokens=sum(e.generated_tokens for e in self.engines),
            preemptions=sum(e.preemptions for e in self.engines),
            busy_s=[e.busy_s for e in self.engines],
            staleness_counts=self._staleness_counts,
            partial_rollouts=self._partial,
            step_times=self._times,
            tool_queue_s=self.tools.queued_s,
            events=self.loop.popped,
            wall_s=time.perf_counter() - start,
        )

    # --- hooks of Playback --------------------------------------------------------------------

    def _start(self) -> None:
        self._release_steps(0.0)

    def _submit(self, i: int, engine_id: int, now: float) -> list[Placement]:
        if self._gate_closed:  # the weights are about to load: the turn waits at the gate
            self._held.append((i, engine_id))
            return []
        versions = self._versions[i]
        if versions.oldest < 0:
            versions.oldest = self.version
        if versions.latest != self.version:
            versions.latest = self.version
            versions.count += 1
        return super()._submit(i, engine_id, now)

    def _engine_decides(self, engine: EngineModel, now: float) -> None:
        super()._engine_decides(engine, now)
        if self._learner.state == "draining":
            self._try_drained(now)

    def _trajectory_done(self, i: int, traj: Released, now: float) -> None:
        versions = self._versions.pop(i)
        t = versions.step
        staleness = t - 1 - versions.oldest
        if not 0 <= staleness <= self.max_staleness:
            raise AssertionError(f"staleness {staleness} outside [0, {self.max_staleness}]")
        self._staleness_counts[staleness] += 1
        self._partial += versions.count > 1
        step = self._steps[t]
        step.left -= 1
        if step.left == 0:
            step.generated_s = now
            for engine in self.engines:
                engine.forget_prompts(step.prompt_ids)
            step.prompt_ids = set()
            self._try_update(now)

    def _control(self, payload: object, now: float) -> None:
        if payload == "update_done":
            self._learner.times["update_end"] = now
            if self.colocated:  # drained already: the push follows at once
                self._start_push(now)
            else:
                self._close_gate(now)
        elif payload == "push_done":
            self._push_done(now)
        else:
            raise AssertionError(f"unexpected control event {payload!r}")

    # --- the learner and the gate -------------------------------------------------------------

    def _release_steps(self, now: float) -> None:
        """Submit every step the engines' version allows (t - 1 - k <= version)."""
        while (
            self._released < len(self.steps) and self._released - self.max_staleness <= self.version
        ):  # step t = released + 1 may start when t - 1 - k <= version
            self._released += 1
            t = self._released
            specs = step_specs(t, self.steps[t - 1])
            self._steps[t] = _Step(
                len(specs), step_tokens(specs), {s.prompt_id for s in specs}, now
            )
            keys = range(self._next_key, self._next_key + len(specs))
            self._next_key += len(specs)
            for i in keys:
                self._versions[i] = _Versions(t)
            self._release(zip(keys, specs, strict=True), now)

    def _try_update(self, now: float) -> None:
        """Start the next update if the learner is idle and its step has finished."""
        learner = self._learner
        t = learner.next_step
        step = self._steps.get(t)
        if learner.state != "idle" or step is None or step.left > 0:
            return
        if self.colocated:  # the update needs the engines' devices: drain them first
            self._close_gate(now)
            return
        self._start_update(now)

    def _start_update(self, now: float) -> None:
        learner = self._learner
        learner.state = "updating"
        learner.times = {"update_start": now}
        duration = self.learner_cost.update_s(self._steps[learner.next_step].tokens)
        self.loop.schedule(now + duration, PRIORITY_CONTROL, "update_done")

    def _close_gate(self, now: float) -> None:
        self._gate_closed = True
        self._learner.state = "draining"
        self._try_drained(now)

    def _try_drained(self, now: float) -> None:
        """Once no engine runs or queues a turn, what waited for the drain starts."""
        if any(e.running or e.waiting for e in self.engines):
            return
        if self.colocated:
            self._start_update(now)
        else:
            self._start_push(now)

    def _start_push(self, now: float) -> None:
        self._learner.state = "pushing"
        self._learner.times["push_start"] = now
        self.loop.schedule(now + self.learner_cost.push_s, PRIORITY_CONTROL, "push_done")

    def _push_done(self, now: float) -> None:
        learner = self._learner
        t = learner.next_step
        step = self._steps.pop(t)
        self._times.append(
            StepTimes(
                t, step.released_s, step.generated_s, learner.times["update_start"],
                learner.times["update_end"], learner.times["push_start"], now,
            )
        )  # fmt: skip
        self.version = t
        self._end = now
        self._gate_closed = False
        held, self._held = self._held, []
        for i, engine_id in held:
            self._place(self._submit(i, engine_id, now), now)
        learner.next_step += 1
        learner.state = "idle"
        self._release_steps(now)
        self._try_update(now)
