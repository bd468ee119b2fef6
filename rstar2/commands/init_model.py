"""`rstar2 init-model DIR`: create the embedded default model and tokenizer locally.

Optional `--shape NAME` starts from a named shape (`rstar2.model.tiny_config.SHAPES`: tiny,
25m, or the published shapes of Qwen2.5-0.5B / 1.5B with random weights, for measuring the
learner at those sizes) and `--config FILE` reads a TOML table `[model]` of `TinyModelConfig`
keys on top of it, or a train config's `[model.tiny]` (the model `rstar2 train --config FILE`
would build). An existing `DIR` (a file, or a directory that is not empty) is refused (exit
code 2) unless `--force`, which writes into it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rstar2.config import ConfigError, from_dict, load_file, to_dict
from rstar2.model.tiny_config import SHAPES, TinyModelConfig, shaped_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dir", metavar="DIR", help="directory to write the model and tokenizer into"
    )
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="tiny",
        help="named model shape (default: tiny, the embedded default)",
    )
    parser.add_argument(
        "--config",
        help="TOML file with a [model] table of TinyModelConfig keys, or a train config "
        "(its [model.tiny])",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="override model.seed (default: --config's, else 0)"
    )
    parser.add_argument(
        "--force", action="store_true", help="write into DIR even if it exists and is not empty"
    )


def run(args: argparse.Namespace) -> int:
    check_target(Path(args.dir), args.force)
    data = load_file(args.config).get("model", {}) if args.config else {}
    key = "model"
    if "tiny" in data or "path" in data:  # a train config: its [model.tiny] table
        if data.get("path"):
            raise ConfigError(
                "model.path",
                data["path"],
                '"" (this config trains the model at model.path; init-model builds tiny ones)',
            )
        data, key = data.get("tiny", {}), "model.tiny"
    base = to_dict(shaped_config(args.shape))
    cfg = from_dict(TinyModelConfig, {**base, **data}, key)
    if args.seed is not None:
        cfg.seed = args.seed
        cfg.validate()
    from rstar2.model.tiny import init_model  # torch, transformers: after the config's checks

    path = init_model(args.dir, cfg)
    print(path)
    return 0


def check_target(path: Path, force: bool) -> None:
    """Refuse to write over a file or a non-empty directory unless `force` (a file always)."""
    if path.exists() and not path.is_dir():
        raise ConfigError("DIR", str(path), "a directory (this is a file)")
    if not force and path.is_dir() and any(path.iterdir()):
        raise ConfigError("DIR", str(path), "a new or empty directory (--force to write into it)")
