"""The rollout worker's event-loop CPU clock per step of rollouts."""

from __future__ import annotations

import threading
import time

from rstar2.rollout.loop_clock import LoopClock


class Ticks:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_window_runs_from_its_first_task_and_later_tasks_do_not_restart_it() -> None:
    ticks = Ticks()
    clock = LoopClock(clock=ticks)
    ticks.now = 10.0
    clock.open((3, "train"))
    ticks.now = 11.5
    clock.open((3, "train"))  # a later task of the same step
    clock.open((3, "eval"))  # another kind: a window of its own
    ticks.now = 12.0
    assert clock.since((3, "train")) == 2.0
    assert clock.since((3, "eval")) == 0.5
    assert clock.since((4, "train")) == 0.0  # never opened


def test_only_the_newest_windows_are_kept() -> None:
    ticks = Ticks()
    clock = LoopClock(keep=2, clock=ticks)
    for step in (1, 2, 3):
        clock.open((step, "train"))
    ticks.now = 1.0
    assert list(clock.starts) == [(2, "train"), (3, "train")]
    assert clock.since((1, "train")) == 0.0 and clock.since((3, "train")) == 1.0


def test_it_counts_this_threads_cpu_not_another_threads() -> None:
    clock = LoopClock()  # time.thread_time
    clock.open((0, "train"))
    stop = time.perf_counter() + 0.3

    def spin() -> None:
        while time.perf_counter() < stop:
            pass

    other = threading.Thread(target=spin)
    other.start()
    other.join()  # this thread waits (no CPU) while the other one spins for 0.3 s
    assert clock.since((0, "train")) < 0.1
    start = time.thread_time()
    while time.thread_time() - start < 0.2:  # now this thread spends 0.2 s of CPU
        pass
    assert clock.since((0, "train")) >= 0.2
