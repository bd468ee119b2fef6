"""Static even split: the VERL v0.2 baseline that rStar2 replaced.

All trajectories of the step are divided up front into contiguous, equal chunks, one per engine
(trajectory i of n goes to engine i * E // n), and every turn of a trajectory stays on its
engine. Nothing is ever held: each engine receives its whole chunk at once and admits it the way
vLLM does (as many as its KV blocks allow, preempting the newest request when blocks run out).
It ignores engine stats entirely; that is the point of the baseline.

A trajectory that was not in `prepare`'s batch is placed round-robin.
"""

from __future__ import annotations

from collections.abc import Sequence

from rstar2.scheduler.policy import Policy, TurnRequest


def contiguous_engine(index: int, count: int, num_engines: int) -> int:
    """Engine of the `index`-th of `count` trajectories in a contiguous even split."""
    return index * num_engines // count


class StaticSplit(Policy):
    name = "static"

    def __init__(self, num_engines: int) -> None:
        super().__init__(num_engines)
        self._engine_of: dict[str, int] = {}
        self._next_extra = 0

    def prepare(self, batch: Sequence[TurnRequest]) -> None:
        n = len(batch)
        for i, req in enumerate(batch):
            self._engine_of[req.traj_id] = contiguous_engine(i, n, self.num_engines)

    def assign(self, req: TurnRequest) -> int:
        engine = self._engine_of.get(req.traj_id)
        if engine is None:
            engine = self._next_extra % self.num_engines
            self._next_extra += 1
            self._engine_of[req.traj_id] = engine
        return engine

    def on_finish(self, traj_id: str) -> None:
        self._engine_of.pop(traj_id, None)
