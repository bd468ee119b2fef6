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
is loaded only when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rstar2.commands.arguments import (
    model_directory,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
)
from rstar2.config import UsageError, to_dict
from rstar2.scheduler import COMPARED_POLICIES, POLICY_NAMES, compared_config
from sim.bound import bound_parts
from sim.config import LearnerConfig, SimConfig, build, build_run
from sim.cost import GPUS, MODELS, StepPoint, fit, load_points
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
from sim.workload import SCENARIOS, WorkloadConfig, load_trace

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`rstar2 sim [options]` runs one policy; `compare`, `bound` and `calibrate` are actions
    with their own `--help`. The workload options may stand before or after the action: after
    it they are parsed with no default (`argparse.SUPPRESS`), so that they do not overwrite
    what was given before it."""
    _add_run_options(parser, suppress=False)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    sub = parser.add_subparsers(dest="action", metavar="[ACTION]")
    parser.set_defaults(action="run")  # after add_subparsers, whose default it replaces
    for name, text in ACTIONS.items():
        p = sub.add_parser(name, help=text, description=text)
        if name == "calibrate":
            _add_calibrate_options(p)
            continue
        _add_run_options(p, suppress=True)
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


_AddOption = Callable[..., None]
"""`_add_run_options`'s `add`: `parser.add_argument`, with defaults suppressed after an action."""


def _add_run_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """The cluster, workload and policy options, and --json."""

    def add(*flags: str, default: object = None, help: str = "", **kwargs: object) -> None:
        if suppress:
            if default is not None and default is not False:
                help += f" (default: {default})"
            default = argparse.SUPPRESS
        parser.add_argument(*flags, default=default, help=help, **kwargs)  # type: ignore[arg-type]

    _add_cluster_options(add)
    _add_workload_options(add)
    _add_scheduler_options(add)
    _add_learner_options(add)
    add("--json", action="store_true", default=False, help="machine-readable output")


def _add_cluster_options(add: _AddOption) -> None:
    """The cluster and the cost model of its engines."""
    add("--policy", default="kv_aware", choices=COMPARED_POLICIES, help="routing policy")
    add("--gpus", type=positive_int, default=64, help="GPUs in the cluster")
    add("--gpu", default="mi300x", choices=sorted(GPUS), help="GPU type (cost model)")
    add("--model", default="qwen3-14b", choices=sorted(MODELS), help="model (cost model)")
    add("--tp", type=nonnegative_int, default=0, help="GPUs per engine (0: auto)")
    add("--cost", default="roofline", choices=["roofline", "constant"], help="cost model")
    add("--step-s", type=positive_float, default=0.03, help="decode step time, --cost constant")
    add("--calibration", help="JSON/CSV of measured steps to fit the cost model")
    add("--kv-tokens", type=positive_int, help="KV tokens per engine (default: from the GPU)")
    add("--max-num-seqs", type=positive_int, default=1024, help="sequences per engine at once")


def _add_workload_options(add: _AddOption) -> None:
    """The generated workload, or the trace that replaces it."""
    add("--seed", type=int, default=0, help="workload seed")
    add("--scenario", default="paper", choices=sorted(SCENARIOS), help="workload preset")
    add("--prompts", type=positive_int, help="prompts per step (default 512)")
    add("--rollouts", type=positive_int, help="rollouts per prompt (default 32)")
    add("--mean-response", type=positive_float, help="mean response tokens (default 4000)")
    add("--sigma", type=nonnegative_float, help="lognormal sigma (default 1.0)")
    add("--max-response", type=positive_int, help="response budget (default 12288)")
    add(
        "--tool-calls", type=nonnegative_float,
        help="mean tool calls per trajectory (default 5.0, or the --scenario's)",
    )  # fmt: skip
    add("--tool-latency", type=nonnegative_float, help="mean tool latency in s (default 0.3)")
    add("--trace", help="replay a JSONL trace (e.g. RUN/rollout_trace.jsonl) instead of generating")
    add("--trace-step", type=int, help="with a trace of several steps: which (default: the last)")


