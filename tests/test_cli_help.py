"""Every option of every `rstar2` command shows its default in `--help` (issue 34 row 16)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from rstar2 import cli
from rstar2.commands.arguments import HelpFormatter
from rstar2.commands.bench import TargetParser

OPTIONAL_INPUTS = {
    ("train", "--resume"),
    ("analyze", "--compare-model"),
    ("init-model", "--config"),
    *((f"sandbox {a}", "--config") for a in ("exec", "bench", "serve", "soak")),
    ("sandbox bench", "--http"),
    ("sandbox bench", "--token-file"),
    ("sandbox serve", "--bind"),
    ("sandbox serve", "--http"),
    ("sandbox serve", "--curve-keys"),
    ("sandbox serve", "--tls-cert"),
    ("sandbox serve", "--tls-key"),
    ("sandbox serve", "--token-file"),
    *(
        (command, flag)
        for command in ("sim", "sim run", "sim compare", "sim bound", "sim compare-staleness")
        for flag in ("--calibration", "--trace", "--learner-metrics")
    ),
    ("sim calibrate", "--points"),
    ("sim calibrate", "--check"),
    ("sim calibrate", "--save-points"),
    ("bench learner", "--trace"),
    ("profile", "--graph"),
    ("profile", "--synthetic"),
    ("view", "--token-file"),
}
"""Options that are absent unless given (a file to read, an address to serve at, a mode): their
help says what they do, and there is no default value to show."""


def options(parser: argparse.ArgumentParser, command: str) -> Iterator[tuple[str, argparse.Action]]:
    """(command, action) of every option that takes a value, subcommands' included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                sub = sub.with_flags() if isinstance(sub, TargetParser) else sub
                yield from options(sub, f"{command} {name}")
        elif action.option_strings and action.nargs != 0 and not action.required:
            repeatable = isinstance(action, argparse._AppendAction)  # --set: none unless given
            if action.help != argparse.SUPPRESS and not repeatable:
                yield command, action


def every_option() -> list[tuple[str, argparse.Action]]:
    out = []
    for name in cli._available():
        parser = cli.build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        out.extend(options(sub.choices[name], name))
    return out


def test_every_option_of_every_command_shows_its_default() -> None:
    # train --seed/--processes/--backend and sim --tool-calls/--reservation showed none
    formatter = HelpFormatter("rstar2")
    missing = [
        f"{command} {action.option_strings[-1]}"
        for command, action in every_option()
        if "default" not in (formatter._get_help_string(action) or "")
        and (command, action.option_strings[-1]) not in OPTIONAL_INPUTS
    ]
    assert missing == []


@pytest.mark.parametrize(("command", "flag"), sorted(OPTIONAL_INPUTS))
def test_an_optional_input_has_no_default_to_show(command: str, flag: str) -> None:
    found = [a for c, a in every_option() if c == command and a.option_strings[-1] == flag]
    assert found and all(a.default in (None, argparse.SUPPRESS) for a in found)
