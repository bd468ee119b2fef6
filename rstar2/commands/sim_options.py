"""The options of `rstar2 sim` and its actions, and the `SimConfig` they describe.

`add_run_options(parser, suppress)` adds the cluster, workload, scheduler and learner options
(with `suppress`, no defaults: after an action they must not overwrite what was given before
it); `add_calibrate_options` those of `calibrate`; `config_from_args(args, policy)` turns the
parsed flags into a validated `SimConfig`, a bad trace or calibration file a `UsageError`
naming its flag (`measured_points`).

What it does not do: simulate or print anything (`rstar2.commands.sim`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace

from rstar2.commands.arguments import (
    model_directory,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
)
from rstar2.config import UsageError
from rstar2.scheduler import COMPARED_POLICIES, POLICY_NAMES, compared_config
from sim.config import LearnerConfig, SimConfig
from sim.cost import GPUS, MODELS, StepPoint, load_points
from sim.workload import SCENARIOS, WorkloadConfig, load_trace

_AddOption = Callable[..., None]
"""`add_run_options`'s `add`: `parser.add_argument`, with defaults suppressed after an action."""


def add_run_options(
    parser: argparse.ArgumentParser,
    suppress: bool,
    without: tuple[str, ...] = (),
    defer: tuple[str, ...] = (),
) -> dict[str, object]:
    """The cluster, workload and policy options, and --json; not the flags `without` (an
    action that sets them itself: given to it, they are an unrecognized argument, not ignored).
    The flags `defer` parse to None when not given, so that a caller can tell them given; their
    defaults are returned by destination, for the caller to fill in (`apply_deferred`)."""
    deferred: dict[str, object] = {}

    def add(*flags: str, default: object = None, help: str = "", **kwargs: object) -> None:
        if flags[0] in without:
            return
        if suppress or flags[0] in defer:
            if default is not None and default is not False:
                help += f" (default: {default})"
        if flags[0] in defer:
            deferred[dest_of(flags[0])] = default
            default = None
        if suppress:
            default = argparse.SUPPRESS
        parser.add_argument(*flags, default=default, help=help, **kwargs)  # type: ignore[arg-type]

    _add_cluster_options(add)
    _add_workload_options(add)
    _add_scheduler_options(add)
    _add_learner_options(add)
    add("--json", action="store_true", default=False, help="machine-readable output")
    return deferred


def dest_of(flag: str) -> str:
    """The attribute argparse stores `flag` in: `--max-staleness` -> `max_staleness`."""
    return flag.lstrip("-").replace("-", "_")


def apply_deferred(args: argparse.Namespace, deferred: dict[str, object]) -> None:
    """Give the deferred flags (`add_run_options`' `defer`) that were not given their default."""
    for dest, default in deferred.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, default)


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


def add_calibrate_options(parser: argparse.ArgumentParser) -> None:
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
    for flag, value in (
        ("--trace-step", args.trace_step),
        ("--learner-metrics", args.learner_metrics),
    ):
        if value is not None and args.trace is None:
            raise UsageError(f"{flag} is for --trace (a rollout_trace.jsonl of a run)")
    workload = replace(WorkloadConfig(), **overrides)
    workload.validate()
    if workload.trace is not None:
        try:  # a bad trace is bad input, named by its line; read again by the simulator
            load_trace(workload.trace, workload.trace_step)
        except OSError as e:  # missing, a directory, unreadable
            raise UsageError(f"argument --trace: {workload.trace}: {e.strerror}") from None
        except ValueError as e:
            raise UsageError(f"argument --trace: {e}") from None
    if args.calibration is not None:
        measured_points(args.calibration, "--calibration")  # the same: checked here, read by build
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


def flag_of(key: str, args: argparse.Namespace) -> str | None:
    """The `sim` flag that sets config key `key`, None when none does: `learner.mfu` is
    `--learner-mfu`, `tp` is `--tp`, `workload.sigma` is `--sigma`. `rstar2.commands.sim.run`
    names a bad value by it (`arguments.flag_names`)."""
    workload_flags = {field: flag for flag, field in _WORKLOAD_FLAGS.items()}
    last = key.rpartition(".")[2]
    for dest in (key.replace(".", "_"), last, workload_flags.get(last, "")):
        if dest and dest in vars(args):
            return "--" + dest.replace("_", "-")
    return None


def measured_points(path: str, flag: str) -> list[StepPoint]:
    """The measured steps of a user file; a file that holds fewer than the fit's two is bad input
    naming the flag."""
    try:
        points = load_points(path)
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None
    if len(points) < 2:  # a line needs two points; an empty list or a CSV header alone has none
        raise UsageError(f"{flag}: {path} holds {len(points)} measured step(s): the fit needs 2+")
    return points
