"""The event heap of the simulator: a virtual clock and events keyed (time, priority, seq).

`seq` comes from a per-loop counter, so events at the same time and priority pop in the order
they were scheduled and a run is reproducible (no ids shared between runs, no wall clock). It
does not interpret events: the simulator pops them and decides what each one does.
"""

from __future__ import annotations

import heapq
from typing import Any

PRIORITY_TOOL = 0
"""Tool results at time t are seen before engines decide at t (they may add a request)."""
PRIORITY_ENGINE = 1
PRIORITY_CONTROL = 2
"""Run-level events (a learner update or a weight push ends), after the engines at equal times."""


class EventLoop:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.now = 0.0
        self.popped = 0

    def schedule(self, time: float, priority: int, payload: Any) -> None:
        if time < self.now:
            raise ValueError(f"cannot schedule in the past: {time} < now {self.now}")
        self._seq += 1
        heapq.heappush(self._heap, (time, priority, self._seq, payload))

    def pop(self) -> tuple[float, int, Any] | None:
        """The next event as (time, priority, payload), advancing the clock; None when empty."""
        if not self._heap:
            return None
        time, priority, _, payload = heapq.heappop(self._heap)
        self.now = time
        self.popped += 1
        return time, priority, payload

    def __len__(self) -> int:
        return len(self._heap)
