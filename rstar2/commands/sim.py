"""`rstar2 sim`: simulate rollout scheduling policies on a virtual clock, without GPUs.

    rstar2 sim --gpus 64 --gpu mi300x --model qwen3-14b --policy kv_aware [--json]
    rstar2 sim compare [same options] [--json] [--out-dir DIR]
    rstar2 sim bound [same options] [--json]
    rstar2 sim calibrate --points FILE [--check FILE] [--json]
    rstar2 sim calibrate --engine [--model-dir DIR] [--threads N] [--json]
    rstar2 sim run --steps N --max-staleness K [same options] [--json]
    rstar2 sim compare-staleness [--max-k 4] [same options] [--json] [--out-dir DIR]

With no workload option the workload is the paper-scale step (512 prompts x 32 rollouts,
lognormal lengths capped at 12K, ~5 tool calls). `--json` prints, per policy, exactly the keys
policy, makespan_s, lower_bound_s, ratio_to_bound, preemptions, recomputed_tokens,
idle_fraction, tokens_per_s, events, wall_s (a list for `compare`). A progress bar goes to
stderr unless --quiet or --no-progress. `calibrate --engine` is the fidelity benchmark
(`sim.fidelity`): fit the cost model to the embedded CPU engine's measured steps, then predict
a different workload's makespan on that engine and report the error. `bound` prints the
terms of the workload's lower bound and its spread floor (`sim.bound`), simulating nothing.

With `--steps N` (N > 1) `run` simulates a whole run (`sim.training_run`): N steps, the
learner's updates and the weight pushes, under bounded staleness `--max-staleness K`; `--json`
then prints the run's summary (trajectories_per_hour, engine_idle_fraction, staleness_mean,
staleness_max, step_s_mean, ...). `compare-staleness` runs k = 0..max-k on the same steps
(default 8), prints a table (or a JSON list) and writes staleness.png.

Everything but `calibrate --engine` runs without torch (a laptop's `rstar2 sim` starts in well
under a second); that action's module, `rstar2.commands.sim_fidelity`, imports the engine and
is loaded only when it runs. The options themselves, and the `SimConfig` they make, are in
`rstar2.commands.sim_options`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rstar2.commands.arguments import flag_names, nonnegative_int, out_dir
from rstar2.commands.sim_options import (
    add_calibrate_options,
    add_run_options,
    apply_deferred,
    config_from_args,
    dest_of,
    flag_of,
    measured_points,
)
from rstar2.config import ConfigError, UsageError, to_dict
from rstar2.scheduler import COMPARED_POLICIES
from sim.bound import bound_parts
from sim.config import build, build_run
from sim.cost import fit
from sim.report import (
    key_value_table,
    run_table,
    staleness_table,
    table,
    write_plots,
    write_staleness_plot,
)
from sim.run_result import RunResult
from sim.simulator import ProgressFn, SimResult

log = logging.getLogger(__name__)

ACTIONS = {
    "run": "simulate one policy (the default action: `rstar2 sim [options]`)",
    "compare": "simulate every policy on the same workload and seed, and plot them",
    "bound": "print the terms of the workload's lower bound, simulating nothing",
    "calibrate": "fit the cost model to measured steps, or check it against the embedded engine",
    "compare-staleness": "simulate runs of several steps for max staleness k = 0..max-k, and plot",
}

COMPARE_STALENESS_STEPS = 8
"""Steps of each run of `compare-staleness` when --steps is not given."""


SET_BY_ACTION = {"compare": ("--policy",), "compare-staleness": ("--max-staleness",)}
"""The run flags an action sets itself (every policy; k = 0..--max-k): it does not take them,
after it (argparse refuses them) or before it (`run` does)."""
_WHY = {"compare": "every policy", "compare-staleness": "k = 0..--max-k"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`rstar2 sim [options]` runs one policy; `compare`, `bound` and `calibrate` are actions
    with their own `--help`. The workload options may stand before or after the action: after
    it they are parsed with no default (`argparse.SUPPRESS`), so that they do not overwrite
    what was given before it."""
    set_by_actions = tuple(flag for flags in SET_BY_ACTION.values() for flag in flags)
    deferred = add_run_options(parser, suppress=False, defer=set_by_actions)
    parser.set_defaults(deferred_defaults=deferred)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    sub = parser.add_subparsers(dest="action", metavar="[ACTION]")
    parser.set_defaults(action="run")  # after add_subparsers, whose default it replaces
    for name, text in ACTIONS.items():
        p = sub.add_parser(name, help=text, description=text)
        if name == "calibrate":
            add_calibrate_options(p)
            continue
        add_run_options(p, suppress=True, without=SET_BY_ACTION.get(name, ()))
        if name != "bound":
            p.add_argument(
                "--no-progress",
                action="store_true",
                default=argparse.SUPPRESS,
                help="no progress bar on stderr",
            )
        if name in ("compare", "compare-staleness"):
            p.add_argument("--out-dir", default="sim-out", help="where the PNGs go")
        if name == "compare-staleness":
            p.add_argument(
                "--max-k", type=nonnegative_int, default=4, help="largest max staleness compared"
            )


