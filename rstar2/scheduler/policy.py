"""The rollout scheduling policy interface shared by the live scheduler actor and the simulator.

A policy decides which rollout engine serves each turn of each trajectory. It is pure,
synchronous and deterministic (vLLM scheduler style): it sees only what it is told through the
five calls below and never sleeps, does I/O or reads a clock, so the live scheduler actor and the
discrete-event simulator (`sim/`) run the very same objects.

The calls, in the order a caller makes them:

- ``prepare(batch)``: once per RL step, with the first-turn request of every trajectory of the
  step (policies that split work up front, such as the static split, use it; others ignore it).
- ``assign(req) -> engine_id | None``: route one turn. ``req.turn == 0`` is a new trajectory,
  ``req.turn > 0`` the next turn of one already placed (after its tool call returned). ``None``
  means "hold it": the caller keeps the request in a FIFO queue and asks again later (after an
  ``on_finish`` or ``on_stats``). A caller stops at the first held request (no overtaking).
- ``on_stats(engine_id, stats)``: the latest engine report (`rstar2.wire.EngineLoad`).
- ``on_turn_end(traj_id)``: the engine returned the turn's tokens (a tool call may follow).
- ``on_finish(traj_id)``: the trajectory is complete; release whatever was held for it.

What it does not do: talk to engines, queue requests, or time anything. Its one caller is
`rstar2.scheduler.dispatcher.Dispatcher`, the dispatch core that the scheduler actor and the
simulator (`sim.simulator.Simulation`) both drive.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rstar2.wire import EngineLoad


@dataclass(frozen=True)
class TurnRequest:
    """One generation request: a turn of a trajectory, as the scheduler sees it."""

    traj_id: str
    """Unique id of the trajectory (all its turns share it)."""
    prompt_id: str
    """Id of the prompt; the N rollouts of a prompt share it (and their prompt prefix)."""
    turn: int
    """0 for the first turn (a new trajectory), k for the turn after the k-th tool call."""
    context_tokens: int
    """Tokens the engine must hold before generating: prompt plus all earlier turns and tool output."""
    prompt_tokens: int
    """Length of the prompt alone."""
    max_total_tokens: int
    """Upper bound on the trajectory's final length: prompt plus the whole response budget."""
    predicted_total_tokens: int | None = None
    """A predicted final length, when the caller has one (used by reservation mode 'predicted')."""

    def __post_init__(self) -> None:
        if self.turn < 0:
            raise ValueError(f"turn must be >= 0, got {self.turn}")
        if not 0 < self.prompt_tokens <= self.context_tokens:
            raise ValueError(
                f"need 0 < prompt_tokens <= context_tokens, got {self.prompt_tokens}, "
                f"{self.context_tokens}"
            )
        if self.max_total_tokens < self.context_tokens:
            raise ValueError(
                f"max_total_tokens {self.max_total_tokens} < context_tokens {self.context_tokens}"
            )


class Policy:
    """Base class: the interface with harmless defaults. Subclasses override `assign`."""

    name: str = "base"

    def __init__(self, num_engines: int) -> None:
        if isinstance(num_engines, bool) or not isinstance(num_engines, int) or num_engines < 1:
            raise ValueError(f"num_engines must be a positive int, got {num_engines!r}")
        self.num_engines = num_engines
        self.stats: list[EngineLoad | None] = [None] * num_engines

    def prepare(self, batch: Sequence[TurnRequest]) -> None:
        """Called once per RL step with every trajectory's first turn; default: nothing."""

    def assign(self, req: TurnRequest) -> int | None:
        """The engine that serves this turn, or None to hold it in the caller's queue."""
        raise NotImplementedError

    def on_stats(self, engine_id: int, stats: EngineLoad) -> None:
        """Record the latest report of one engine."""
        self._check_engine(engine_id)
        self.stats[engine_id] = stats

    def on_turn_end(self, traj_id: str) -> None:
        """The engine returned this turn; default: nothing."""

    def on_finish(self, traj_id: str) -> None:
        """The trajectory is done; default: nothing."""

    def _check_engine(self, engine_id: int) -> None:
        if isinstance(engine_id, bool) or not isinstance(engine_id, int):
            raise TypeError(f"engine_id must be an int, got {engine_id!r}")
        if not 0 <= engine_id < self.num_engines:
            raise ValueError(f"engine_id {engine_id} outside 0..{self.num_engines - 1}")


def is_saturated(stats: EngineLoad | None, need_tokens: int) -> bool:
    """True when an engine cannot take `need_tokens` more context without queueing or evicting.

    Saturated means the free KV does not cover this request plus, counted at the same size,
    every request already waiting for KV: ``kv_free < need * (1 + waiting)``. (Waiting alone is
    no sign: a request just submitted waits until the engine's next step.) Sticky policies use
    this to break stickiness: a turn is moved off its engine rather than locked onto one that
    would preempt (the consistent-hash thrash seen in prime-rl). Unknown engines (no report
    yet) are not saturated.
    """
    if stats is None:
        return False
    return stats.kv_free_tokens < need_tokens * (1 + stats.waiting)
