"""A process and its descendants, read from /proc: who is alive and how much memory they hold.

Used to show that no process outlives its request and to measure the executor's memory.
What it does not do: signal anything. Linux only.
"""

from __future__ import annotations

import os


def _parent_map() -> dict[int, int]:
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # exited while we looked
        # the command name may contain spaces and parentheses: fields follow the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        parents[int(name)] = int(fields[1])
    return parents


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (not `pid` itself), parents before children."""
    children: dict[int, list[int]] = {}
    for child, parent in _parent_map().items():
        children.setdefault(parent, []).append(child)
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(children.get(p, []))
    return out


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