@contextmanager
def _progress_bar(label: str, enabled: bool) -> Iterator[ProgressFn | None]:
    """A progress bar on stderr, redrawn in place, for the block's simulation. A bar the block
    leaves mid-line (Ctrl-C) gets its newline, so the line after it starts a line of its own."""
    if not enabled:
        yield None
        return
    last = [0.0]
    mid_line = [False]

    def show(done: int, total: int, sim_t: float) -> None:
        now = time.perf_counter()
        if now - last[0] < 0.2 and done != total:
            return
        last[0] = now
        filled = 30 * done // total
        bar = "#" * filled + "." * (30 - filled)
        print(f"\r{label:<18} [{bar}] {done}/{total} sim t={sim_t:7.1f}s", end="", file=sys.stderr)
        mid_line[0] = done != total
        if done == total:
            print(file=sys.stderr)

    try:
        yield show
    finally:
        if mid_line[0]:
            print(file=sys.stderr)


def simulate(args: argparse.Namespace, policy: str) -> SimResult:
    cfg = config_from_args(args, policy)
    log.debug("resolved config: %s", to_dict(cfg))
    with _progress_bar(policy, not (args.quiet or args.no_progress)) as progress:
        result = build(cfg, progress).run()
    result.policy = policy
    return result


def run(args: argparse.Namespace) -> int:
    given = [f for f in SET_BY_ACTION.get(args.action, ()) if getattr(args, dest_of(f)) is not None]
    if given:  # before the action (after it, argparse refuses them)
        raise UsageError(
            f"{given[0]}: `sim {args.action}` sets it itself ({_WHY[args.action]}); drop it"
        )
    apply_deferred(args, args.deferred_defaults)
    with flag_names(lambda key: flag_of(key, args)):  # a SimConfig value: by its flag
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    if args.action == "calibrate":
        return _calibrate(args)
    if args.action == "bound":
        return _bound(args)
    if args.action == "compare-staleness":
        return _compare_staleness(args)
    if args.max_staleness and args.action in ("run", "compare") and (args.steps or 1) <= 1:
        raise UsageError(
            "--max-staleness needs --steps N (N > 1): staleness exists between steps (one step "
            "is the synchronous simulation)"
        )
    if args.action == "run" and (args.steps or 1) > 1:
        run_result = simulate_run(args, args.max_staleness)
        summary = run_result.summary()
        print(json.dumps(summary, indent=2) if args.json else run_table(summary))
        return 0
    plots: list[Path] = []
    if args.action == "compare":
        with out_dir(args.out_dir, "--out-dir"):  # removed again if nothing lands in it
            results = [simulate(args, p) for p in COMPARED_POLICIES]
            plots = write_plots(results, args.out_dir)
    else:
        results = [simulate(args, args.policy)]
    if args.json:
        out = [r.summary() for r in results]
        print(json.dumps(out if args.action == "compare" else out[0], indent=2))
    else:
        print(table(results))
    for path in plots:
        log.info("wrote %s", path)
    return 0


