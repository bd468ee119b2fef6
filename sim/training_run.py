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

What it does not do: drop or re-generate stale work (nothing exceeds k, so nothing is
dropped), decode-step-grain weight swaps, the learner slowing the engines it shares a device
with beyond time-slicing, or a learner that overlaps a push with its next update.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from rstar2.scheduler.dispatcher import Placement
from rstar2.scheduler.length_predictor import LengthPredictor
from rstar2.scheduler.policy import Policy
from sim.cost import CostModel
from sim.engine import EngineModel
from sim.events import PRIORITY_CONTROL
from sim.learner import LearnerCost, step_tokens
from sim.simulator import Playback, ProgressFn, Released
from sim.workload import TrajectorySpec


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


def _reach(spec: TrajectorySpec) -> int:
    """Tokens a trajectory may reach: its prompt and its whole response budget."""
    return spec.prompt_tokens + spec.max_response_tokens


class RunSteps:
    """The trajectories of a run's steps, made when they are asked for: ``steps[t - 1]`` calls
    ``make(t)``, a pure function of t, and nothing is kept, so a run holds only the steps it has
    released and not yet finished. Built with every step made once (and dropped) for what must
    be known before the run starts: each step's size (the progress total) and the longest
    trajectory (the cluster's shape and the KV check)."""

    def __init__(self, make: Callable[[int], Sequence[TrajectorySpec]], count: int) -> None:
        if count < 1:
            raise ValueError(f"a run needs at least one step, got {count}")
        sizes, longest = [], None
        for t in range(1, count + 1):
            step = make(t)
            if not step:
                raise ValueError(f"step {t} has no trajectory")
            sizes.append(len(step))
            top = max(step, key=_reach)
            if longest is None or _reach(top) > _reach(longest[1]):
                longest = (t, top)
        assert longest is not None
        self._make = make
        self.sizes = tuple(sizes)
        """Trajectories of each step."""
        self.longest = longest
        """(step, trajectory): the first trajectory that may reach `max_len`."""

    @classmethod
    def of(cls, steps: Sequence[Sequence[TrajectorySpec]]) -> RunSteps:
        """Steps already made (all of them held: for tests and small runs)."""
        return cls(lambda t: steps[t - 1], len(steps))

    @property
    def max_len(self) -> int:
        """The most tokens any trajectory of the run may reach."""
        return _reach(self.longest[1])

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index: int) -> Sequence[TrajectorySpec]:
        if not 0 <= index < len(self.sizes):
            raise IndexError(f"step index {index} outside 0..{len(self.sizes) - 1}")
        return self._make(index + 1)

    def __iter__(self) -> Iterator[Sequence[TrajectorySpec]]:
        return (self[i] for i in range(len(self)))


def step_specs(t: int, step: Sequence[TrajectorySpec]) -> list[TrajectorySpec]:
    """Step t's trajectories as the run releases them, ids prefixed by the step (``"3/p0-r1"``),
    so that a replayed step's trajectories and prompts are new to the engines and the core."""
    return [
        replace(spec, traj_id=f"{t}/{spec.traj_id}", prompt_id=f"{t}/{spec.prompt_id}")
        for spec in step
    ]


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
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self.steps = steps if isinstance(steps, RunSteps) else RunSteps.of(steps)
        super().__init__(
            policy, num_engines, kv_tokens, cost, sum(self.steps.sizes), max_num_seqs, progress,
            move_turns, predictor, tool_workers=tool_workers, timeline=False,
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
