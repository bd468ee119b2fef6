"""One simulated rollout step: trajectories, the dispatch core and engines on a virtual clock.

The simulator plays the part of the live rollout workers and scheduler actor and keeps only
timing: every routing decision is the dispatch core's (`rstar2.scheduler.dispatcher.Dispatcher`,
the same object the live scheduler drives), fed the events the live graph sends, in the order
the virtual clock produces them. Every trajectory of the step is submitted at time 0. A placed
turn is submitted to its engine model; when the engine returns a turn that ends in a tool call
the core hears ``turn_end`` and the call is dispatched at once; its result arrives after the
trajectory's recorded latency, when the core is asked where the next turn runs (``next_turn``,
with `move_turns` and more than one engine; otherwise the turn stays on its engine unasked, as
in the live graph). A returned last turn is a ``finish``. Engines report their load to the core
after every decision and every submission, as the live workers' reports (with turn ends,
routes and finished trajectories) would, here without delay. The length predictor starts from
what a live scheduler would know (`sim.config.predictor`), never from the step being played.
The step ends when the last trajectory finishes; that time is the makespan.

Tool calls run on `tool_workers` sandbox workers (`sim.tool_workers.ToolWorkers`; None:
as many as there are calls, every call starts at once): a call that finds every worker busy
queues, first come first served.

The machinery is `Playback`, which keeps state only for the trajectories released and not yet
finished; `Simulation` releases one step at time 0 and keeps what its result needs of every
trajectory. Several steps with a learner and weight pushes between them:
`sim.training_run.TrainingRun`, which extends `Playback` through its hooks (`_start`,
`_submit`, `_control`, `_trajectory_done`) and releases each step when staleness allows.

What it does not do: model the learner, the network, or delay in stats reports.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from rstar2.config import ConfigError
from rstar2.scheduler.dispatcher import Dispatcher, NewTrajectory, Placement
from rstar2.scheduler.length_predictor import LengthPredictor
from rstar2.scheduler.policy import Policy
from sim.bound import bound_parts, sticky_bound
from sim.cluster import Cluster
from sim.engine import BLOCK, EngineModel, Request
from sim.events import PRIORITY_ENGINE, PRIORITY_TOOL, EventLoop
from sim.tool_workers import ToolWorkers
from sim.workload import TrajectorySpec

ProgressFn = Callable[[int, int, float], None]
"""progress(finished trajectories, total, simulated seconds)."""


@dataclass
class SimResult:
    """What one run measured. `summary()` holds the keys printed by `rstar2 sim --json`."""

    policy: str
    makespan_s: float
    lower_bound_s: float
    preemptions: int
    recomputed_tokens: int
    generated_tokens: int
    prefill_tokens: int
    cache_hit_tokens: int
    events: int
    wall_s: float
    tool_wait_s: float
    queue_wait_s: float
    busy_s: list[float]
    kv_capacity_blocks: int
    max_used_blocks: list[int]
    kv_timelines: list[list[tuple[float, int]]] = field(repr=False)
    engine_of: list[int] = field(default_factory=list, repr=False)
    """The engine that served each trajectory's last turn, in workload order."""
    sticky_bound_s: float | None = None
    """Lower bound given where each trajectory ran (`sim.bound.sticky_bound`, never below
    `lower_bound_s`); None when a turn moved to another engine."""
    spread_floor_s: float = 0.0
    """What no even length-blind sticky split beats (`sim.bound.BoundParts.spread_floor_s`)."""

    @property
    def ratio_to_bound(self) -> float:
        return self.makespan_s / self.lower_bound_s

    @property
    def idle_fraction(self) -> float:
        total = self.makespan_s * len(self.busy_s)
        return 1.0 - sum(self.busy_s) / total if total > 0 else 0.0

    @property
    def idle_fractions(self) -> list[float]:
        if self.makespan_s <= 0:
            return [0.0 for _ in self.busy_s]
        return [1.0 - b / self.makespan_s for b in self.busy_s]

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.makespan_s if self.makespan_s > 0 else 0.0

    @property
    def kv_utilisation(self) -> float:
        """Time-averaged fraction of KV blocks in use, over all engines and the makespan."""
        if self.makespan_s <= 0:
            return 0.0
        area = 0.0
        for line in self.kv_timelines:
            for (t0, used), (t1, _) in zip(line, line[1:], strict=False):
                area += used * (min(t1, self.makespan_s) - min(t0, self.makespan_s))
        return area / (self.kv_capacity_blocks * self.makespan_s * len(self.kv_timelines))

    def summary(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "makespan_s": round(self.makespan_s, 3),
            "lower_bound_s": round(self.lower_bound_s, 3),
            "ratio_to_bound": round(self.ratio_to_bound, 4),
            "preemptions": self.preemptions,
            "recomputed_tokens": self.recomputed_tokens,
            "idle_fraction": round(self.idle_fraction, 4),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "events": self.events,
            "wall_s": round(self.wall_s, 3),
        }


