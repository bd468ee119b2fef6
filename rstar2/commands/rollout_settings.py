"""The resolved settings of one `rstar2 eval` or `rstar2 chat` run (`resolve_settings`): the
config file's tables (or the training run's `[rollout]`, `rollout_options.training_run_config`),
then the flags; every value validated, the result logged once. `load_model_of(args)` loads
`--model`, a directory whose files do not load being one line naming the flag.

It imports the engine's config (and so torch): the commands load it only once their flags and
files have been checked (`rollout_options` is the light half).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import Any

from rstar2.commands.rollout_options import FLAG_KEYS, training_run_config
from rstar2.config import ConfigError, from_dict, load_file, override, to_dict
from rstar2.devices import resolve_device
from rstar2.engine.config import EngineConfig
from rstar2.model.loader import ModelFileError, load_model
from rstar2.reward import RewardConfig
from rstar2.rollout.config import RolloutConfig
from rstar2.sandbox.config import SandboxConfig

log = logging.getLogger(__name__)


@dataclass
class RunSettings:
    """The resolved settings of one eval or chat run."""

    rollout: RolloutConfig
    engine: EngineConfig
    sandbox: SandboxConfig
    reward: RewardConfig


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
    for dest, key in FLAG_KEYS.items():
        value = getattr(args, dest, None)
        if value is not None:
            rollout = override(rollout, key, value)
    settings = RunSettings(
        rollout=rollout,
        engine=from_dict(EngineConfig, data.get("engine", {}), "engine"),
        sandbox=from_dict(SandboxConfig, data.get("sandbox", {}), "sandbox"),
        reward=from_dict(RewardConfig, data.get("reward", {}), "reward"),
    )
    resolve_device(settings.engine.device, "engine.device")  # no GPU here: before the model loads
    r = settings.rollout
    log.info(
        "settings: max_response_tokens %d, max_turns %d, temperature %g, tool_timeout_s %g "
        "(-v logs every setting)",
        r.max_response_tokens, r.max_turns, r.temperature, r.tool_timeout_s,
    )  # fmt: skip
    log.debug("settings: %s", to_dict(settings))
    return settings


def load_model_of(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model and tokenizer of `--model`; files that do not load (a broken config.json, no
    or truncated weights) are a ConfigError naming the flag, not a traceback."""
    try:
        return load_model(args.model)
    except ModelFileError as e:
        raise ConfigError("--model", args.model, f"a model directory that loads ({e})") from None
