"""CPU contention for benchmarks: N busy-loop processes for the duration of a `with` block.

`rstar2 bench engine --contention N` runs its measurement beside N processes that each spin
on one core (`while True: pass`, a fresh interpreter started with `-I -S`), so a figure taken
"under load" can be reproduced instead of depending on whatever else the machine was doing.
They are started before the measurement and killed (and reaped) when the block exits, also on
an error or Ctrl-C.

What it does not do: pin the processes to cores, or measure the load they cause (the commands
report the load average next to their figures).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

BUSY_LOOP = "while True: pass"


@contextmanager
def busy_processes(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`n` processes spinning on the CPU while the block runs (none for n = 0)."""
    if n < 0:
        raise ValueError(f"the number of busy processes must be >= 0, got {n}")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", BUSY_LOOP],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def load_average() -> float:
    """The 1-minute load average (runnable processes, this one and its busy ones included)."""
    return round(os.getloadavg()[0], 2)
