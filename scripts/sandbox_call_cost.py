"""The CPU a sandbox tool call costs, by process: the caller's executor, the zygote, the child.

    python3 scripts/sandbox_call_cost.py [--calls 2000] [--concurrency 8]
        [--preload math,fractions,itertools,collections] [--code 'print(2 + 3)'] [--json]

Starts a local executor (`rstar2.sandbox.executor.open_executor`: the zygote inside bubblewrap
where it can, as training runs it), warms it with 20 calls, then runs `--calls` calls of
`--code` with `--concurrency` at once and prints the calls/s and, per call, the CPU
milliseconds of this process (the executor's Python, as in the sandbox actor's process), of
each sandbox process itself and of the children it reaped (the zygote's forked request
children), from /proc, and their minor page faults a call (copy-on-write after the fork).
The zygote runs one selector loop on one core, so `1000 / zygote_ms` is the most calls a
second one sandbox actor can serve however many cores it has; the children's share spreads
over the cores. The default preload is `configs/gpu_20m.toml`'s (the training default
preloads numpy and sympy too: `--preload` with them).

What it does not do: count the caller's bus and agent-loop work around a call (the instant
engine's runs measure that, docs/production.md), or the CPU of processes still alive at the
end other than the sandbox's own (a child is counted once the zygote reaped it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from rstar2.sandbox import proctree
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import Executor, open_executor
from rstar2.wire import ExecRequest

TICK = os.sysconf("SC_CLK_TCK")
WARMUP = 20


def proc_cpu(pid: int) -> tuple[float, float, int, int]:
    """CPU seconds of process `pid` itself and of its reaped children, then their minor page
    faults (/proc/PID/stat: after a fork, a write to a page still shared is one)."""
    fields = proctree.stat_fields(pid)
    if fields is None:
        raise ProcessLookupError(f"process {pid} is gone")
    utime, stime, cutime, cstime = (int(x) / TICK for x in fields[11:15])
    return utime + stime, cutime + cstime, int(fields[7]), int(fields[8])


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(cfg: SandboxConfig, calls: int, code: str) -> dict[str, Any]:
    """`calls` calls of `code`, `cfg.concurrency` at once, on a fresh executor."""
    async with open_executor(cfg) as executor:
        for i in range(WARMUP):
            await executor.run(ExecRequest(id=f"warm{i}", code=code))
        pids = sorted(executor.process_ids())  # the zygote's process tree
        names = {p: Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode() for p in pids}
        before = {p: proc_cpu(p) for p in pids}
        host = self_cpu()
        start = time.perf_counter()
        failed = await run_calls(executor, calls, cfg.concurrency, code)
        wall = time.perf_counter() - start
        host = self_cpu() - host
        after = {p: proc_cpu(p) for p in pids}
    processes = [
        {"pid": p, "command": names[p],
         "own_ms": (after[p][0] - before[p][0]) * 1e3 / calls,
         "reaped_children_ms": (after[p][1] - before[p][1]) * 1e3 / calls,
         "own_faults": (after[p][2] - before[p][2]) / calls,
         "reaped_children_faults": (after[p][3] - before[p][3]) / calls}
        for p in pids
    ]  # fmt: skip
    busiest = max(processes, key=lambda p: p["own_ms"])
    return {
        "calls": calls, "concurrency": cfg.concurrency, "preload": cfg.preload, "code": code,
        "failed": failed, "wall_s": wall, "calls_per_s": calls / wall,
        "caller_ms": host * 1e3 / calls, "processes": processes,
        "zygote_ms": busiest["own_ms"], "children_ms": busiest["reaped_children_ms"],
        "zygote_faults": busiest["own_faults"],
        "children_faults": busiest["reaped_children_faults"],
    }  # fmt: skip


async def run_calls(executor: Executor, calls: int, concurrency: int, code: str) -> int:
    """Run the calls, at most `concurrency` at once; the number not answered "ok"."""
    limit = anyio.Semaphore(concurrency)
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        async with limit:
            result = await executor.run(ExecRequest(id=f"call{i}", code=code))
        failed += result.status != "ok"

    async with anyio.create_task_group() as tg:
        for i in range(calls):
            tg.start_soon(one, i)
    return failed


def arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--calls", type=int, default=2000, help="calls to measure (after 20 warm)")
    p.add_argument("--concurrency", type=int, default=8, help="calls at once (sandbox.concurrency)")
    p.add_argument("--preload", default="math,fractions,itertools,collections",
                   help="modules the zygote imports, comma-separated (sandbox.preload)")  # fmt: skip
    p.add_argument("--code", default="print(2 + 3)", help="the code of every call")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    p = arg_parser()
    args = p.parse_args(argv)
    if args.calls < 1 or args.concurrency < 1:
        p.error("--calls and --concurrency must be >= 1")
    preload = [m for m in args.preload.split(",") if m]
    cfg = SandboxConfig(concurrency=args.concurrency, preload=preload)
    figures = anyio.run(measure, cfg, args.calls, args.code)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"{figures['calls']} calls, {figures['concurrency']} at once: "
          f"{figures['calls_per_s']:,.0f} calls/s ({figures['failed']} not ok)")  # fmt: skip
    print(f"CPU a call: caller {figures['caller_ms']:.2f} ms, zygote {figures['zygote_ms']:.2f}"
          f" ms, its children {figures['children_ms']:.2f} ms; minor page faults a call: "
          f"zygote {figures['zygote_faults']:.0f}, children {figures['children_faults']:.0f}")  # fmt: skip
    for proc in figures["processes"]:
        print(f"  pid {proc['pid']} {proc['command']}: own {proc['own_ms']:.2f} ms, "
              f"reaped children {proc['reaped_children_ms']:.2f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
