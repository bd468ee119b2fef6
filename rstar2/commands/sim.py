"""`rstar2 sim`: simulate rollout scheduling policies on a virtual clock, without GPUs.

    rstar2 sim --gpus 64 --gpu mi300x --model qwen3-14b --policy kv_aware [--json]
    rstar2 sim compare [same options] [--json] [--out-dir DIR]
    rstar2 sim bound [same options] [--json]
    rstar2 sim calibrate --points FILE [--check FILE] [--json]
    rstar2 sim calibrate --engine [--model-dir DIR] [--threads N] [--json]

With no workload option the workload is the paper-scale step (512 prompts x 32 rollouts,
lognormal lengths capped at 12K, ~5 tool calls). `--json` prints, per policy, exactly the keys
policy, makespan_s, lower_bound_s, ratio_to_bound, preemptions, recomputed_tokens,
idle_fraction, tokens_per_s, events, wall_s (a list for `compare`). A progress bar goes to
stderr unless --quiet or --no-progress. `calibrate --engine` is the fidelity benchmark
(`sim.fidelity`): fit the cost model to the embedded CPU engine's measured steps, then predict
a different workload's makespan on that engine and report the error. `bound` prints the
terms of the workload's lower bound and its spread floor (`sim.bound`), simulating nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace

from rstar2.config import to_dict
from rstar2.engine.benchmark import tiny_random_model
from rstar2.engine.core import load_causal_lm
from rstar2.scheduler import POLICY_NAMES, SchedulerConfig
from sim.bound import bound_parts
from sim.config import SimConfig, build
from sim.cost import GPUS, MODELS, fit, load_points
from sim.fidelity import fidelity
from sim.report import table, write_plots
from sim.simulator import ProgressFn, SimResult
from sim.workload import SCENARIOS, WorkloadConfig

HELP = "simulate rollout scheduling policies without GPUs"
log = logging.getLogger(__name__)

COMPARED = (*POLICY_NAMES, "kv_aware_max")
"""Policies of `compare`: the five, plus kv_aware with the literal rStar2 'max' reservation."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", nargs="?", default="run", choices=["run", "compare", "calibrate", "bound"]
    )
    parser.add_argument("--policy", default="kv_aware", choices=COMPARED, help="routing policy")
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--gpu", default="mi300x", choices=sorted(GPUS))
    parser.add_argument("--model", default="qwen3-14b", choices=sorted(MODELS))
    parser.add_argument("--tp", type=int, default=0, help="GPUs per engine (0: auto)")
    parser.add_argument("--cost", default="roofline", choices=["roofline", "constant"])
    parser.add_argument(
        "--step-s", type=float, default=0.03, help="decode step time, --cost constant"
    )
    parser.add_argument("--calibration", help="JSON/CSV of measured steps to fit the cost model")
    parser.add_argument("--kv-tokens", type=int, help="override KV tokens per engine")
    parser.add_argument("--max-num-seqs", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", default="paper", choices=sorted(SCENARIOS))
    parser.add_argument("--prompts", type=int, help="prompts per step (default 512)")
    parser.add_argument("--rollouts", type=int, help="rollouts per prompt (default 32)")
    parser.add_argument("--mean-response", type=float, help="mean response tokens (default 4000)")
    parser.add_argument("--sigma", type=float, help="lognormal sigma (default 1.0)")
    parser.add_argument("--max-response", type=int, help="response budget (default 12288)")
    parser.add_argument("--tool-calls", type=float, help="mean tool calls per trajectory")
    parser.add_argument("--tool-latency", type=float, help="mean tool latency in s (default 0.3)")
    parser.add_argument(
        "--trace", help="replay a JSONL trace (e.g. RUN/rollout_trace.jsonl) instead of generating"
    )
    parser.add_argument(
        "--trace-step", type=int, help="with a trace of several steps: which (default: the last)"
    )
    _add_scheduler_arguments(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--out-dir", default="sim-out", help="compare: where the PNGs go")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--points", help="calibrate: measured steps (JSON or CSV)")
    parser.add_argument("--check", help="calibrate: other measured steps to predict")
    parser.add_argument(
        "--engine", action="store_true", help="calibrate: fidelity check on the embedded engine"
    )
    parser.add_argument(
        "--model-dir", help="calibrate --engine: local HF model (default: tiny random Qwen2)"
    )
    parser.add_argument("--threads", type=int, default=1, help="calibrate --engine: torch threads")


def _add_scheduler_arguments(parser: argparse.ArgumentParser) -> None:
    """The policy knobs of `rstar2 sim` (beyond --policy)."""
    parser.add_argument("--reservation", choices=["max", "predicted"], help="kv_aware reservation")
    parser.add_argument(
        "--cold-predictor",
        action="store_true",
        help="start the length predictor empty (a run's first step) instead of from the step "
        "before (an independent draw of the same workload, or a trace's earlier step)",
    )
    parser.add_argument(
        "--no-turn-moves",
        action="store_true",
        help="never move a later turn off its engine (scheduler.move_turns = false)",
    )
    parser.add_argument(
        "--overload-factor",
        type=float,
        help="kv_aware: move a turn off an engine holding more KV than this x the least-used"
        " engine's + 2%% of its capacity (default 1.3)",
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
    scheduler = SchedulerConfig(policy="kv_aware" if policy == "kv_aware_max" else policy)  # type: ignore[arg-type]
    if policy == "kv_aware_max":
        scheduler.reservation = "max"
    elif args.reservation is not None:
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
    policies = list(COMPARED) if args.action == "compare" else [args.policy]
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


def _calibrate(args: argparse.Namespace) -> int:
    if args.engine:
        return _fidelity(args)
    if args.points is None:
        print("rstar2 sim calibrate: error: --points FILE or --engine is required", file=sys.stderr)
        return 2
    points = load_points(args.points)
    cost = fit(points)
    report: dict[str, object] = {"fit": to_dict(cost), "points": len(points)}
    for name, path in (("fit_error", args.points), ("check_error", args.check)):
        if path is None:
            continue
        pts = load_points(path)
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
    print(
        json.dumps(report, indent=2)
        if args.json
        else "\n".join(f"{k}: {v}" for k, v in report.items())
    )
    return 0


def _fidelity(args: argparse.Namespace) -> int:
    model = load_causal_lm(args.model_dir) if args.model_dir else tiny_random_model()
    r = fidelity(model, threads=args.threads)
    report = {
        "fit": to_dict(r.cost),
        "calibration_steps": len(r.calibration.steps),
        "fit_step_error": round(r.fit_step_error, 4),
        "check_measured_s": round(r.check.makespan_s, 3),
        "check_predicted_s": round(r.predicted_makespan_s, 3),
        "makespan_error": round(r.makespan_error, 4),
        "check_preemptions": r.check.preemptions,
        "predicted_preemptions": r.predicted_preemptions,
    }
    print(
        json.dumps(report, indent=2)
        if args.json
        else "\n".join(f"{k}: {v}" for k, v in report.items())
    )
    return 0
