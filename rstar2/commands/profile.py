"""`rstar2 profile`: run a short workload with tracing on, write trace.json and the report.

Workloads (one of; the trainer's graph when none is named):
- `--config FILE`, or nothing: a short `rstar2 train` run on the real actor graph (the file's
  train config, or the embedded default one), `--steps N` RL steps of its first stage, no
  held-out evaluation, from the untrained initial policy unless `--model DIR` (a policy that
  already calls the tool, e.g. `RUN/model-sft` of an earlier `rstar2 train`; the same as
  `--set model.path=DIR`) or `--sft` (SFT as `rstar2 train` does it first; slow on a CPU),
  `--set KEY=VALUE` overrides as in `rstar2 train`, and `--rollout-only` to skip the policy
  update and weight push. The run directory (metrics, checkpoint) goes to `<out>/run-<time>`
  (see `rstar2.profile.trainer`). What-if settings that slow one actor down:
  `sandbox.extra_latency_s` (every tool call), `reward.extra_latency_s` (every verification),
  `learner.epochs` (passes of the policy update), `engine.kv_budget_tokens` (KV room);
- `--graph FILE`: any actor graph config (a `[graph]` table), run until it stops (or until
  `--timeout`);
- `--synthetic NAME`: the built-in sleep-based train-shaped graph (`rstar2.profile.synthetic`)
  with NAME (sandbox, reward, engine, learner) made slow, or "balanced".
Writes `<out>/trace.json` (Chrome trace event JSON: open it in https://ui.perfetto.dev),
`<out>/report.txt` and `<out>/report.json`, and prints the report (`--json`: the JSON).

`--overhead` instead times workloads with tracing on and off, `--repeats` times each, and
prints the overhead of each: `--graph`, or the two built-in ones (`rstar2.profile.overhead`:
the demo pipeline, where spans coalesce best, and a request/reply pair, one span per message).

What it does not do: attach to a graph that is already running (that is `rstar2 top`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rstar2.actors.backend import BACKENDS
from rstar2.actors.graph_config import GraphConfig, load_graph_config
from rstar2.actors.running_graph import GraphResult
from rstar2.commands.arguments import model_directory, positive_float, positive_int
from rstar2.config import UsageError
from rstar2.profile.actor_load import actor_loads
from rstar2.profile.chrome_trace import write_chrome_trace
from rstar2.profile.overhead import TARGET, WORKLOADS, measure_overhead_blocking
from rstar2.profile.recording import Recording
from rstar2.profile.report import build_report, format_report, report_json
from rstar2.profile.synthetic import SLOW_CHOICES, synthetic_graph
from rstar2.profile.workload import record_graph_blocking
from rstar2.whole_file import write_text

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--graph", help="actor graph config file to run and profile")
    what.add_argument(
        "--synthetic",
        choices=(*SLOW_CHOICES, "balanced"),
        help="the built-in train-shaped demo graph, with this actor made slow",
    )
    what.add_argument(
        "--config", help="train config file (default workload: the embedded train config)"
    )
    parser.add_argument("--steps", type=positive_int, default=3, help="training steps to run")
    parser.add_argument("--rollout-only", action="store_true", help="rollout without updates")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one train config key, as in rstar2 train (repeatable)",
    )
    parser.add_argument(
        "--model",
        metavar="DIR",
        type=model_directory,
        help="starting policy (a Hugging Face model directory such as RUN/model-sft of an earlier "
        "rstar2 train; same as --set model.path=DIR; default: the untrained tiny model)",
    )
    parser.add_argument("--sft", action="store_true", help="run SFT first, as rstar2 train does")
    parser.add_argument("--out", default="profile-out", help="folder for trace.json and report")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--timeout", type=positive_float, default=600.0, help="stop the run after this (s)"
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, help="event loop (default: asyncio, or the train config's)"
    )
    parser.add_argument(
        "--overhead", action="store_true", help="measure tracing overhead instead (on vs off)"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=5, help="runs per side for --overhead"
    )


def _record(args: argparse.Namespace) -> tuple[GraphResult, Recording]:
    """Run the chosen workload with tracing on."""
    if args.steps < 1:
        raise UsageError(f"--steps must be >= 1, got {args.steps}")
    if args.graph or args.synthetic:
        if args.set or args.sft or args.rollout_only or args.model:
            raise UsageError("--set, --model, --sft and --rollout-only are for the trainer")
        if args.graph:
            cfg = load_graph_config(args.graph)
        else:
            slow = None if args.synthetic == "balanced" else args.synthetic
            cfg = synthetic_graph(slow, steps=args.steps)
        return record_graph_blocking(cfg, timeout_s=args.timeout, backend=args.backend or "asyncio")
    sets = [*args.set, *([f"graph.backend={args.backend}"] if args.backend else [])]
    if args.model:
        sets.append(f"model.path={args.model}")
    from rstar2.profile.trainer import profile_config, profile_training  # torch, the runner

    train_cfg = profile_config(args.config, args.steps, sets)
    run_dir = Path(args.out) / time.strftime("run-%Y%m%d-%H%M%S")
    log.info("profiling %d RL step(s) of the trainer in %s", args.steps, run_dir)
    return profile_training(
        train_cfg, run_dir, sft=args.sft, rollout_only=args.rollout_only, timeout_s=args.timeout
    )


def _write(rec: Recording, out: Path, as_json: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    write_chrome_trace(rec, out / "trace.json")
    report = build_report(rec)
    doc = report_json(report)
    text = format_report(report)
    write_text(out / "report.json", json.dumps(doc, indent=2) + "\n")
    write_text(out / "report.txt", text + "\n")
    print(json.dumps(doc) if as_json else text)
    log.info("wrote %s, %s and %s", out / "trace.json", out / "report.txt", out / "report.json")
    return 0


def _overhead(args: argparse.Namespace) -> int:
    configs: dict[str, Callable[[], GraphConfig]] = WORKLOADS
    if args.graph:
        configs = {"graph": lambda: load_graph_config(args.graph)}
    rows = []
    for name, make in configs.items():
        result = measure_overhead_blocking(make(), args.repeats, args.backend or "asyncio")
        rows.append((name, result))
        if not args.json:
            print(f"{name}: {result.summary()}")
    if args.json:
        workloads = [
            {"name": name, "overhead": r.overhead, "on_s": r.on_s, "off_s": r.off_s}
            for name, r in rows
        ]
        print(json.dumps({"target": TARGET, "workloads": workloads}))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.overhead:
        return _overhead(args)
    result, rec = _record(args)
    if not result.ok:
        for f in result.failures:
            print(f"FAILED {f.actor}:\n{f.traceback}", file=sys.stderr)
        if not actor_loads(rec):  # it ended before any actor's stats: nothing to report on
            log.error("the graph ended with %r before any actor recorded its load", result.reason)
            return 1
        log.warning("graph ended with %r: the report covers the run until then", result.reason)
    code = _write(rec, Path(args.out), args.json)
    if result.reason == "failed":  # an actor failed: the report is partial, the run is not ok
        log.error("an actor failed (its traceback above): exit code 1")
        return 1
    return code
