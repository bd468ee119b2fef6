"""`rstar2 launch GRAPH.toml`: build an actor graph from its config and run it until it stops.

Placement comes from the config (`process` / `host` of each actor); `--one-process` overrides
it and runs every actor in this process over inproc://. Without `--node-rank` every process
starts on this machine, whatever its host. With `--node-rank K` only node K's actors start
(node K: the K-th host of `graph.hosts` that places actors); run the same config with each rank
on its machine, and the nodes join over node 0's control socket (`rstar2.actors.nodes`): a
failure anywhere, or Ctrl-C / SIGTERM on node 0, stops every node.

Exit code 0 when the graph stopped or finished, 1 when it failed (or did not start, e.g. a
node missed the handshake), 2 for config errors, 130 when Ctrl-C (SIGINT) stopped it and 143
when SIGTERM did (128 + the signal's number, as a shell reports a process the signal ended).

What it does not do: start the commands on the other machines (use your cluster's launcher).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from rstar2.actors.backend import BACKENDS
from rstar2.actors.graph import run_graph_blocking
from rstar2.actors.graph_config import MAIN_PROCESS, GraphConfig, graph_config
from rstar2.actors.nodes import node_host
from rstar2.actors.running_graph import GraphStartError
from rstar2.config import UsageError, load_file
from rstar2.redaction import redact

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="TOML/YAML file with a [graph] table")
    parser.add_argument("--backend", choices=BACKENDS, default="asyncio", help="event loop")
    parser.add_argument(
        "--one-process", action="store_true", help="run every actor in this process (inproc)"
    )
    parser.add_argument(
        "--node-rank",
        type=int,
        default=None,
        metavar="K",
        help="start only node K's actors (K-th host of graph.hosts placing actors; 0 coordinates) "
        "(default: every node's, on this machine)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")


def one_process(cfg: GraphConfig) -> GraphConfig:
    """The same graph with every actor placed in the launching process."""
    actors = [
        dataclasses.replace(a, process=MAIN_PROCESS, process_per_instance=False) for a in cfg.actors
    ]
    return dataclasses.replace(cfg, actors=actors)


TRAINING_KEYS = ("stages", "rl", "learner", "model", "sft")
"""Top-level tables of a training config (`rstar2 train --config`), none of a graph config."""


def run(args: argparse.Namespace) -> int:
    data = load_file(args.config)
    graph = data.get("graph", {})
    training = [f"[{key}]" for key in TRAINING_KEYS if key in data]
    if isinstance(graph, dict) and "actors" not in graph and training:
        raise UsageError(
            f"{args.config} is a training config (it has {', '.join(training)}): run it with "
            f"`rstar2 train --config {args.config}`; launch takes a graph config, a [graph] "
            "table with its actors"
        )
    cfg = graph_config(data)
    if args.one_process:
        cfg = one_process(cfg)
    host = None if args.node_rank is None else node_host(cfg, args.node_rank)
    log.info("graph config: %s", json.dumps(redact(cfg), default=str))
    if host is not None:
        log.info("node %d of %s: host %s", args.node_rank, cfg.nodes(), host)
    try:
        result = run_graph_blocking(cfg, backend=args.backend, handle_signals=True, host=host)
    except GraphStartError as e:
        log.error("graph %s did not start: %s", cfg.name, e)
        if args.json:
            print(json.dumps({"reason": "start failed", "error": str(e)}))
        return 1
    summary = {
        "reason": result.reason,
        "stopped_by": result.stopped_by,
        "result": result.result,
        "failures": [{"actor": f.actor, "traceback": f.traceback} for f in result.failures],
        "actors": [
            {"actor": s.actor, "received": s.received, "sent": s.sent, "busy_s": round(s.busy_s, 4)}
            for s in result.stats
        ],
    }
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        where = "" if host is None else f" (node {args.node_rank}: {host})"
        print(
            f"graph {cfg.name}{where}: {result.reason} {result.stopped_by} result={result.result!r}"
        )
        for s in summary["actors"]:
            print(f"  {s['actor']:<24} received {s['received']:>8}  sent {s['sent']:>8}")
        for f in result.failures:
            print(f"  FAILED {f.actor}:\n{f.traceback}", file=sys.stderr)
    if result.reason == "signal":
        return EXIT_SIGNAL.get(result.stopped_by, EXIT_SIGNAL["SIGINT"])
    return 0 if result.ok else 1


EXIT_SIGNAL = {"SIGINT": 130, "SIGTERM": 143}
"""Exit codes of a graph a signal stopped (`GraphResult.stopped_by` names the signal)."""
