"""Where a policy update's time goes: forward, backward, optimizer and LM head, on demand.

`rstar2 bench learner` reports the split of an update (`--json` key `time_split_s`). The update
code marks its phases with `phase(name)`; they cost nothing unless a `StepTimer` is active
(`with StepTimer(device) as timer:`), and then each phase synchronises the device on entry and
exit, so GPU time lands in the phase that queued it. Phases nest: the LM head's
(`head_forward`, `head_backward`) are inside `forward` and `backward`.

The synchronisations slow the update a little, so the benchmark times its updates without a
timer and measures the split on one more update.

What it does not do: profile kernels (use `rstar2 profile`, or torch.profiler).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_active: StepTimer | None = None


class StepTimer:
    """Seconds spent in each named phase while active (one at a time per process)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = {}

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __enter__(self) -> StepTimer:
        global _active
        if _active is not None:
            raise RuntimeError("a StepTimer is already active")
        _active = self
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        _active = None


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block into the active `StepTimer`'s `name`; nothing without one."""
    timer = _active
    if timer is None:
        yield
        return
    timer._sync()
    start = time.perf_counter()
    try:
        yield
    finally:
        timer._sync()
        timer.seconds[name] = timer.seconds.get(name, 0.0) + time.perf_counter() - start
