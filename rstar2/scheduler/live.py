"""The live scheduler's decisions as plain methods: wire messages in, starts and routes out.

`LiveDispatch` turns each message the scheduler actor receives into an event of the dispatch
core (`rstar2.scheduler.dispatcher.Dispatcher`) and the core's placements back into what the
actor sends:

- `RolloutBatch` -> ``submit``; an `EngineReport` -> ``report``;
- `TurnEnded` (a worker's turn ended in a tool call) -> its report, then ``turn_end``;
- `TurnRoute` (a worker asks where a later turn runs) -> its report, then ``next_turn``;
- `TrajectoryResult` (the assign request's reply) -> its engine's load, then ``finish``.

Each returns the trajectories that start now, as ``(engine, RolloutTask)`` pairs (`route` also
returns the turn's engine). The actor only moves messages; tests call these methods directly,
and replay the simulator's recorded event log through them (same decisions as the simulator).

What it does not do: send, wait or time anything.
"""

from __future__ import annotations

from rstar2.scheduler.dispatcher import Dispatcher, NewTrajectory, Placement
from rstar2.wire import (
    EngineReport,
    RolloutBatch,
    RolloutTask,
    TrajectoryResult,
    TurnEnded,
    TurnRoute,
)

Start = tuple[int, RolloutTask]
"""A trajectory to start: (engine, task)."""


class LiveDispatch:
    """The scheduler actor's synchronous core (see the module docstring)."""

    def __init__(self, dispatcher: Dispatcher, max_response_tokens: int) -> None:
        if max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be >= 1, got {max_response_tokens}")
        self.dispatcher = dispatcher
        self.max_response_tokens = max_response_tokens
        self._tasks: dict[str, RolloutTask] = {}
        """Tasks queued or running, by trajectory id."""

    def batch(self, msg: RolloutBatch) -> list[Start]:
        new = [self._trajectory(t) for t in msg.tasks]
        placed = self.dispatcher.submit(new)
        self._tasks.update((t.traj_id, t) for t in msg.tasks)
        return self._starts(placed)

    def report(self, msg: EngineReport) -> list[Start]:
        return self._starts(self.dispatcher.report(msg.engine, msg.load))

    def turn_ended(self, msg: TurnEnded) -> list[Start]:
        placed = self._carried(msg.report)
        return self._starts(placed + self.dispatcher.turn_end(msg.traj_id, msg.turn))

    def route(self, msg: TurnRoute) -> tuple[int, list[Start]]:
        """The engine of the asked turn, and what starts now."""
        placed = self._carried(msg.report)
        routed = self.dispatcher.next_turn(msg.traj_id, msg.turn, msg.context_tokens)
        return routed[0].engine, self._starts(placed + routed[1:])

    def finished(self, msg: TrajectoryResult) -> list[Start]:
        carried = None
        if msg.engine >= 0 and msg.load is not None:
            carried = EngineReport(msg.engine, msg.load)
        placed = self._carried(carried)
        self._tasks.pop(msg.traj_id, None)
        response = msg.trajectory.response_tokens
        return self._starts(placed + self.dispatcher.finish(msg.traj_id, response))

    def _carried(self, report: EngineReport | None) -> list[Placement]:
        """The report a message carries, filed before the message's own event."""
        return [] if report is None else self.dispatcher.report(report.engine, report.load)

    def _trajectory(self, task: RolloutTask) -> NewTrajectory:
        budget = task.max_response_tokens or self.max_response_tokens
        prompt = len(task.prompt_ids)
        return NewTrajectory(task.traj_id, task.prompt_id, prompt, prompt + budget)

    def _starts(self, placed: list[Placement]) -> list[Start]:
        return [(p.engine, self._tasks[p.traj_id]) for p in placed if p.turn == 0]
