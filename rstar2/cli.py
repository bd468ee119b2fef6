"""The `rstar2` command line: one entry point, one module per subcommand.

Each subcommand lives in `rstar2/commands/<name>.py` and exposes `HELP` (one line),
`add_arguments(parser)` and `run(args) -> int`. Only the chosen subcommand's module is imported,
so `rstar2 --help` stays fast and a heavy dependency (torch) is loaded only by commands that use
it. Logging is configured here (`rstar2.log_format`), and alike in the graph's spawned
processes, nowhere else. A `ConfigError` (bad config key or value) becomes a one-line
message and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
from types import ModuleType

from rstar2.config import ConfigError
from rstar2.log_format import setup_logging

# name -> (module, one-line help). Help strings live here so `--help` imports nothing heavy.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("rstar2.commands.train", "run the full trainer (SFT then GRPO-RoC RL stages)"),
    "eval": ("rstar2.commands.eval", "evaluate a model on a problem set (pass@1, tool use)"),
    "chat": ("rstar2.commands.chat", "one tool-using conversation, printed as it happens"),
    "init-model": ("rstar2.commands.init_model", "create the tiny embedded default model locally"),
    "convert": ("rstar2.commands.convert", "convert a checkpoint into an rstar2 model directory"),
    "sandbox": (
        "rstar2.commands.sandbox",
        "the isolated Python code executor (exec, serve, bench)",
    ),
    "reward": ("rstar2.commands.reward", "answer extraction and verification (verify)"),
    "sim": ("rstar2.commands.sim", "simulate rollout scheduling policies without GPUs"),
    "bench": ("rstar2.commands.bench", "benchmarks: bus, engine, train, learner"),
    "profile": ("rstar2.commands.profile", "trace a short run and name the bottleneck actor"),
    "top": ("rstar2.commands.top", "live per-actor rates, queue depths and busy share"),
    "launch": ("rstar2.commands.launch", "start this node's share of a multi-host graph"),
}

log = logging.getLogger("rstar2")


def _load(name: str) -> ModuleType:
    module_name, _ = COMMANDS[name]
    return importlib.import_module(module_name)


def _available() -> dict[str, tuple[str, str]]:
    """Commands whose module exists in this checkout (work in progress lands one by one)."""
    out = {}
    for name, (module_name, help_text) in COMMANDS.items():
        if importlib.util.find_spec(module_name) is not None:
            out[name] = (module_name, help_text)
    return out


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rstar2", description="Agentic RL of language models with a code tool."
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in _available().items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            _load(name).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # weight-loading progress bars of transformers/huggingface_hub would interleave with our
    # one-line-per-step progress output; set before any command module imports transformers
    # (spawned children inherit it)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    selected = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(selected if selected in _available() else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    setup_logging(args.verbose, args.quiet)
    try:
        return int(_load(args.command).run(args) or 0)
    except ConfigError as e:
        print(f"rstar2 {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rstar2 {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
