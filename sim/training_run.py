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
(`sim.simulator.Simulation`, which this class extends); the run ends when the last push ends.

What it does not do: drop or re-generate stale work (nothing exceeds k, so nothing is
dropped), decode-step-grain weight swaps, the learner slowing the engines it shares a device
with beyond time-slicing, or a learner that overlaps a push with its next update.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rstar2.scheduler.dispatcher import Placement
from rstar2.scheduler.length_predictor import LengthPredictor
from rstar2.scheduler.policy import Policy
from sim.cost import CostModel
from sim.engine import EngineModel
from sim.events import PRIORITY_CONTROL
from sim.learner import LearnerCost
from sim.simulator import ProgressFn, Simulation
from sim.workload import TrajectorySpec


@dataclass(frozen=True)
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
    staleness: list[int]
    """Per trajectory, in workload order (step by step)."""
    versions: list[int]
    """Per trajectory, how many policy versions its turns were generated under (> 1: a
    partial rollout, continued across a push)."""
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
        return {s: self.staleness.count(s) for s in range(self.max_staleness + 1)}

    def summary(self) -> dict[str, object]:
        times = self.step_times
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
            "staleness_mean": round(statistics.fmean(self.staleness), 4),
            "staleness_max": max(self.staleness),
            "staleness_histogram": self.staleness_histogram(),
            "partial_rollout_fraction": round(
                sum(v > 1 for v in self.versions) / len(self.versions), 4
            ),
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


def step_workload(steps: Sequence[Sequence[TrajectorySpec]]) -> list[TrajectorySpec]:
    """The run's trajectories, step after step, ids prefixed by the step (``"3/p0-r1"``), so
    that a replayed step's trajectories and prompts are new to the engines and the core."""
    return [
        replace(spec, traj_id=f"{t}/{spec.traj_id}", prompt_id=f"{t}/{spec.prompt_id}")
        for t, step in enumerate(steps, start=1)
        for spec in step
    ]


@dataclass
class _Learner:
    """The learner's state: which step it trains next and what it is doing."""

    next_step: int = 1
    state: str = "idle"
    """idle, updating, draining (the gate is closed, waiting for the turns in flight), pushing."""
    times: dict[str, float] = field(default_factory=dict)
    """The current step's phase times."""


class TrainingRun(Simulation):
    """N RL steps under bounded staleness. Build it, call `run_steps()` once."""

    def __init__(
        self,
        policy: Policy,
        steps: Sequence[Sequence[TrajectorySpec]],
        num_engines: int,
        kv_tokens: int,
        cost: CostModel,
        learner: LearnerCost,
        max_staleness: int = 0,
        colocated: bool = False,
        max_num_seqs: int = 256,
        progress: ProgressFn | None = None,
        move_turns: bool = True,
        predictor: LengthPredictor | None = None,
        tool_workers: int | None = None,
    ) -> None:
        if not steps or any(not s for s in steps):
            raise ValueError("a run needs at least one step, and every step a trajectory")
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        super().__init__(
            policy, step_workload(steps), num_engines, kv_tokens, cost, max_num_seqs, progress,
            move_turns=move_turns, predictor=predictor, tool_workers=tool_workers,
        )  # fmt: skip
        self.learner_cost = learner
        self.max_staleness = max_staleness
        self.colocated = colocated
        self.steps = [list(s) for s in steps]
        bounds = [0]
        for s in steps:
            bounds.append(bounds[-1] + len(s))
        self._step_range = [range(bounds[t - 1], bounds[t]) for t in range(1, len(bounds))]
        self._step_of = [t for t, r in enumerate(self._step_range, start=1) for _ in r]
        self._left = [len(r) for r in self._step_range]
        self._released = 0
        self.version = 0
        """The policy version the engines hold (pushes that have ended)."""
        self._oldest = [-1] * len(self.workload)
        self._last_version = [-1] * len(self.workload)
        self._versions = [0] * len(self.workload)
        self._gate_closed = False
        self._held: list[tuple[int, int]] = []
        self._learner = _Learner()
        self._released_at: dict[int, float] = {}
        self._generated_at: dict[int, float] = {}
        self._times: list[StepTimes] = []
        self._end = 0.0

    def run_steps(self) -> RunResult:
        start = time.perf_counter()
        self._play()
        if len(self._times) != len(self.steps):
            raise RuntimeError(f"stalled: {len(self._times)}/{len(self.steps)} steps trained")
        staleness = [
            self._step_of[i] - 1 - self._oldest[i] for i in range(len(self.workload))
        ]  # fmt: skip
        if not all(0 <= s <= self.max_staleness for s in staleness):
            raise AssertionError(f"staleness outside [0, {self.max_staleness}]: {max(staleness)}")
        return RunResult(
            policy=self.policy.name,
            steps=len(self.steps),
            max_staleness=self.max_staleness,
            colocated=self.colocated,
            run_s=self._end,
            trajectories=len(self.workload),
            generated_tokens=sum(e.generated_tokens for e in self.engines),
            preemptions=sum(e.preemptions for e in self.engines),
            busy_s=[e.busy_s for e in self.engines],
            staleness=staleness,
            versions=self._versions,
            step_times=self._times,
            tool_queue_s=self.tools.queued_s,
            events=self.loop.popped,
            wall_s=time.perf_counter() - start,
        )

    # --- hooks of Simulation ------------------------------------------------------------------

    def _start(self) -> None:
        self._release_steps(0.0)

    def _submit(self, i: int, engine_id: int, now: float) -> list[Placement]:
        if self._gate_closed:  # the weights are about to load: the turn waits at the gate
            self._held.append((i, engine_id))
            return []
        if self._oldest[i] < 0:
            self._oldest[i] = self.version
        if self._last_version[i] != self.version:
            self._last_version[i] = self.version
            self._versions[i] += 1
        return super()._submit(i, engine_id, now)

    def _engine_decides(self, engine: EngineModel, now: float) -> None:
        super()._engine_decides(engine, now)
        if self._learner.state == "draining":
            self._try_drained(now)

    def _trajectory_done(self, i: int, now: float) -> None:
        t = self._step_of[i]
        self._left[t - 1] -= 1
        if self._left[t - 1] == 0:
            self._generated_at[t] = now
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
            self._released_at[self._released] = now
            self._release(self._step_range[self._released - 1], now)

    def _try_update(self, now: float) -> None:
        """Start the next update if the learner is idle and its step has finished."""
        learner = self._learner
        t = learner.next_step
        if learner.state != "idle" or t > len(self.steps) or self._left[t - 1] > 0:
            return
        if self.colocated:  # the update needs the engines' devices: drain them first
            self._close_gate(now)
            return
        self._start_update(now)

    def _start_update(self, now: float) -> None:
        learner = self._learner
        learner.state = "updating"
        learner.times = {"update_start": now}
        duration = self.learner_cost.update_s(self.steps[learner.next_step - 1])
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
        self._times.append(
            StepTimes(
                t, self._released_at[t], self._generated_at[t], learner.times["update_start"],
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
