"""`rstar2 experiment`: named arms x envs x seeds, one table (mean +- sd, 95% CI) and plots.

Parses the flags and calls `rstar2.train.experiment_runner.run_experiment`; the plan, the
equal-compute rule and the interval are documented there and in `rstar2.train.experiment`.
Progress lines (one per arm start and end) go to stderr, the table (or `--json`) to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rstar2.commands.arguments import nonnegative_float, nonnegative_int
from rstar2.config import ConfigError
from rstar2.train.experiment import ARMS, ENVS, parse_names

if TYPE_CHECKING:
    from rstar2.train.experiment_runner import ExperimentSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML/YAML train config (default: the embedded tiny run)")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated arms")
    parser.add_argument("--envs", default=",".join(ENVS), help="comma-separated environments")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (integers >= 0)")
    parser.add_argument(
        "--fault-rate",
        type=nonnegative_float,
        default=0.1,
        help="sandbox.fault_rate of the noisy environment",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key of every run, e.g. --set stages.0.steps=40 (repeatable)",
    )
    parser.add_argument(
        "--sft-best-steps",
        type=nonnegative_int,
        default=0,
        help="sft_best: further SFT steps (default 0: as many as sft.steps)",
    )
    parser.add_argument(
        "--sft-best-every",
        type=nonnegative_int,
        default=0,
        help="sft_best: a checkpoint evaluated on validation every N steps (default 0: a "
        "quarter of the steps)",
    )
    parser.add_argument(
        "--sft-min-validation",
        type=nonnegative_float,
        default=0.05,
        help="a seed's SFT below this validation accuracy is trained again from another "
        "initialisation (default 0.05; 0: never)",
    )
    parser.add_argument(
        "--sft-attempts",
        type=nonnegative_int,
        default=3,
        help="SFT attempts per seed at most, the first included (default 3); with none at "
        "the level the best is kept",
    )
    parser.add_argument("--out", required=True, help="experiment directory (reruns resume it)")
    parser.add_argument("--json", action="store_true", help="print results.json to stdout")


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds or min(seeds) < 0:
        raise ConfigError("--seeds", text, "comma-separated integers >= 0")
    return seeds


def spec_of(args: argparse.Namespace) -> ExperimentSpec:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", str(out), "a directory (that path is a file)")
    arms = parse_names(args.arms, ARMS, "--arms")
    envs = parse_names(args.envs, ENVS, "--envs")
    seeds = _seeds(args.seeds)
    from rstar2.train.experiment_runner import ExperimentSpec  # torch: after the flags' checks

    return ExperimentSpec(
        out=out,
        config=args.config,
        sets=list(args.set),
        arms=arms,
        envs=envs,
        seeds=seeds,
        fault_rate=args.fault_rate,
        best_steps=args.sft_best_steps,
        best_every=args.sft_best_every,
        sft_min_validation=args.sft_min_validation,
        sft_attempts=args.sft_attempts,
    )


def run(args: argparse.Namespace) -> int:
    spec = spec_of(args)
    spec.out.mkdir(parents=True, exist_ok=True)
    from rstar2.train.experiment_runner import run_experiment

    try:
        results = run_experiment(spec, lambda line: print(line, file=sys.stderr, flush=True))
    except KeyboardInterrupt:  # Ctrl-C, or a signal that stopped an arm's training graph
        print(
            f"rstar2 experiment: the same command goes on from the arms finished in {spec.out}",
            file=sys.stderr,
        )
        raise  # the CLI's exit code: 130, or 143 for SIGTERM
    if args.json:
        print(json.dumps(results))
    else:
        print(results["table_text"])
        if results["differences_text"]:
            print("paired differences (seed by seed):")
            print(results["differences_text"])
        print(
            f"results: {spec.out / 'results.json'}; plots: {spec.out / 'accuracy.png'}, "
            f"{spec.out / 'tool_error_ratio_correct.png'}"
        )
    return 0
