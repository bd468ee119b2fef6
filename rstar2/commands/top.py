"""`rstar2 top`: live per-actor rates, busy share and queue depth of running graphs.

Attaches to every graph running on this machine (or the one `--endpoint` names) through its
stats endpoint, polls counters (never spans) every `--interval` seconds and reprints a table
per graph, titled with the graph's name, the pid running it and its run directory (or its
command line): input and output messages/s, busy / blocked / idle share of each actor's wall
time over the interval (together at most 100%, see `rstar2.profile.live_view`), the share spent
waiting on replies to its own requests (which overlaps the others), the queue depth the actor
sees, messages handled so far. `--once` prints one table after one interval and exits; `--json`
prints that as JSON (for scripts and tests). No graph running, or none answering at
`--endpoint`, is one line and exit code 2 (as for any path that names nothing); a graph that
stops while `top` watches it ends `top` with exit code 0.

Before it looks for graphs it removes the temp folders that killed runs left behind
(`rstar2.actors.graph_dirs`): polling their dead sockets made each refresh wait seconds.

What it does not do: attach to graphs on other hosts (their stats sockets are local files).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from rstar2.actors.graph import stats_endpoints
from rstar2.actors.graph_dirs import sweep_stale_dirs
from rstar2.commands.arguments import positive_float, zmq_endpoint
from rstar2.config import UsageError
from rstar2.profile.live_view import (
    LiveRow,
    StatsUnavailable,
    format_rows,
    graph_dir,
    live_rows,
    timed_poll,
)

_CLEAR = "\x1b[H\x1b[2J"
SHARES = (
    "busy / blocked / idle: share of each actor's wall time over the interval (at most 100% "
    "together; the rest is unaccounted); replies: awaiting its own requests (overlaps them)"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint",
        type=zmq_endpoint,
        help="stats endpoint, e.g. ipc:///tmp/rstar2-graph-.../stats.sock (default: every "
        "running graph)",
    )
    parser.add_argument(
        "--interval", type=positive_float, default=1.0, help="seconds between refreshes"
    )
    parser.add_argument("--once", action="store_true", help="one table after one interval")
    parser.add_argument("--json", action="store_true", help="like --once, printed as JSON")


def _sample(endpoints: list[str], interval: float) -> dict[str, list[LiveRow]]:
    """Rows per endpoint over one interval (graphs that stop answering are left out)."""
    first = {}
    for ep in endpoints:
        try:
            first[ep] = timed_poll(ep)
        except StatsUnavailable:
            continue
    time.sleep(interval)
    out = {}
    for ep, (t0, before) in first.items():
        try:
            t1, after = timed_poll(ep)
        except StatsUnavailable:
            continue
        out[ep] = live_rows(before, after, t1 - t0)
    return out


def graph_title(endpoint: str) -> str:
    """ "graph NAME  pid P  run RUN_DIR" for a local graph (its command line when it has no
    run directory); the endpoint itself for anything else."""
    if not endpoint.startswith("ipc://"):
        return f"graph at {endpoint}"
    d = graph_dir(endpoint)
    pid = d.owner.get("pid", d.pid)
    where = f"run {d.run_dir}" if d.run_dir else " ".join(map(str, d.owner.get("argv", [])))
    started = d.owner.get("started")
    since = time.strftime("  since %H:%M:%S", time.localtime(started)) if started else ""
    return f"graph {d.name}  pid {pid if pid is not None else '?'}{since}  {where}".rstrip()


def run(args: argparse.Namespace) -> int:
    if not args.endpoint:
        sweep_stale_dirs()
    endpoints = [args.endpoint] if args.endpoint else stats_endpoints()
    if not endpoints:
        raise UsageError(
            "no running graph found on this machine (start one, e.g. rstar2 train, or name one "
            "with --endpoint)"
        )
    first = True
    while True:
        sampled = _sample(endpoints, args.interval)
        if not sampled and first:
            where = f"at --endpoint {args.endpoint}" if args.endpoint else "on this machine"
            raise UsageError(f"no graph answered {where} (did it stop?)")
        if not sampled:
            print("rstar2 top: the graph stopped", file=sys.stderr)
            return 0
        first = False
        if args.json:
            doc = {ep: [dataclasses.asdict(r) for r in rows] for ep, rows in sampled.items()}
            print(json.dumps(doc))
            return 0
        tables = [format_rows(graph_title(ep), rows) for ep, rows in sampled.items()]
        text = "\n\n".join([SHARES, *tables])
        if args.once:
            print(text)
            return 0
        print(_CLEAR + time.strftime("%H:%M:%S  rstar2 top (Ctrl-C to quit)\n") + text, flush=True)
        if not args.endpoint:
            sweep_stale_dirs()
            endpoints = stats_endpoints() or endpoints
