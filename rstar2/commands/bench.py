"""`rstar2 bench TARGET`: benchmarks that print measured figures (never timed assertions).

Each target lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util

TARGETS: dict[str, tuple[str, str]] = {
    "bus": ("rstar2.commands.bench_bus", "actor bus throughput/latency vs bare pyzmq"),
    "engine": ("rstar2.commands.bench_engine", "embedded engine vs HF generate tokens/s"),
    "train": ("rstar2.commands.bench_train", "RL completions/s and step time split"),
    "learner": ("rstar2.commands.bench_learner", "RL update tokens/s, memory, MFU; 1 or N ranks"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    for name, (module_name, help_text) in TARGETS.items():
        if importlib.util.find_spec(module_name) is None:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(module_name).add_arguments(p)


def run(args: argparse.Namespace) -> int:
    module_name, _ = TARGETS[args.target]
    return int(importlib.import_module(module_name).run(args) or 0)
