"""`rstar2 init-model DIR`: create the embedded default model and tokenizer locally.

Optional `--config FILE` reads a TOML table `[model]` of `TinyModelConfig` keys.
"""

from __future__ import annotations

import argparse

from rstar2.config import from_dict, load_file
from rstar2.model import TinyModelConfig, init_model

HELP = "create the tiny embedded default model locally"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="directory to write the model and tokenizer into")
    parser.add_argument("--config", help="TOML file with a [model] table of TinyModelConfig keys")
    parser.add_argument("--seed", type=int, default=None, help="override model.seed")


def run(args: argparse.Namespace) -> int:
    data = load_file(args.config).get("model", {}) if args.config else {}
    cfg = from_dict(TinyModelConfig, data, "model")
    if args.seed is not None:
        cfg.seed = args.seed
        cfg.validate()
    path = init_model(args.dir, cfg)
    print(path)
    return 0
