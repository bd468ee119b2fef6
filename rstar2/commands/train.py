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
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rstar2.commands.train_plan import dry_run_plan, print_plan
from rstar2.config import ConfigError, require
from rstar2.redaction import redact
from rstar2.train.config import TrainConfig, config_dict, load_train_config
from rstar2.train.resumption import locate, resumed_config

# torch, transformers and the trainer (`rstar2.train.runner`, `rstar2.learner.checkpoint`) are
# imported where they are first needed, after the config has been read and checked: the help
# and a config's errors come in well under a second (8.5 s with them imported here).

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML/YAML train config (default: the embedded tiny run)")
    parser.add_argument("--quick", action="store_true", help="a few-minute smoke run")
    parser.add_argument("--algo", choices=["roc", "grpo"], help="RL algorithm (default: roc)")
    parser.add_argument("--run-dir", help="run directory (default: runs/<time>-<algo>)")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue a run from its latest checkpoint (or from a checkpoint directory "
        "RUN/checkpoints/step-N); takes --set of what may change (graph.*, "
        "cluster.learner_ranks, eval/checkpoint cadence, stages.N.steps, a new stage), "
        "--processes and --backend",
    )
    parser.add_argument(
        "--processes", type=int,
        help="spread the actors over N local processes (default: the config's graph.processes)",
    )  # fmt: skip
    parser.add_argument(
        "--backend", choices=["asyncio", "trio"],
        help="event loop of the graph (default: the config's graph.backend)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, help="override the seed (default: the config's seed)")
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


@dataclass
class Plan:
    """What `rstar2 train` was asked to do: a new run, or a resumed one."""

    cfg: TrainConfig
    run_dir: Path
    resume: bool = False
    checkpoint: Path | None = None
    """The checkpoint a resumed run continues from (None: the latest)."""
    done_step: int = 0
    """A resumed run: the last RL step its checkpoint had trained."""


NOT_ON_RESUME = ("config", "quick", "algo", "seed", "run_dir")
"""Flags that define a new run; a resumed run keeps its own (see `rstar2.train.resumption`)."""


def resolve(args: argparse.Namespace) -> Plan:
    sets = list(args.set)
    if args.processes is not None:
        require(args.processes >= 1, "--processes", args.processes, "an integer >= 1")
        sets.append(f"graph.processes={args.processes}")
    if args.backend:
        sets.append(f"graph.backend={args.backend}")
    if args.resume:
        return _resumed(args, sets)
    if args.algo:
        sets.append(f"rl.algo={args.algo}")
    if args.seed is not None:
        sets.append(f"seed={args.seed}")
    cfg = load_train_config(args.config, quick=args.quick, sets=sets)
    name = time.strftime("%Y%m%d-%H%M%S") + f"-{cfg.rl.algo}"
    run_dir = Path(args.run_dir) if args.run_dir else Path("runs") / name
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError("--run-dir", str(run_dir), "a directory (that path is a file)")
    if (run_dir / "config.json").exists():
        raise ConfigError("--run-dir", str(run_dir), "a new directory (use --resume to continue)")
    if run_dir.is_dir() and any(run_dir.iterdir()):  # a run would mix its files with these
        raise ConfigError("--run-dir", str(run_dir), "a new or empty directory (it holds files)")
    return Plan(cfg, run_dir)


def _resumed(args: argparse.Namespace, sets: list[str]) -> Plan:
    for flag in NOT_ON_RESUME:
        value = getattr(args, flag)
        if value not in (None, False):
            raise ConfigError(
                "--" + flag.replace("_", "-"),
                value,
                "no such flag with --resume: a resumed run keeps its config (only "
                "--set of what may change, --processes and --backend apply; see "
                "`rstar2 train --help`)",
            )
    from rstar2.learner.checkpoint import load_checkpoint, load_latest

    run_dir, checkpoint = locate(args.resume)
    ck = load_checkpoint(checkpoint) if checkpoint else load_latest(run_dir)
    done = ck.step if ck is not None else 0
    return Plan(resumed_config(run_dir, sets, done), run_dir, True, checkpoint, done)


def log_config(cfg: TrainConfig, run_dir: Path) -> None:
    """The config in one short INFO line; the whole resolved config (several KB) goes to
    RUN/config.json (`run_training` writes it) and, with -v, to the log at DEBUG."""
    stages = ", ".join(f"{s.name} {s.steps} steps" for s in cfg.stages)
    log.info(
        "config: seed %d, %d prompts x %d rollouts a step, RL stages %s (resolved in full in "
        "%s; -v logs it)",
        cfg.seed, cfg.prompts_per_step, cfg.rollouts_per_prompt, stages, run_dir / "config.json",
    )  # fmt: skip
    log.debug("resolved config: %s", json.dumps(redact(config_dict(cfg))))


def run(args: argparse.Namespace) -> int:
    plan = resolve(args)
    cfg, run_dir = plan.cfg, plan.run_dir
    _check_problem_files(cfg, args.dry_run)
    if not plan.resume:  # a resumed run starts from its checkpoint, not model.path
        _check_model_path(cfg, args.dry_run)
    if args.dry_run:
        if args.json:
            print(json.dumps(dry_run_plan(cfg)))
        else:
            print_plan(cfg)
        return 0
    if plan.resume and plan.done_step >= cfg.total_steps and (run_dir / "summary.json").exists():
        print(
            f"{run_dir} is finished ({plan.done_step} RL steps): nothing to resume. To train "
            f"further: rstar2 train --resume {run_dir} --set stages.{len(cfg.stages) - 1}.steps=N"
        )
        return 0
    import torch

    from rstar2.train.runner import TrainingFailed, TrainingInterrupted, run_training

    cfg.check_devices(torch.cuda.device_count() if torch.cuda.is_available() else 0)
    _check_writable(run_dir)
    log.info("run directory: %s", run_dir)
    log_config(cfg, run_dir)
    try:
        with _sigterm_interrupts():
            summary = run_training(cfg, run_dir, resume=plan.resume, checkpoint=plan.checkpoint)
    except TrainingFailed as e:
        log.error("%s", e)
        return 1
    except TrainingInterrupted as e:
        return _interrupted(str(e), e.signal_name, run_dir)
    except KeyboardInterrupt:  # before the RL graph runs (SFT, model building)
        return _interrupted("interrupted", "SIGINT", run_dir)
    except _Terminated:
        return _interrupted("terminated", "SIGTERM", run_dir)
    if args.json:
        print(json.dumps(summary))
    else:
        sft, final = summary.get("sft_accuracy"), summary.get("final_accuracy")
        evals = summary.get("evaluations", {})
        test = ""
        if "test_final" in evals:
            test = (
                f"; test accuracy after SFT {_ci(evals.get('test_sft'))}, after RL "
                f"{_ci(evals['test_final'])}"
            )
        print(
            f"done: {summary['steps']} RL steps in {summary['wall_s'] / 60:.1f} min; "
            f"validation accuracy after SFT {_pct(sft)}, after RL {_pct(final)}{test}; "
            f"run directory {run_dir} (curves.png, metrics.jsonl; the policy: "
            f"rstar2 eval --model {run_dir})"
        )
    return 0


EXIT_SIGNAL = {"SIGINT": 130, "SIGTERM": 143}
"""Exit codes of a run a signal stopped: 128 + the signal's number, as shells report it."""


class _Terminated(Exception):
    """SIGTERM outside the RL graph (which handles signals itself)."""


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM ends SFT like Ctrl-C does (one line, an exit code), not with Python's default
    of dying mid-write."""

    def handler(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted(what: str, signal_name: str, run_dir: Path) -> int:
    print(f"rstar2 train: {what}; resume with `rstar2 train --resume {run_dir}`", file=sys.stderr)
    return EXIT_SIGNAL.get(signal_name, 130)


def _check_problem_files(cfg: TrainConfig, dry_run: bool) -> None:
    """Read the problem files before the dry run's verdict or the run directory (a bad row is
    one line, exit code 2, with nothing written). A dry run checks a config meant for another
    machine too: files that are not here are named in a warning, and the files are not checked."""
    absent = [
        f"{key} {path}"
        for key in ("data", "heldout_data", "test_data")
        if (path := getattr(cfg, key)) and not Path(path).exists()
    ]
    if dry_run and absent:
        log.warning("problem files not checked: not on this machine: %s", ", ".join(absent))
        return
    from rstar2.train.runner import check_splits

    check_splits(cfg)


def _check_model_path(cfg: TrainConfig, dry_run: bool) -> None:
    """A `model.path` that cannot load is one line before the run directory is made; a dry
    run names one that is not on this machine in a warning, as it does problem files."""
    path = cfg.model.path
    if dry_run and path and not Path(path).exists():
        log.warning("model.path not checked: not on this machine: %s", path)
        return
    from rstar2.train.runner import check_model_path

    check_model_path(cfg)


def _check_writable(run_dir: Path) -> None:
    """A run directory that cannot be written fails now, in one line, not mid-run."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(
            "--run-dir", str(run_dir), f"a writable directory ({e.strerror})"
        ) from None


def _ci(acc: dict[str, Any] | None) -> str:
    if not acc:
        return "-"
    low, high = acc["ci95"]
    return f"{_pct(acc['accuracy'])} (95% CI {_pct(low)}-{_pct(high)})"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