def simulate_run(args: argparse.Namespace, max_staleness: int) -> RunResult:
    """A run of `--steps` steps (compare-staleness: 8 unless given) under this k."""
    args = argparse.Namespace(**vars(args))
    args.steps = args.steps or COMPARE_STALENESS_STEPS
    args.max_staleness = max_staleness
    cfg = config_from_args(args, args.policy)
    log.debug("resolved config: %s", to_dict(cfg))
    try:
        with _progress_bar(f"k={max_staleness}", not (args.quiet or args.no_progress)) as bar:
            return build_run(cfg, bar).run_steps()
    except ConfigError:
        raise
    except ValueError as e:  # a metrics file that does not match the trace
        raise UsageError(str(e)) from None


def _compare_staleness(args: argparse.Namespace) -> int:
    with out_dir(args.out_dir, "--out-dir"):
        results = [simulate_run(args, k) for k in range(args.max_k + 1)]
        plot = write_staleness_plot(results, args.out_dir)
    if args.json:
        print(json.dumps([r.summary() for r in results], indent=2))
    else:
        print(staleness_table(results))
    log.info("wrote %s", plot)
    return 0


def _bound(args: argparse.Namespace) -> int:
    sim = build(config_from_args(args, args.policy))
    parts = bound_parts(sim.workload, sim.cost, len(sim.engines), sim.kv_tokens, sim.max_num_seqs)
    report = {
        "lower_bound_s": round(parts.bound_s, 3),
        "path_s": round(parts.path_s, 3),
        "work_s": round(parts.work_s, 3),
        "fixed_s": round(parts.fixed_s, 3),
        "variable_s": round(parts.variable_s, 3),
        "steps_per_engine": round(parts.steps_per_engine, 1),
        "spread_tokens": parts.spread_tokens,
        "spread_floor_s": round(parts.spread_floor_s, 3),
    }
    print(
        json.dumps(report, indent=2)
        if args.json
        else "\n".join(f"{k}: {v}" for k, v in report.items())
    )
    return 0


ENGINE_FIDELITY = "rstar2.commands.sim_fidelity"
"""The module of `calibrate --engine` (torch and the embedded engine)."""


def _calibrate(args: argparse.Namespace) -> int:
    if args.engine and (args.points or args.check):
        raise UsageError(
            "--engine measures its own steps; --points and --check fit measured ones: one or "
            "the other"
        )
    engine_only = [("--model-dir", args.model_dir), ("--save-points", args.save_points)]
    if not args.engine and (given := [flag for flag, value in engine_only if value is not None]):
        raise UsageError(f"{' and '.join(given)}: with --engine only")
    if args.engine:  # the one action that needs torch: imported only here (see the docstring)
        return int(importlib.import_module(ENGINE_FIDELITY).run(args))
    if args.points is None:
        raise UsageError("sim calibrate needs --points FILE or --engine")
    points = measured_points(args.points, "--points")
    cost = fit(points)
    report: dict[str, object] = {"fit": to_dict(cost), "points": len(points)}
    for name, path in (("fit_error", args.points), ("check_error", args.check)):
        if path is None:
            continue
        pts = measured_points(path, "--check")
        errors = [
            abs(cost.step_s(p.batch, p.context_tokens, p.prefill_tokens) - p.step_s) / p.step_s
            for p in pts
        ]
        total_pred = sum(cost.step_s(p.batch, p.context_tokens, p.prefill_tokens) for p in pts)
        total_meas = sum(p.step_s for p in pts)
        report[name] = {
            "mean_abs_step_error": round(sum(errors) / len(errors), 4),
            "total_time_error": round(abs(total_pred - total_meas) / total_meas, 4),
        }
    print(json.dumps(report, indent=2) if args.json else key_value_table(report))
    return 0
