"""`rstar2 profile`: run a short workload with tracing on, write trace.json and the report.

Workloads (one of):
- `--graph FILE`: any actor graph config (a `[graph]` table), run until it stops (or until
  `--timeout`);
- `--synthetic NAME`: the built-in sleep-based train-shaped graph (`rstar2.profile.synthetic`)
  with NAME (sandbox, reward, engine, learner) made slow, or "balanced";
- `--config FILE` (with `--steps N`, `--rollout-only`): the trainer's graph, once the trainer
  exists in this checkout (until then the command says so).
Writes `<out>/trace.json` (Chrome trace event JSON: open it in https://ui.perfetto.dev),
`<out>/report.txt` and `<out>/report.json`, and prints the report (`--json`: the JSON).

`--overhead` instead times the workload (`--graph`, or the message-bound demo pipeline) with
tracing on and off, `--repeats` times each, and prints the overhead.

What it does not do: attach to a graph that is already running (that is `rstar2 top`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from rstar2.actors.backend import BACKENDS
from rstar2.actors.graph_config import GraphConfig, load_graph_config
from rstar2.profile.chrome_trace import write_chrome_trace
from rstar2.profile.overhead import TARGET, demo_pipeline, measure_overhead_blocking
from rstar2.profile.recording import Recording
from rstar2.profile.report import build_report, format_report, report_json
from rstar2.profile.synthetic import SLOW_CHOICES, synthetic_graph
from rstar2.profile.workload import record_graph_blocking

HELP = "trace a short run and name the bottleneck actor"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--graph", help="actor graph config file to run and profile")
    what.add_argument(
        "--synthetic",
        choices=(*SLOW_CHOICES, "balanced"),
        help="the built-in train-shaped demo graph, with this actor made slow",
    )
    what.add_argument("--config", help="train config file (profiles the trainer's graph)")
    parser.add_argument("--steps", type=int, default=3, help="training steps to run")
    parser.add_argument("--rollout-only", action="store_true", help="rollout without updates")
    parser.add_argument("--out", default="profile-out", help="folder for trace.json and report")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--timeout", type=float, default=600.0, help="stop the run after this")
    parser.add_argument("--backend", choices=BACKENDS, default="asyncio", help="event loop")
    parser.add_argument(
        "--overhead", action="store_true", help="measure tracing overhead instead (on vs off)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs per side for --overhead")


def _workload(args: argparse.Namespace) -> GraphConfig:
    if args.steps < 1:
        raise SystemExit(f"rstar2 profile: --steps must be >= 1, got {args.steps}")
    if args.graph:
        return load_graph_config(args.graph)
    if args.synthetic:
        slow = None if args.synthetic == "balanced" else args.synthetic
        return synthetic_graph(slow, steps=args.steps)
    if args.config:
        raise SystemExit(
            "rstar2 profile: the trainer is not in this checkout yet; profile a graph with "
            "--graph FILE or the built-in demo with --synthetic NAME"
        )
    raise SystemExit("rstar2 profile: say what to run: --config, --graph or --synthetic")


def _write(rec: Recording, out: Path, as_json: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    write_chrome_trace(rec, out / "trace.json")
    report = build_report(rec)
    doc = report_json(report)
    text = format_report(report)
    (out / "report.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "report.txt").write_text(text + "\n")
    print(json.dumps(doc) if as_json else text)
    log.info("wrote %s, %s and %s", out / "trace.json", out / "report.txt", out / "report.json")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.overhead:
        cfg = load_graph_config(args.graph) if args.graph else demo_pipeline()
        result = measure_overhead_blocking(cfg, args.repeats, args.backend)
        if args.json:
            print(
                json.dumps(
                    {
                        "overhead": result.overhead,
                        "on_s": result.on_s,
                        "off_s": result.off_s,
                        "target": TARGET,
                    }
                )
            )
        else:
            print(result.summary())
        return 0
    cfg = _workload(args)
    result, rec = record_graph_blocking(cfg, timeout_s=args.timeout, backend=args.backend)
    if not result.ok:
        for f in result.failures:
            print(f"FAILED {f.actor}:\n{f.traceback}", file=sys.stderr)
        log.warning("graph ended with %r: the report covers the run until then", result.reason)
    return _write(rec, Path(args.out), args.json)
