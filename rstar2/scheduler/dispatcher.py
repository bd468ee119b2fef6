"""The dispatch core: the one caller of a scheduling policy, live and simulated.

`Dispatcher` is synchronous and does no I/O. It takes events and returns decisions; the live
scheduler actor (`rstar2.scheduler.live`, messages in and out) and the simulator's event loop
(`sim.simulator`, a virtual clock) both drive it, so a policy sees the same calls in the same
order whichever drives it. The events, and what each returns:

- ``submit(trajectories)``: a step's new trajectories; the policy's ``prepare`` sees them all,
  then they queue (FIFO) for admission;
- ``report(engine, load)``: an engine's latest load (`rstar2.wire.EngineLoad`);
- ``turn_end(traj_id, turn)``: the engine returned turn `turn` and a tool call follows (the
  policy's ``on_turn_end``; a late or repeated one is ignored);
- ``next_turn(traj_id, turn, context_tokens)``: the tool answered; where does turn `turn` run?
  Asked only when `asks_later_turns` (``move_turns`` and more than one engine): otherwise every
  turn stays on the trajectory's engine and nobody asks;
- ``finish(traj_id, response_tokens)``: the trajectory is complete (its last turn ends, the
  policy's ``on_finish``, the length predictor learns its length).

Every event returns a list of `Placement`s: for ``next_turn`` its own turn first, then every
queued trajectory that can start now (any event may have made room). A trajectory starts on the
engine the policy's ``assign`` names; when the policy holds it (None) and some engine has no
trajectory at all, it starts there (a reservation bigger than a whole KV pool cannot deadlock a
step); otherwise the queue stops at it (no overtaking). A later turn is never held: when the
policy would hold it, it continues on its engine.

The policy's ``on_turn_end`` is called exactly once for each turn it assigned, at that turn's
``turn_end``, or at the next event of the trajectory when the turn end came late or not at all,
so per-engine counters (``LeastOutstanding.outstanding``, ``PrefixAware.load``) return to zero
when a step's trajectories have all finished.

With `record=True` every event and its decisions are appended to `events` (an `Event` list),
which can be replayed through another driver (`replay`).

What it does not do: send anything, time anything, or decide where a trajectory goes (the
policy does).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from rstar2.scheduler.length_predictor import LengthPredictor
from rstar2.scheduler.policy import Policy, TurnRequest
from rstar2.wire import EngineLoad


@dataclass(frozen=True)
class NewTrajectory:
    """A trajectory to admit, as the dispatch core sees it."""

    traj_id: str
    prompt_id: str
    prompt_tokens: int
    max_total_tokens: int
    """Prompt plus the whole response budget."""

    def __post_init__(self) -> None:
        if not 0 < self.prompt_tokens <= self.max_total_tokens:
            raise ValueError(
                f"trajectory {self.traj_id!r}: need 0 < prompt_tokens <= max_total_tokens, got "
                f"{self.prompt_tokens}, {self.max_total_tokens}"
            )


@dataclass(frozen=True)
class Placement:
    """A decision: turn `turn` of trajectory `traj_id` runs on engine `engine` (turn 0: the
    trajectory starts there)."""

    traj_id: str
    engine: int
    turn: int


@dataclass(frozen=True)
class Event:
    """One recorded call: its name, its arguments and the placements it returned."""

    kind: str
    args: tuple[object, ...]
    placements: tuple[Placement, ...]


@dataclass
class _Running:
    traj: NewTrajectory
    engine: int
    turn: int = 0
    open_turn: bool = True
    """The policy assigned the current turn and has not been told it ended."""


@dataclass
class Dispatcher:
    """FIFO admission of trajectories to engines through a policy (see the module docstring)."""

    policy: Policy
    move_turns: bool = True
    predictor: LengthPredictor = field(default_factory=LengthPredictor)
    record: bool = False
    queue: deque[NewTrajectory] = field(default_factory=deque, init=False)
    running: dict[str, _Running] = field(default_factory=dict, init=False)
    events: list[Event] = field(default_factory=list, init=False)
    _per_engine: list[int] = field(default_factory=list, init=False)
    """Running trajectories by the engine of their latest turn (for the idle fall-back)."""

    def __post_init__(self) -> None:
        self._per_engine = [0] * self.policy.num_engines

    @property
    def asks_later_turns(self) -> bool:
        """Whether later turns are routed through the policy (else they stay where they are)."""
        return self.move_turns and self.policy.num_engines > 1

    def engine_of(self, traj_id: str) -> int | None:
        """The engine of a running trajectory's latest turn (None when not running)."""
        running = self.running.get(traj_id)
        return None if running is None else running.engine

    # --- events -------------------------------------------------------------------------------

    def submit(self, trajectories: Sequence[NewTrajectory]) -> list[Placement]:
        known = {t.traj_id for t in self.queue} | self.running.keys()
        for t in trajectories:
            if t.traj_id in known:
                raise ValueError(f"trajectory {t.traj_id!r} submitted twice")
            known.add(t.traj_id)
        self.policy.prepare([self._request(t, 0, t.prompt_tokens) for t in trajectories])
        self.queue.extend(trajectories)
        return self._done("submit", (tuple(trajectories),), self._admit())

    def report(self, engine: int, load: EngineLoad) -> list[Placement]:
        self.policy.on_stats(engine, load)
        return self._done("report", (engine, load), self._admit())

    def turn_end(self, traj_id: str, turn: int) -> list[Placement]:
        running = self.running.get(traj_id)
        if running is not None and running.turn == turn:
            self._close_turn(traj_id, running)
        return self._done("turn_end", (traj_id, turn), self._admit())

    def next_turn(self, traj_id: str, turn: int, context_tokens: int) -> list[Placement]:
        running = self.running.get(traj_id)
        if running is None:
            raise ValueError(f"trajectory {traj_id!r} is not running")
        if turn != running.turn + 1:
            raise ValueError(f"trajectory {traj_id!r} is at turn {running.turn}, not {turn - 1}")
        self._close_turn(traj_id, running)
        running.turn = turn
        if self.asks_later_turns:
            engine = self.policy.assign(self._request(running.traj, turn, context_tokens))
            if engine is not None and engine != running.engine:
                self._per_engine[running.engine] -= 1
                self._per_engine[engine] += 1
                running.engine = engine
            running.open_turn = True
        placed = [Placement(traj_id, running.engine, turn)]
        return self._done("next_turn", (traj_id, turn, context_tokens), placed + self._admit())

    def finish(self, traj_id: str, response_tokens: int) -> list[Placement]:
        running = self.running.get(traj_id)
        if running is None:
            raise ValueError(f"trajectory {traj_id!r} is not running")
        self._close_turn(traj_id, running)
        del self.running[traj_id]
        self._per_engine[running.engine] -= 1
        self.policy.on_finish(traj_id)
        self.predictor.observe(response_tokens)
        return self._done("finish", (traj_id, response_tokens), self._admit())

    # --- internals ----------------------------------------------------------------------------

    def _close_turn(self, traj_id: str, running: _Running) -> None:
        if running.open_turn:
            running.open_turn = False
            self.policy.on_turn_end(traj_id)

    def _admit(self) -> list[Placement]:
        started = []
        while self.queue:
            traj = self.queue[0]
            engine = self.policy.assign(self._request(traj, 0, traj.prompt_tokens))
            if engine is None:
                engine = self._idle_engine()
            if engine is None:
                break
            self.queue.popleft()
            self.running[traj.traj_id] = _Running(traj, engine)
            self._per_engine[engine] += 1
            started.append(Placement(traj.traj_id, engine, 0))
        return started

    def _idle_engine(self) -> int | None:
        """An engine with no running trajectory, for a trajectory the policy holds back."""
        if len(self.running) >= self.policy.num_engines and min(self._per_engine) > 0:
            return None  # the common case under load, without a scan
        for engine, count in enumerate(self._per_engine):
            if count == 0:
                return engine
        return None

    def _request(self, traj: NewTrajectory, turn: int, context_tokens: int) -> TurnRequest:
        """Turn `turn` of `traj` as the policy sees it, with the predicted length."""
        max_total = max(traj.max_total_tokens, context_tokens)
        return TurnRequest(
            traj_id=traj.traj_id,
            prompt_id=traj.prompt_id,
            turn=turn,
            context_tokens=context_tokens,
            prompt_tokens=traj.prompt_tokens,
            max_total_tokens=max_total,
            predicted_total_tokens=self.predictor.predict(traj.prompt_tokens, max_total),
        )

    def _done(
        self, kind: str, args: tuple[object, ...], placements: list[Placement]
    ) -> list[Placement]:
        if self.record:
            self.events.append(Event(kind, args, tuple(placements)))
        return placements