def _add_scheduler_options(add: _AddOption) -> None:
    """The kv_aware policy's settings and the sandbox's workers."""
    add(
        "--reservation", choices=["max", "predicted"],
        help="kv_aware reservation (default predicted; kv_aware_max: max)",
    )  # fmt: skip
    add(
        "--cold-predictor",
        action="store_true",
        default=False,
        help="start the length predictor empty (a run's first step) instead of from the step "
        "before (an independent draw of the same workload, or a trace's earlier step)",
    )
    add(
        "--no-turn-moves",
        action="store_true",
        default=False,
        help="never move a later turn off its engine (scheduler.move_turns = false)",
    )
    add(
        "--overload-factor",
        type=float,
        help="kv_aware: move a turn off an engine holding more KV than this x the least-used"
        " engine's + 2%% of its capacity (default 1.3)",
    )
    add("--tool-workers", type=positive_int, help="sandbox workers (default: unlimited)")


def _add_learner_options(add: _AddOption) -> None:
    """A run of several steps: staleness, the learner's update and the weight push."""
    add("--steps", type=positive_int, help="simulate a run of this many RL steps (default 1)")
    add("--max-staleness", type=nonnegative_int, default=0, help="k of a run (0: synchronous)")
    add(
        "--learner",
        default="separate",
        choices=["separate", "colocated"],
        help="the learner's own devices, or the engines' (they stop for the update)",
    )
    add("--learner-gpus", type=nonnegative_int, default=0, help="learner GPUs (0: --gpus)")
    add("--learner-mfu", type=positive_float, default=0.3, help="the update's MFU")
    add("--learner-epochs", type=positive_int, default=1, help="passes over a step's batch")
    add("--learner-forwards", type=nonnegative_int, default=0, help="extra forwards per token")
    add("--train-fraction", type=positive_float, default=0.5, help="share of tokens trained")
    add("--push-bandwidth", type=positive_float, default=8.6, help="weight push GB/s")
    add("--push-latency", type=nonnegative_float, default=0.1, help="fixed s of every push")
    add(
        "--update-s", type=nonnegative_float,
        help="every update takes this many s (default: the FLOPs model's, or the fit to "
        "--learner-metrics)",
    )  # fmt: skip
    add(
        "--push-s", type=nonnegative_float,
        help="every push takes this many s (default: the weights' bytes / --push-bandwidth "
        "+ --push-latency, or the fit to --learner-metrics)",
    )  # fmt: skip
    add("--learner-metrics", help="fit update and push costs to RUN/metrics.jsonl (with --trace)")


def _add_calibrate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--points", help="measured steps (JSON or CSV) to fit")
    parser.add_argument("--check", help="other measured steps to predict")
    parser.add_argument(
        "--engine", action="store_true", help="fidelity check on the embedded engine instead"
    )
    parser.add_argument(
        "--model-dir",
        type=model_directory,
        help="--engine: local HF model (default: tiny random Qwen2)",
    )
    parser.add_argument("--threads", type=positive_int, default=1, help="--engine: torch threads")
    parser.add_argument(
        "--save-points",
        help="--engine: write the measured calibration steps here (JSON, for --calibration)",
    )
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )


_WORKLOAD_FLAGS = {
    "prompts": "prompts",
    "rollouts": "rollouts",
    "mean_response": "mean_response_tokens",
    "sigma": "sigma",
    "max_response": "max_response_tokens",
    "tool_calls": "tool_calls_mean",
    "tool_latency": "tool_latency_mean_s",
    "trace": "trace",
    "trace_step": "trace_step",
}


def config_from_args(args: argparse.Namespace, policy: str) -> SimConfig:
    """The SimConfig the flags describe, for one policy name (kv_aware_max = kv_aware + max)."""
    overrides = {
        field: getattr(args, flag)
        for flag, field in _WORKLOAD_FLAGS.items()
        if getattr(args, flag) is not None
    }
    workload = replace(WorkloadConfig(), **overrides)
    workload.validate()
    if workload.trace is not None:
        try:  # a bad trace is bad input, named by its line; read again by the simulator
            load_trace(workload.trace, workload.trace_step)
        except ValueError as e:
            raise UsageError(f"--trace: {e}") from None
    if args.calibration is not None:
        _points(args.calibration, "--calibration")  # the same: checked here, read by build
    scheduler = compared_config(policy)
    if policy in POLICY_NAMES and args.reservation is not None:
        scheduler.reservation = args.reservation
    scheduler.move_turns = not args.no_turn_moves
    if args.overload_factor is not None:
        scheduler.overload_factor = args.overload_factor
    cfg = SimConfig(
        gpus=args.gpus,
        gpu=args.gpu,
        model=args.model,
        tp=args.tp,
        cost=args.cost,
        step_s=args.step_s,
        calibration=args.calibration,
        kv_tokens=args.kv_tokens,
        max_num_seqs=args.max_num_seqs,
        seed=args.seed,
        scenario=args.scenario,
        workload=workload,
        scheduler=scheduler,
        tool_workers=args.tool_workers,
        steps=args.steps or 1,
        max_staleness=args.max_staleness,
        learner=LearnerConfig(
            colocated=args.learner == "colocated",
            gpus=args.learner_gpus,
            mfu=args.learner_mfu,
            epochs=args.learner_epochs,
            forwards=args.learner_forwards,
            train_fraction=args.train_fraction,
            push_bandwidth_gbs=args.push_bandwidth,
            push_latency_s=args.push_latency,
            update_s=args.update_s,
            push_s=args.push_s,
            metrics=args.learner_metrics,
        ),
        warm_predictor=not args.cold_predictor,
    )
    cfg.validate()
    cfg.scheduler.validate()
    return cfg