@dataclass(slots=True)
class Released:
    """A trajectory submitted to the dispatch core and not yet finished (`Playback` forgets it
    when it finishes)."""

    spec: TrajectorySpec
    ready_s: float
    """When it was submitted."""
    context: int
    """Tokens its next turn starts from: the prompt, earlier turns and tool output."""
    turn: int = 0
    """The turn it is at."""
    engine: int = -1
    """The engine of its latest turn (-1: none yet)."""


class Playback:
    """The rollout side on a virtual clock: engines, the dispatch core, the tool workers and the
    trajectories released and not yet finished. Subclasses say what is released when
    (`_start`, `_release`) and what a finished trajectory means (`_trajectory_done`); state is
    kept per trajectory in flight only, so memory follows the work in flight."""

    def __init__(
        self,
        policy: Policy,
        cluster: Cluster,
        total: int,
        *,
        progress: ProgressFn | None = None,
        move_turns: bool = True,
        predictor: LengthPredictor | None = None,
        record: bool = False,
        tool_workers: int | None = None,
        timeline: bool = True,
    ) -> None:
        if policy.num_engines != cluster.num_engines:
            raise ValueError(
                f"policy built for {policy.num_engines} engines, not {cluster.num_engines}"
            )
        num_blocks = cluster.kv_tokens // BLOCK
        cost, max_num_seqs = cluster.cost, cluster.max_num_seqs
        self.policy = policy
        self.core = Dispatcher(
            policy, move_turns=move_turns, predictor=predictor or LengthPredictor(), record=record
        )
        self.cost = cost
        self.kv_tokens = num_blocks * BLOCK
        self.max_num_seqs = max_num_seqs
        self.engines = [
            EngineModel(e, num_blocks, cost, max_num_seqs, timeline)
            for e in range(cluster.num_engines)
        ]
        self.loop = EventLoop()
        self.tools = ToolWorkers(tool_workers)
        self.progress = progress
        self._total = total
        """Trajectories the run plays."""
        self._live: dict[int, Released] = {}
        self._index: dict[str, int] = {}  # traj_id -> its key in _live
        self._moved_turns = 0
        self._finished = 0
        self._makespan = 0.0
        self._tool_wait = 0.0
        self._queue_wait = 0.0
        self._report_every = max(1, total // 100)

    def _check_fits(self, specs: Iterable[TrajectorySpec]) -> None:
        """Every trajectory can reach its full length on one engine (a ConfigError of
        `kv_tokens` otherwise)."""
        for spec in specs:
            need = spec.prompt_tokens + spec.max_response_tokens
            if need > self.kv_tokens:
                raise ConfigError(
                    "kv_tokens",
                    self.kv_tokens,
                    f">= {need}: trajectory {spec.traj_id} may reach {need} tokens (its prompt "
                    f"and max_response_tokens), more than one engine's KV (whole {BLOCK}-token "
                    "blocks)",
                )

    def _play(self) -> None:
        """Run the event loop until nothing is left; every trajectory must have finished."""
        for engine in self.engines:
            self._place(self.core.report(engine.engine_id, engine.stats()), 0.0)
        self._start()
        while (event := self.loop.pop()) is not None:
            now, priority, payload = event
            if priority == PRIORITY_TOOL:
                self._tool_done(payload, now)
            elif priority == PRIORITY_ENGINE:
                engine_id, version = payload
                engine = self.engines[engine_id]
                if version != engine.version:
                    continue
                self._engine_decides(engine, now)
            else:
                self._control(payload, now)
        if self._finished != self._total:
            raise RuntimeError(f"stalled: {self._finished}/{self._total} finished")
        if self.progress is not None and self._finished % self._report_every != 0:
            self.progress(self._finished, self._finished, self._makespan)

    def _start(self) -> None:
        """Release what is released at time 0."""
        raise NotImplementedError

    def _release(self, trajectories: Iterable[tuple[int, TrajectorySpec]], now: float) -> None:
        """Submit these trajectories (each with its key, unique in the run) to the dispatch core
        at `now`."""
        new = []
        for i, s in trajectories:
            if s.traj_id in self._index:
                raise ValueError(f"trajectory id {s.traj_id!r} is released twice")
            self._index[s.traj_id] = i
            self._live[i] = Released(s, now, s.prompt_tokens)
            new.append(
                NewTrajectory(
                    s.traj_id, s.prompt_id, s.prompt_tokens, s.prompt_tokens + s.max_response_tokens
                )
            )
        self._place(self.core.submit(new), now)

    def _control(self, payload: object, now: float) -> None:
        """An event of another priority (`sim.events.PRIORITY_CONTROL`); one step has none."""
        raise AssertionError(f"unexpected control event {payload!r} at {now}")

    def _trajectory_done(self, i: int, traj: Released, now: float) -> None:
        """Trajectory `i` finished at `now` (`traj`: its last state, already forgotten)."""

    def _place(self, placements: list[Placement], now: float) -> None:
        """Submit each placed turn to its engine; the engine's fresh report may place more."""
        todo = deque(placements)
        while todo:
            p = todo.popleft()
            i = self._index[p.traj_id]
            if p.turn == 0:
                self._queue_wait += now - self._live[i].ready_s
            todo.extend(self._submit(i, p.engine, now))

    def _submit(self, i: int, engine_id: int, now: float) -> list[Placement]:
        traj = self._live[i]
        spec, turn = traj.spec, traj.turn
        req = Request(
            i,
            spec.prompt_id,
            spec.prompt_tokens,
            traj.context,
            spec.turns[turn].model_tokens,
            final=turn == len(spec.turns) - 1,
            first_turn=turn == 0,
        )
        if traj.engine not in (-1, engine_id):
            self._moved_turns += 1
        traj.engine = engine_id
        engine = self.engines[engine_id]
        wake = engine.submit(req, now)
        if wake is not None:
            self.loop.schedule(wake, PRIORITY_ENGINE, (engine_id, engine.version))
        return self.core.report(engine_id, engine.stats())

    def _engine_decides(self, engine: EngineModel, now: float) -> None:
        for req in engine.boundary(now):
            self._place(self._turn_done(req.traj, engine, now), now)
        if engine.wake_at is not None:
            self.loop.schedule(engine.wake_at, PRIORITY_ENGINE, (engine.engine_id, engine.version))
        self._place(self.core.report(engine.engine_id, engine.stats()), now)

    def _turn_done(self, i: int, engine: EngineModel, now: float) -> list[Placement]:
        traj = self._live[i]
        spec = traj.spec
        turn = spec.turns[traj.turn]
        if traj.turn == len(spec.turns) - 1:
            engine.drop_cache(i)
            self._finished += 1
            self._makespan = now
            if self.progress is not None and self._finished % self._report_every == 0:
                self.progress(self._finished, self._total, now)
            placed = self.core.finish(spec.traj_id, spec.total_tokens - spec.prompt_tokens)
            del self._live[i], self._index[spec.traj_id]
            self._trajectory_done(i, traj, now)
            return placed
        traj.context += turn.model_tokens
        done_at = self.tools.call(now, turn.tool_latency_s)
        self._tool_wait += done_at - now
        self.loop.schedule(done_at, PRIORITY_TOOL, i)
        return self.core.turn_end(spec.traj_id, traj.turn)

    def _tool_done(self, i: int, now: float) -> None:
        traj = self._live[i]
        traj.context += traj.spec.turns[traj.turn].tool_tokens
        traj.turn += 1
        if self.core.asks_later_turns:  # as the live graph: the worker asks the scheduler
            self._place(self.core.next_turn(traj.spec.traj_id, traj.turn, traj.context), now)
        else:  # the turn stays on its engine, nobody is asked
            self._place(self._submit(i, traj.engine, now), now)


class Simulation(Playback):
    """One RL step: every trajectory of `workload` released at time 0. Build it, call `run()`
    once."""

    def __init__(
        self,
        policy: Policy,
        workload: Sequence[TrajectorySpec],
        cluster: Cluster,
        *,
        progress: ProgressFn | None = None,
        move_turns: bool = True,
        predictor: LengthPredictor | None = None,
        record: bool = False,
        tool_workers: int | None = None,
    ) -> None:
        super().__init__(
            policy, cluster, len(workload), progress=progress, move_turns=move_turns,
            predictor=predictor, record=record, tool_workers=tool_workers,
        )  # fmt: skip
        if not workload:
            raise ValueError("empty workload")
        self._check_fits(workload)
        self.workload = list(workload)
        if len({spec.traj_id for spec in self.workload}) != len(self.workload):
            raise ValueError("trajectory ids in the workload are not unique")
        self._engine_of = [-1] * len(self.workload)

    def run(self) -> SimResult:
        start = time.perf_counter()
        self._play()
        return self._result(time.perf_counter() - start)

    def _start(self) -> None:
        self._release(enumerate(self.workload), 0.0)

    def _trajectory_done(self, i: int, traj: Released, now: float) -> None:
        self._engine_of[i] = traj.engine

    def _result(self, wall_s: float) -> SimResult:
        engines = self.engines
        shape = (len(engines), self.kv_tokens, self.max_num_seqs)
        parts = bound_parts(self.workload, self.cost, *shape)
        return SimResult(
            policy=self.policy.name,
            makespan_s=self._makespan,
            lower_bound_s=parts.bound_s,
            preemptions=sum(e.preemptions for e in engines),
            recomputed_tokens=sum(e.recomputed_tokens for e in engines),
            generated_tokens=sum(e.generated_tokens for e in engines),
            prefill_tokens=sum(e.prefill_tokens for e in engines),
            cache_hit_tokens=sum(e.cache_hit_tokens for e in engines),
            events=self.loop.popped,
            wall_s=wall_s,
            tool_wait_s=self._tool_wait,
            queue_wait_s=self._queue_wait,
            busy_s=[e.busy_s for e in engines],
            kv_capacity_blocks=engines[0].num_blocks,
            max_used_blocks=[e.max_used_blocks for e in engines],
            kv_timelines=[e.kv_timeline for e in engines],
            engine_of=list(self._engine_of),
            sticky_bound_s=None
            if self._moved_turns
            else max(
                parts.bound_s, sticky_bound(self.workload, self.cost, self._engine_of, *shape)
            ),
            spread_floor_s=parts.spread_floor_s,
        )
