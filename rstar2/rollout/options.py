"""Command-line options shared by `rstar2 eval` and `rstar2 chat`.

Settings come from an optional TOML file (`--config`: tables `[rollout]`, `[engine]`,
`[sandbox]`, `[reward]`, each validated by its component's dataclass) and a few flags that
override single rollout keys. Whatever is resolved is logged once at start.

What it does not do: open engines, sandboxes or reward pools (the commands do).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import Any

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
    parser.add_argument("--model", required=True, metavar="DIR", help="local HF model directory")
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


def resolve_settings(args: argparse.Namespace) -> RunSettings:
    """Config file tables, then flags; every value validated (ConfigError names the key)."""
    data: dict[str, Any] = load_file(args.config) if args.config else {}
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