def _progress_bar(label: str, enabled: bool) -> ProgressFn | None:
    if not enabled:
        return None
    last = [0.0]

    def show(done: int, total: int, sim_t: float) -> None:
        now = time.perf_counter()
        if now - last[0] < 0.2 and done != total:
            return
        last[0] = now
        filled = 30 * done // total
        bar = "#" * filled + "." * (30 - filled)
        print(f"\r{label:<18} [{bar}] {done}/{total} sim t={sim_t:7.1f}s", end="", file=sys.stderr)
        if done == total:
            print(file=sys.stderr)

    return show


def simulate(args: argparse.Namespace, policy: str) -> SimResult:
    cfg = config_from_args(args, policy)
    log.debug("resolved config: %s", to_dict(cfg))
    progress = _progress_bar(policy, not (args.quiet or args.no_progress))
    result = build(cfg, progress).run()
    result.policy = policy
    return result


def run(args: argparse.Namespace) -> int:
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
    if args.action == "compare":
        check_out_dir(args.out_dir)
    policies = list(COMPARED_POLICIES) if args.action == "compare" else [args.policy]
    results = [simulate(args, p) for p in policies]
    if args.json:
        out = [r.summary() for r in results]
        print(json.dumps(out if args.action == "compare" else out[0], indent=2))
    else:
        print(table(results))
    if args.action == "compare":
        for path in write_plots(results, args.out_dir):
            log.info("wrote %s", path)
    return 0


def simulate_run(args: argparse.Namespace, max_staleness: int) -> RunResult:
    """A run of `--steps` steps (compare-staleness: 8 unless given) under this k."""
    args = argparse.Namespace(**vars(args))
    args.steps = args.steps or COMPARE_STALENESS_STEPS
    args.max_staleness = max_staleness
    cfg = config_from_args(args, args.policy)
    log.debug("resolved config: %s", to_dict(cfg))
    progress = _progress_bar(f"k={max_staleness}", not (args.quiet or args.no_progress))
    try:
        return build_run(cfg, progress).run_steps()
    except ValueError as e:  # a metrics file that does not match the trace
        raise UsageError(str(e)) from None


def check_out_dir(path: str) -> None:
    """--out-dir, before any simulation: a file there, or a directory that cannot be made or
    written (read-only, no permission), is one line now, not after minutes of work."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"argument --out-dir: not a directory: {out}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise UsageError(f"argument --out-dir: cannot write to {out} ({e.strerror})") from None


def _compare_staleness(args: argparse.Namespace) -> int:
    check_out_dir(args.out_dir)
    results = [simulate_run(args, k) for k in range(args.max_k + 1)]
    if args.json:
        print(json.dumps([r.summary() for r in results], indent=2))
    else:
        print(staleness_table(results))
    log.info("wrote %s", write_staleness_plot(results, args.out_dir))
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
    if args.engine:  # the one action that needs torch: imported only here (see the docstring)
        return int(importlib.import_module(ENGINE_FIDELITY).run(args))
    if args.points is None:
        raise UsageError("sim calibrate needs --points FILE or --engine")
    points = _points(args.points, "--points")
    cost = fit(points)
    report: dict[str, object] = {"fit": to_dict(cost), "points": len(points)}
    for name, path in (("fit_error", args.points), ("check_error", args.check)):
        if path is None:
            continue
        pts = _points(path, "--check")
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


def _points(path: str, flag: str) -> list[StepPoint]:
    """The measured steps of a user file; a file that holds none is bad input naming the flag."""
    try:
        return load_points(path)
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None
