"""Command-line options shared by `rstar2 eval` and `rstar2 chat`.

Settings come from an optional TOML file (`--config`: tables `[rollout]`, `[engine]`,
`[sandbox]`, `[reward]`, each validated by its component's dataclass) and a few flags that
override single rollout keys. `--model` takes a model directory, or a run or checkpoint
directory for the policy it holds (`rstar2.run_layout.model_dir_of`). Without `--config`, a
model that a training run wrote (`RUN/model-rl`, `RUN/model-sft`,
`RUN/checkpoints/step-N/model`: a directory up to three levels below a run's
`config.json`) is rolled out with that run's `[rollout]` table, so the tool output format
(`tool_show_time`, `tool_output_chars`) and the budgets are the ones it was trained with.
Whatever is resolved is logged once at start.

What it does not do: open engines, sandboxes or reward pools (the commands do).
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rstar2.commands.arguments import model_directory
from rstar2.config import from_dict, load_file, override, to_dict
from rstar2.engine.config import EngineConfig
from rstar2.reward import RewardConfig
from rstar2.rollout.config import RolloutConfig
from rstar2.sandbox.config import SandboxConfig

log = logging.getLogger(__name__)

# flag dest -> rollout config key
_FLAG_KEYS = {
    "max_tokens": "max_response_tokens",
    "max_turns": "max_turns",
    "temperature": "temperature",
    "tool_timeout": "tool_timeout_s",
}


@dataclass
class RunSettings:
    """The resolved settings of one eval or chat run."""

    rollout: RolloutConfig
    engine: EngineConfig
    sandbox: SandboxConfig
    reward: RewardConfig


def add_rollout_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        required=True,
        metavar="DIR",
        type=model_directory,
        help="a local HF model directory, or a training run (its final RL policy, else its "
        "latest checkpoint's) or checkpoint directory (RUN/checkpoints/step-N)",
    )
    parser.add_argument(
        "--config", metavar="FILE",
        help="TOML with [rollout], [engine], [sandbox], [reward] tables",
    )  # fmt: skip
    parser.add_argument(
        "--max-tokens", type=int, metavar="N",
        help="token budget per trajectory, tool tokens included (rollout.max_response_tokens)",
    )  # fmt: skip
    parser.add_argument("--max-turns", type=int, metavar="N", help="assistant turn limit")
    parser.add_argument("--temperature", type=float, help="sampling temperature (0 = greedy)")
    parser.add_argument("--tool-timeout", type=float, metavar="S", help="seconds per tool call")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")


def training_run_config(
    model_dir: str | Path, levels: int = 3
) -> tuple[Path, dict[str, Any]] | None:
    """The `config.json` of the training run that wrote `model_dir`, and its contents, if any:
    the nearest one among its parents (up to `levels` up) holding a train config (`rollout`
    and `stages`)."""
    for parent in list(Path(model_dir).resolve().parents)[:levels]:
        path = parent / "config.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and "rollout" in data and "stages" in data:
            return path, data
    return None


def resolve_settings(args: argparse.Namespace) -> RunSettings:
    """Config file tables (or the training run's `[rollout]`), then flags; every value
    validated (ConfigError names the key)."""
    data: dict[str, Any] = load_file(args.config) if args.config else {}
    if not args.config and getattr(args, "model", None):
        run_config = training_run_config(args.model)
        if run_config is not None:
            path, run = run_config
            data = {"rollout": run["rollout"]}
            log.info("rollout settings of the training run %s (--config overrides)", path)
    rollout = from_dict(RolloutConfig, data.get("rollout", {}), "rollout")
    for dest, key in _FLAG_KEYS.items():
        value = getattr(args, dest, None)
        if value is not None:
            rollout = override(rollout, key, value)
    settings = RunSettings(
        rollout=rollout,
        engine=from_dict(EngineConfig, data.get("engine", {}), "engine"),
        sandbox=from_dict(SandboxConfig, data.get("sandbox", {}), "sandbox"),
        reward=from_dict(RewardConfig, data.get("reward", {}), "reward"),
    )
    log.info("settings: %s", to_dict(settings))
    return settings
