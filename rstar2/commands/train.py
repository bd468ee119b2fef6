"""`rstar2 train`: SFT then GRPO-RoC RL on the live actor graph, as one command.

With no arguments it runs the embedded default (`rstar2/configs/tiny.toml`) on a CPU: it
builds the tiny model, runs SFT, then the RL stages, printing one progress line per step, and
ends with a summary. Everything goes into the run directory: `config.json`, `model-init/`,
`model-sft/`, `metrics.jsonl`, `tensorboard/`, `curves.png`, `checkpoints/`, `summary.json`.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from rstar2.commands.train_plan import print_plan
from rstar2.config import ConfigError, require
from rstar2.train.config import TrainConfig, config_dict, load_train_config
from rstar2.train.runner import TrainingFailed, load_run_config, run_training

HELP = "run the full trainer (SFT then GRPO-RoC RL stages)"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML/YAML train config (default: the embedded tiny run)")
    parser.add_argument("--quick", action="store_true", help="a few-minute smoke run")
    parser.add_argument("--algo", choices=["roc", "grpo"], help="RL algorithm (default: roc)")
    parser.add_argument("--run-dir", help="run directory (default: runs/<time>-<algo>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its checkpoint")
    parser.add_argument("--processes", type=int, help="spread the actors over N local processes")
    parser.add_argument("--backend", choices=["asyncio", "trio"], help="event loop of the graph")
    parser.add_argument("--seed", type=int, help="override the seed")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key, e.g. --set rl.group_size=8 (repeatable)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="validate the config, print the placement and memory plan, exit",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def resolve(args: argparse.Namespace) -> tuple[TrainConfig, Path, bool]:
    if args.resume:
        run_dir = Path(args.resume)
        return load_run_config(run_dir), run_dir, True
    sets = list(args.set)
    if args.algo:
        sets.append(f"rl.algo={args.algo}")
    if args.processes is not None:
        require(args.processes >= 1, "--processes", args.processes, "an integer >= 1")
        sets.append(f"graph.processes={args.processes}")
    if args.backend:
        sets.append(f"graph.backend={args.backend}")
    if args.seed is not None:
        sets.append(f"seed={args.seed}")
    cfg = load_train_config(args.config, quick=args.quick, sets=sets)
    name = time.strftime("%Y%m%d-%H%M%S") + f"-{cfg.rl.algo}"
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / name
    if (run_dir / "config.json").exists():
        raise ConfigError("--run-dir", str(run_dir), "a new directory (use --resume to continue)")
    return cfg, run_dir, False


def run(args: argparse.Namespace) -> int:
    try:
        cfg, run_dir, resume = resolve(args)
    except FileNotFoundError as e:
        raise ConfigError("--resume", args.resume, str(e)) from None
    if args.dry_run:
        print_plan(cfg)
        return 0
    log.info("run directory: %s", run_dir)
    log.info("resolved config: %s", json.dumps(config_dict(cfg)))
    try:
        summary = run_training(cfg, run_dir, resume=resume)
    except TrainingFailed as e:
        log.error("%s", e)
        return 1
    if args.json:
        print(json.dumps(summary))
    else:
        sft, final = summary.get("sft_accuracy"), summary.get("final_accuracy")
        print(
            f"done: {summary['steps']} RL steps in {summary['wall_s'] / 60:.1f} min; "
            f"held-out accuracy after SFT {_pct(sft)}, after RL {_pct(final)}; "
            f"run directory {run_dir} (curves.png, metrics.jsonl)"
        )
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
