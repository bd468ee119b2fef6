"""The CPU time named functions take inside an `rstar2` command (docs/production.md, issue 31).

    python3 scripts/call_times.py --time rstar2.engine.prefix_cache:PrefixCache.take \
        [--time MODULE:QUALNAME ...] [--json] -- train --config configs/gpu_20m.toml ...

Runs the `rstar2` command after `--` in this process with each named function (a module
function or a class's method, `module:Name` or `module:Class.name`) wrapped, and prints for
each: calls, total CPU seconds of the calling thread (`time.thread_time`, so the time other
threads run meanwhile is not counted, nor the time the call waits), and the median and mean
microseconds a call. Thread CPU time, unlike wall time, tells the engine thread's work from the
event loop's while both run. A nested wrapped call counts in both.

What it does not do: time anything in the processes the command spawns (the sandbox's
workers, `graph.services_process`, `graph.processes` > 1): only the main process's calls, where
the learner, the rollout workers and their engines run. The wrapper itself adds about a
microsecond a call.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any


def resolve(target: str) -> tuple[Any, str]:
    """The owner (a module or a class) and attribute name of `module:Name` or
    `module:Class.name`; ValueError when it does not name a function."""
    module_name, sep, qualname = target.partition(":")
    if not sep or not qualname:
        raise ValueError(f"{target!r}: expected MODULE:NAME or MODULE:CLASS.NAME")
    owner: Any = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    if not callable(getattr(owner, name, None)):
        raise ValueError(f"{target!r} is not a function")
    return owner, name


def timed(func: Callable[..., Any], record: list[float]) -> Callable[..., Any]:
    """`func`, appending each call's thread CPU seconds to `record`."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return func(*args, **kwargs)
        finally:
            record.append(time.thread_time() - started)

    return wrapper


def summary(records: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Per target: calls, total seconds, median and mean microseconds a call."""
    return {
        target: {
            "calls": len(times),
            "total_s": sum(times),
            "median_us": statistics.median(times) * 1e6 if times else 0.0,
            "mean_us": statistics.mean(times) * 1e6 if times else 0.0,
        }
        for target, times in records.items()
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        print("usage: call_times.py --time MODULE:QUALNAME ... -- RSTAR2_ARGS", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time", action="append", required=True, metavar="MODULE:QUALNAME")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv[:split])
    records: dict[str, list[float]] = {}
    for target in args.time:
        try:
            owner, name = resolve(target)
        except (ImportError, AttributeError, ValueError) as e:
            print(f"call_times.py: {e}", file=sys.stderr)
            return 2
        records[target] = []
        setattr(owner, name, timed(getattr(owner, name), records[target]))
    from rstar2.cli import main as rstar2_main

    try:
        code = rstar2_main(argv[split + 1 :])
    finally:
        figures = summary(records)
        if args.json:
            print(json.dumps(figures, indent=1))
        else:
            for target, f in figures.items():
                print(
                    f"{target}: {f['calls']} calls, {f['total_s']:.3f} s, "
                    f"median {f['median_us']:.1f} us, mean {f['mean_us']:.1f} us"
                )
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
