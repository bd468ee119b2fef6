"""`rstar2 bench TARGET`: benchmarks that print measured figures (never timed assertions).

Each target lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`.
Only the chosen target's module is imported, when the command line is parsed (`TargetParser`):
`bench bus` is light (no torch), while `engine`, `train` and `learner` load torch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from collections.abc import Sequence
from typing import Any

from rstar2.commands.arguments import CommandParser

TARGETS: dict[str, tuple[str, str]] = {
    "bus": ("rstar2.commands.bench_bus", "actor bus throughput/latency vs bare pyzmq"),
    "engine": ("rstar2.commands.bench_engine", "embedded engine vs HF generate tokens/s"),
    "train": ("rstar2.commands.bench_train", "RL completions/s and step time split"),
    "learner": ("rstar2.commands.bench_learner", "RL update tokens/s, memory, MFU; 1 or N ranks"),
}


class TargetParser(CommandParser):
    """A target's parser, whose flags (its module's `add_arguments`) are added when it first
    parses, that is when the command line names the target, or on `with_flags()` for a
    caller that reads the flags without parsing (`--help` tables, tests)."""

    module_name = ""
    """The target's module."""
    _has_flags = False

    def with_flags(self) -> TargetParser:
        if not self._has_flags:
            self._has_flags = True
            importlib.import_module(self.module_name).add_arguments(self)
        return self

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[argparse.Namespace, list[str]]:
        return super(TargetParser, self.with_flags()).parse_known_args(args, namespace)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(
        dest="target", metavar="TARGET", required=True, parser_class=TargetParser
    )
    for name, (module_name, help_text) in TARGETS.items():
        if importlib.util.find_spec(module_name) is None:
            continue
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.module_name = module_name


def run(args: argparse.Namespace) -> int:
    module_name, _ = TARGETS[args.target]
    return int(importlib.import_module(module_name).run(args) or 0)
