"""Busy-loop processes for `--contention`: running inside the block, gone after it."""

from __future__ import annotations

import time

import pytest

from rstar2.commands.bench_contention import busy_processes


def _cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_busy_processes_spin_while_the_block_runs_and_are_reaped_after() -> None:
    with busy_processes(2) as procs:
        assert len(procs) == 2
        time.sleep(0.5)
        assert all(p.poll() is None for p in procs)
        assert all(_cpu_ticks(p.pid) > 0 for p in procs)  # spinning, not sleeping
    assert all(p.returncode is not None for p in procs)


def test_busy_processes_are_stopped_when_the_block_fails() -> None:
    with pytest.raises(RuntimeError), busy_processes(1) as procs:
        raise RuntimeError("the benchmark failed")
    assert procs[0].returncode is not None


def test_no_busy_processes_and_a_negative_count() -> None:
    with busy_processes(0) as procs:
        assert procs == []
    with pytest.raises(ValueError, match=">= 0"), busy_processes(-1):
        pass
