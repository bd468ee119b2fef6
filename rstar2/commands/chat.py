"""`rstar2 chat --model DIR "question"`: one tool-using conversation, printed as it happens.

Each assistant turn, each tool call (parsed code and stdin, or the parse error) and each tool
response is printed to stdout as soon as the loop produces it, then the final answer (the
reward's extraction rule) and how the conversation ended. The code runs in the real sandbox.

This module is the light half: the flags are checked before anything heavy is imported; the
conversation is `rstar2.commands.chat_run` (torch, the engine, the sandbox).

What it does not do: keep a multi-question session or score the answer (see `rstar2 eval`).
"""

from __future__ import annotations

import argparse
import importlib

from rstar2.commands.rollout_options import add_rollout_arguments

CHAT_RUN = "rstar2.commands.chat_run"
"""The module that holds the conversation (torch and the engine), imported after the flags."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("question", help="the problem to solve")
    add_rollout_arguments(parser)
    parser.add_argument("--system", help="system prompt (default: the model's template default)")


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(CHAT_RUN).run_chat(args))
