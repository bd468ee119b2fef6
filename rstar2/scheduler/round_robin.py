"""Round-robin: every request (every turn) goes to the next engine in a fixed cycle.

Load-blind and not sticky: the turns of one trajectory land on different engines, so each turn
after the first re-prefills the whole context (no prefix-cache reuse). Never holds a request.
"""

from __future__ import annotations

from rstar2.scheduler.policy import Policy, TurnRequest


class RoundRobin(Policy):
    name = "round_robin"

    def __init__(self, num_engines: int) -> None:
        super().__init__(num_engines)
        self._next = 0

    def assign(self, req: TurnRequest) -> int:
        engine = self._next
        self._next = (self._next + 1) % self.num_engines
        return engine
