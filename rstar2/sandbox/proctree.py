"""A process and its descendants, read from /proc: who is alive and how much memory they hold.

Used to show that no process outlives its request and to measure the executor's memory.
What it does not do: signal anything. Linux only.
"""

from __future__ import annotations

import os


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...); None once the
    process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None  # exited while we looked
    # the command name may contain spaces and parentheses: fields follow the last ')'
    return stat[stat.rfind(b")") + 2 :].split()


def parents() -> dict[int, int]:
    """Every live process's parent: pid -> ppid."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := stat_fields(name)) is not None:
            out[int(name)] = int(fields[1])
    return out


def descendants(pid: int, parent_of: dict[int, int] | None = None) -> list[int]:
    """Every live process below `pid` (not `pid` itself), parents before children; `parent_of`:
    a `parents()` already read, else read here."""
    children: dict[int, list[int]] = {}
    for child, parent in (parents() if parent_of is None else parent_of).items():
        children.setdefault(parent, []).append(child)
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(children.get(p, []))
    return out


def running(pid: int) -> bool:
    """`pid` exists and has not exited (a zombie has: only its parent has not reaped it)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != b"Z"


def rss_bytes(pids: list[int]) -> int:
    """Sum of the resident memory of `pids` (processes that have exited count 0)."""
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError):
            continue
    return total


def pss_bytes(pids: list[int]) -> int:
    """Sum of the proportional set size of `pids`: shared copy-on-write pages counted once."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                for line in f:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, IndexError, ValueError):
            continue
    return total
