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

What it does not do: model the learner, the network, or delay in stats reports. Several
steps with a learner and weight pushes between them: `sim.training_run.TrainingRun`, which
extends this class through its hooks (`_start`, `_submit`, `_control`, `_trajectory_done`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rstar2.scheduler.dispatcher import Dispatcher, NewTrajectory, Placement
from rstar2.scheduler.length_predictor import LengthPredictor
from rstar2.scheduler.policy import Policy
from sim.bound import bound_parts, sticky_bound
from sim.cost import CostModel
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


class Simulation:
    """A single run. Build it, call `run()` once."""

    def __init__(
        self,
        policy: Policy,
        workload: Sequence[TrajectorySpec],
        num_engines: int,
        kv_tokens: int,
        cost: CostModel,
        max_num_seqs: int = 256,
        progress: ProgressFn | None = None,
        move_turns: bool = True,
        predictor: LengthPredictor | None = None,
        record: bool = False,
        tool_workers: int | None = None,
    ) -> None:
        if policy.num_engines != num_engines:
            raise ValueError(f"policy built for {policy.num_engines} engines, not {num_engines}")
        if not workload:
            raise ValueError("empty workload")
        num_blocks = kv_tokens // BLOCK
        for spec in workload:
            if spec.prompt_tokens + spec.max_response_tokens > num_blocks * BLOCK:
                raise ValueError(
                    f"trajectory {spec.traj_id} may reach {spec.prompt_tokens + spec.max_response_tokens}"
                    f" tokens, more than one engine's KV ({num_blocks * BLOCK} tokens)"
                )
        self.policy = policy
        self.core = Dispatcher(
            policy, move_turns=move_turns, predictor=predictor or LengthPredictor(), record=record
        )
        self.workload = list(workload)
        self.cost = cost
        self.kv_tokens = num_blocks * BLOCK
        self.max_num_seqs = max_num_seqs
        self.engines = [EngineModel(e, num_blocks, cost, max_num_seqs) for e in range(num_engines)]
        self.loop = EventLoop()
        self.tools = ToolWorkers(tool_workers)
        self.progress = progress
        n = len(self.workload)
        self._index = {spec.traj_id: i for i, spec in enumerate(self.workload)}
        if len(self._index) != n:
            raise ValueError("trajectory ids in the workload are not unique")
        self._turn = [0] * n
        self._engine_of = [-1] * n
        self._moved_turns = 0
        self._context = [s.prompt_tokens for s in self.workload]
        self._ready = [0.0] * n  # when each trajectory was submitted to the dispatch core
        self._finished = 0
        self._makespan = 0.0
        self._tool_wait = 0.0
        self._queue_wait = 0.0
        self._report_every = max(1, n // 100)

    def run(self) -> SimResult:
        start = time.perf_counter()
        self._play()
        return self._result(time.perf_counter() - start)

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
        if self._finished != len(self.workload):
            raise RuntimeError(f"stalled: {self._finished}/{len(self.workload)} finished")
        if self.progress is not None and self._finished % self._report_every != 0:
            self.progress(self._finished, self._finished, self._makespan)

    def _start(self) -> None:
        """Submit the trajectories at time 0 (one step: all of them)."""
        self._release(range(len(self.workload)), 0.0)

    def _release(self, indices: range, now: float) -> None:
        """Submit these trajectories (workload indices) to the dispatch core at `now`."""
        new = []
        for i in indices:
            s = self.workload[i]
            self._ready[i] = now
            new.append(
                NewTrajectory(
                    s.traj_id, s.prompt_id, s.prompt_tokens, s.prompt_tokens + s.max_response_tokens
                )
            )
        self._place(self.core.submit(new), now)

    def _control(self, payload: object, now: float) -> None:
        """An event of another priority (`sim.events.PRIORITY_CONTROL`); one step has none."""
        raise AssertionError(f"unexpected control event {payload!r} at {now}")

    def _trajectory_done(self, i: int, now: float) -> None:
        """Workload trajectory `i` finished at `now` (one step: nothing to do)."""

    def _place(self, placements: list[Placement], now: float) -> None:
        """Submit each placed turn to its engine; the engine's fresh report may place more."""
        todo = deque(placements)
        while todo:
            p = todo.popleft()
            i = self._index[p.traj_id]
            if p.turn == 0:
                self._queue_wait += now - self._ready[i]
            todo.extend(self._submit(i, p.engine, now))

    def _submit(self, i: int, engine_id: int, now: float) -> list[Placement]:
        spec = self.workload[i]
        turn = self._turn[i]
        req = Request(
            i,
            spec.prompt_id,
            spec.prompt_tokens,
            self._context[i],
            spec.turns[turn].model_tokens,
            final=turn == len(spec.turns) - 1,
            first_turn=turn == 0,
        )
        if self._engine_of[i] not in (-1, engine_id):
            self._moved_turns += 1
        self._engine_of[i] = engine_id
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
        spec = self.workload[i]
        turn = spec.turns[self._turn[i]]
        if self._turn[i] == len(spec.turns) - 1:
            engine.drop_cache(i)
            self._finished += 1
            self._makespan = now
            if self.progress is not None and self._finished % self._report_every == 0:
                self.progress(self._finished, len(self.workload), now)
            placed = self.core.finish(spec.traj_id, spec.total_tokens - spec.prompt_tokens)
            self._trajectory_done(i, now)
            return placed
        self._context[i] += turn.model_tokens
        done_at = self.tools.call(now, turn.tool_latency_s)
        self._tool_wait += done_at - now
        self.loop.schedule(done_at, PRIORITY_TOOL, i)
        return self.core.turn_end(spec.traj_id, self._turn[i])

    def _tool_done(self, i: int, now: float) -> None:
        spec = self.workload[i]
        self._context[i] += spec.turns[self._turn[i]].tool_tokens
        self._turn[i] += 1
        if self.core.asks_later_turns:  # as the live graph: the worker asks the scheduler
            self._place(self.core.next_turn(spec.traj_id, self._turn[i], self._context[i]), now)
        else:  # the turn stays on its engine, nobody is asked
            self._place(self._submit(i, self._engine_of[i], now), now)

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
