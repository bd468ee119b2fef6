"""The sandbox as W workers: when a tool call made at `now` returns.

Calls are served first come, first served by `workers` identical workers; a call that finds
them all busy waits for the first to free up, then runs for its own duration (the latency the
workload gives it). Because calls arrive in time order and their durations are known when they
arrive, the FIFO queue is exactly a heap of the workers' free times: the call starts at
``max(now, earliest free time)``. `workers=None` means as many workers as calls (no queueing,
the one-step simulator's historical model).

What it does not do: batch calls (the paper's senders batch up to 64), time out queued calls, or
model a worker's start-up cost.
"""

from __future__ import annotations

import heapq


class ToolWorkers:
    def __init__(self, workers: int | None = None) -> None:
        if workers is not None and workers < 1:
            raise ValueError(f"tool workers must be >= 1 (or None: unlimited), got {workers}")
        self.workers = workers
        self._free_at: list[float] = [0.0] * (workers or 0)
        self.queued_s = 0.0
        """Total time calls waited for a worker."""

    def call(self, now: float, duration_s: float) -> float:
        """A call made at `now` that runs `duration_s` once started: the time it returns."""
        if self.workers is None:
            return now + duration_s
        start = max(now, self._free_at[0])
        self.queued_s += start - now
        heapq.heapreplace(self._free_at, start + duration_s)
        return start + duration_s
