"""Command-line options shared by `rstar2 eval` and `rstar2 chat`.

Settings come from an optional TOML file (`--config`: tables `[rollout]`, `[engine]`,
`[sandbox]`, `[reward]`, each validated by its component's dataclass) and a few flags that
override single rollout keys. `--model` takes a model directory, or a run or checkpoint
directory for the policy it holds (`rstar2.run_layout.model_dir_of`). Without `--config`, a
model that a training run wrote (`RUN/model-rl`, `RUN/model-sft`,
`RUN/checkpoints/step-N/model`: a directory up to three levels below a run's
`config.json`) is rolled out with that run's `[rollout]` table, so the tool output format
(`tool_show_time`, `tool_output_chars`) and the budgets are the ones it was trained with.
Whatever is resolved is logged once at start (`rollout_settings.resolve_settings`).

This module is the light half: the flags and the run's config lookup, importing nothing heavy, so
that a bad flag is refused before torch loads. What it does not do: resolve the settings
(`rollout_settings`, which imports the engine's config) or open engines, sandboxes or reward
pools (the commands do).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rstar2.commands.arguments import (
    model_directory,
    nonnegative_float,
    positive_float,
    positive_int,
)
from rstar2.rollout.config import RolloutConfig

FLAG_KEYS = {
    "max_tokens": "max_response_tokens",
    "max_turns": "max_turns",
    "temperature": "temperature",
    "tool_timeout": "tool_timeout_s",
}
"""Flag dest -> the `[rollout]` key it overrides."""
RUN_DEFAULT = "or the training run's [rollout], or --config's"


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
        help="TOML with [rollout], [engine], [sandbox], [reward] tables (default: none: the "
        "training run's [rollout] when --model is one's, else the built-in settings)",
    )  # fmt: skip
    parser.add_argument(
        "--max-tokens", type=positive_int, metavar="N",
        help="token budget per trajectory, tool tokens included (rollout.max_response_tokens) "
        f"(default: {RolloutConfig.max_response_tokens}, {RUN_DEFAULT})",
    )  # fmt: skip
    parser.add_argument(
        "--max-turns", type=positive_int, metavar="N",
        help=f"assistant turn limit (default: {RolloutConfig.max_turns}, {RUN_DEFAULT})",
    )  # fmt: skip
    parser.add_argument(
        "--temperature", type=nonnegative_float,
        help=f"sampling temperature, 0 = greedy (default: {RolloutConfig.temperature}, "
        f"{RUN_DEFAULT})",
    )  # fmt: skip
    parser.add_argument(
        "--tool-timeout", type=positive_float, metavar="S",
        help=f"seconds per tool call (default: {RolloutConfig.tool_timeout_s}, {RUN_DEFAULT})",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")


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
