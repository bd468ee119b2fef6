"""The interpreter's thread switch interval, while an embedded engine's thread shares a process
with the event loop.

CPython lets one thread run Python at a time. A thread that wants the interpreter lock while
another holds it waits for the switch interval (`sys.setswitchinterval`, 5 ms by default)
before it asks the holder to let go. The event loop gives the lock away often: pyzmq releases
it around every frame it sends or receives, so a request and its reply (two frames each way)
cost the requesting side four releases, more when both ends share the loop. Beside an
embedded engine whose thread runs Python most of the time (on a GPU a CUDA graph's replay
returns at once and the engine's step is its host bookkeeping), each of those releases can
cost the loop up to the whole interval: measured on this project's 2-core CPU (`rstar2 bench
bus --busy-thread --round-trips 300`, a thread that only runs Python beside the bus), an
in-process round trip's p50 was 0.24 ms alone and 11.9 ms beside it at 5 ms, 1.9 ms at
0.5 ms, 1.2 ms at 0.1 ms. A shorter interval costs the engine's thread more hand-overs of the
lock, only while the loop waits for it. On that CPU, where the engine mostly computes in torch
(which lets go of the lock), a training run's generation did not measurably change
(docs/production.md, "The interpreter lock"); on a GPU it is to be measured.

- `switch_interval(seconds)`: set the interval for the duration of a `with` block, process
  wide; the value from before the first holder comes back when the last one leaves (the
  rollout workers of one process enter it together: `graph.switch_interval_ms`).

What it does not do: choose the value (the config does; `configs/gpu_20m.toml` sets 0.5 ms),
or touch a process without an embedded engine.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

_holders = 0
_before = 0.0


@contextmanager
def switch_interval(seconds: float) -> Iterator[None]:
    """`sys.setswitchinterval(seconds)` inside the block; the process's earlier value after the
    last block still open leaves (blocks of one event loop may overlap in any order)."""
    global _holders, _before
    if seconds <= 0:
        raise ValueError(f"switch interval must be > 0 seconds, got {seconds}")
    if _holders == 0:
        _before = sys.getswitchinterval()
    _holders += 1
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        _holders -= 1
        if _holders == 0:
            sys.setswitchinterval(_before)
