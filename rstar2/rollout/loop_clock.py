"""The rollout worker's clock of its event loop's CPU time, per step of rollouts.

A rollout worker's event loop runs every agent loop of its engine: turns, tool calls, the
token codec, the bus messages. `LoopClock` tells how much of that thread's CPU time went by
since the worker received its first task of a (step, kind): each `TrajectoryResult` carries
it (`loop_cpu_s`), and the largest of a step's results is the busiest worker loop over its
rollout window (`rstar2.train.step_metrics.worker_loop`). Where the worker runs in the
learner's process, that is the learner's loop too; with `graph.worker_processes` it is the
worker's own process, where the training process's `loop_cpu_s` does not look.

`time.thread_time()` is the calling thread's CPU clock, so both calls must come from the
event loop's thread (the worker's coroutines run there).

What it does not do: time anything else (the engine's own thread: `EngineLoad.step_s`).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

Window = tuple[int, str]
"""A step and the kind of its rollouts ("train", "eval", "filter")."""


class LoopClock:
    """The CPU seconds of this thread since each window's first task (the `keep` newest)."""

    def __init__(self, keep: int = 16, clock: Callable[[], float] = time.thread_time) -> None:
        self.keep = keep
        """Windows remembered: with asynchronous RL a few steps' rollouts are in flight."""
        self.clock = clock
        self.starts: OrderedDict[Window, float] = OrderedDict()

    def open(self, window: Window) -> None:
        """A task of `window` arrived: its first starts the window's clock."""
        if window not in self.starts:
            self.starts[window] = self.clock()
            while len(self.starts) > self.keep:
                self.starts.popitem(last=False)

    def since(self, window: Window) -> float:
        """CPU seconds since `window` opened (0.0 for a window forgotten or never opened)."""
        start = self.starts.get(window)
        return 0.0 if start is None else self.clock() - start
