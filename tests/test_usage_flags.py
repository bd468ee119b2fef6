"""docs/usage.md's flag tables match the parsers (issue 32, item 6: usage.md as a reference).

Every `| flag | default | meaning |` table (and convert's `| command | argument or flag |
default | meaning |`) is read with the section it stands in, and compared with the argparse
parser of each command and sub-action, built in-process as `rstar2.cli` builds it:

- every flag and positional argument of a parser is a row of one of its tables, and every row
  names a flag (with all its spellings: `-v, --verbose`) or positional the parser has;
- the default column says `required` exactly for the required ones, `off` only for a switch
  that is off, `-` only where there is no default; otherwise it is the argparse default (or,
  where argparse has none and the command decides, the default its help text states), alone or
  followed by ':' or ' (' and an explanation, or one of the reworded defaults in
  `REWORDED_DEFAULTS`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rstar2 import cli
from rstar2.commands.bench import TargetParser

USAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"
HEADERS = ("| flag | default | meaning |", "| command | argument or flag | default | meaning |")

SHARED_TABLES = {
    "sandbox": ("sandbox exec", "sandbox serve", "sandbox bench", "sandbox soak"),
    "sim": ("sim", "sim run", "sim compare", "sim bound", "sim compare-staleness"),
}
"""A section's table of flags that several sub-actions share: usage.md's "Flags of all four
actions" (sandbox) and sim's table of what `run`, `compare`, `bound` and `compare-staleness`
take (`calibrate` has its own table); rows meant for only some of them say which at the start
of their meaning ("`compare-staleness`: ...")."""

NOT_TAKEN = {
    ("sim bound", "--no-progress"): "usage.md: `bound` takes every flag of the table but this",
    ("sim compare", "--policy"): "usage.md: `compare` runs every policy",
    ("sim compare-staleness", "--max-staleness"): "usage.md: it runs k = 0..--max-k",
}
"""(command, flag) of a shared table's row that a sub-action lacks, each said in usage.md's prose."""

REWORDED_DEFAULTS = {
    ("init-model", "--shape"): "tiny, the embedded default",  # as its --help says it
    # --help: "(default workload: the embedded train config)"
    ("profile", "--config"): "the embedded train config (default workload)",
    ("bench learner", "--compile"): "off here, so each optimisation is measured alone; "
    "learner.compile is on by default on GPUs",  # off, and why it differs from training's
    ("bench learner", "--compile-head"): "off here; learner.compile_head is on by default on "
    "GPUs; no effect with --padded",  # off, and why it differs from training's
}
"""(command, first flag) -> a documented default that does not start with the parser's."""


@dataclass(frozen=True)
class Row:
    line: int
    commands: tuple[str, ...]
    names: tuple[str, ...]  # `--compile, --no-compile` -> ("--compile", "--no-compile")
    default: str


def _cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [c.strip().replace("\\|", "|") for c in cells]


def _commands_named(text: str) -> list[str]:
    return re.findall(r"`rstar2 ([a-z][\w -]*?)`", text)


def _table_commands(heading: str, lead_in: str) -> list[str]:
    """The commands a table is for: a lead-in "`rstar2 top`:" or "`eval` only:" names them,
    else the section heading ("## `rstar2 eval` and `rstar2 chat`")."""
    if m := re.fullmatch(r"`rstar2 ([a-z][\w -]*)`:", lead_in):
        return [m.group(1)]
    if m := re.fullmatch(r"`([a-z][\w-]*)` only:", lead_in):
        return [m.group(1)]
    if heading.startswith("## Global flags"):
        return [""]
    named = _commands_named(heading)
    return [c for name in named for c in SHARED_TABLES.get(name, (name,))]


def _scope(meaning: str, commands: list[str]) -> list[str]:
    """A row whose meaning starts "`chat` only:" or "`compare`, `compare-staleness`:" is for
    those commands alone."""
    m = re.match(r"((?:`[\w-]+`(?:, )?)+)(?: only)?:", meaning)
    if not m:
        return commands
    names = re.findall(r"`([\w-]+)`", m.group(1))
    return [c for c in commands if c.split(" ")[-1] in names or c in names]


def doc_rows(text: str) -> list[Row]:
    rows: list[Row] = []
    heading, lead_in, commands, columns = "", "", None, 0
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.startswith("#"):
            heading, lead_in = line, ""
            continue
        if not line.startswith("|"):
            commands = None
            if line.strip():
                lead_in = line.strip()
            continue
        if line in HEADERS:
            commands, columns = _table_commands(heading, lead_in), len(_cells(line))
            assert commands, f"usage.md:{number}: a flag table under {heading!r} names no command"
            continue
        if commands is None or set(line) <= set("|-: "):
            continue
        cells = _cells(line)
        targets = list(commands)
        if columns == 4:  # convert's table: the first column names the command
            targets = [f"rstar2 {cells[0].strip('`')}".removeprefix("rstar2 ")]
            cells = cells[1:]
        flag, default, meaning = cells
        spelled = flag.strip("`").split(", ")
        names = tuple(s.split(" ")[0] for s in spelled)
        rows.append(Row(number, tuple(_scope(meaning, targets)), names, default))
    return rows


def _leaves(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                sub = sub.with_flags() if isinstance(sub, TargetParser) else sub
                yield from _leaves(sub, f"{path} {name}".strip())
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def parser_actions() -> dict[str, list[argparse.Action]]:
    """command ("" for `rstar2` itself, "sim compare") -> its actions (no --help)."""
    out: dict[str, list[argparse.Action]] = {}
    for path, action in _leaves(cli.build_parser(), ""):
        if path == "":
            out.setdefault("", []).append(action)
    for name in cli._available():
        parser = cli.build_parser(name)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for path, action in _leaves(sub.choices[name], name):
            out.setdefault(path, []).append(action)
    return out


def _names(action: argparse.Action) -> set[str]:
    if action.option_strings:
        return set(action.option_strings)
    return {action.dest, str(action.metavar)}


def _find(actions: list[argparse.Action], row: Row) -> argparse.Action | None:
    for action in actions:
        if action.option_strings and set(row.names) == set(action.option_strings):
            return action
        if not action.option_strings and row.names[0] in _names(action):
            return action
    return None


def _help_default(action: argparse.Action) -> str | None:
    m = re.search(r"(?:\(|; )default:? (.*)\)$", action.help or "", re.S)
    return " ".join(m.group(1).split()) if m else None


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def default_problem(command: str, row: Row, actions: list[argparse.Action]) -> str | None:
    """What is wrong with a row's default column (None: nothing). `actions`: the row's action
    in each of its commands; the default is that of the first one that has one (a sim action's
    flags default to SUPPRESS, `rstar2 sim`'s own hold the values)."""
    action = next((a for a in actions if a.default is not argparse.SUPPRESS), actions[0])
    doc, default = row.default, action.default
    if action.required or doc == "required":
        if action.required and doc == "required":
            return None
        return f"documented {doc!r}, the parser's is {'required' if action.required else 'not'}"
    switch = action.nargs == 0
    if isinstance(action, argparse._VersionAction):
        expected = "-"
    elif switch and default in (False, 0, argparse.SUPPRESS):
        expected = "off"
    elif default in (None, argparse.SUPPRESS, []):
        expected = _help_default(action) or "-"  # none, or the one the command decides
    else:
        expected = _shown(default)
    if doc == expected or doc.startswith((f"{expected}:", f"{expected} (")):
        return None
    if REWORDED_DEFAULTS.get((command, row.names[0])) == doc:
        return None
    return f"documented {doc!r}, the parser's is {expected!r}"


@pytest.fixture(scope="module")
def parsers() -> dict[str, list[argparse.Action]]:
    return parser_actions()


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return doc_rows(USAGE.read_text())


def test_every_flag_of_every_command_has_a_row(
    parsers: dict[str, list[argparse.Action]], rows: list[Row]
) -> None:
    missing = []
    for command, actions in parsers.items():
        documented = [r for r in rows if command in r.commands]
        for action in actions:
            if not any(_find([action], r) for r in documented):
                missing.append(f"rstar2 {command} {'/'.join(sorted(_names(action)))}".strip())
    assert not missing, "flags missing from docs/usage.md's tables:\n" + "\n".join(missing)


def test_every_row_names_a_flag_of_its_commands(
    parsers: dict[str, list[argparse.Action]], rows: list[Row]
) -> None:
    unknown = []
    for row in rows:
        assert row.commands, f"usage.md:{row.line}: a row for no command"
        for command in row.commands:
            if (command, row.names[0]) in NOT_TAKEN:
                continue
            if command not in parsers or _find(parsers[command], row) is None:
                unknown.append(
                    f"usage.md:{row.line}: rstar2 {command} has no {', '.join(row.names)}"
                )
    assert not unknown, "\n".join(unknown)


def test_no_flag_has_two_rows(rows: list[Row]) -> None:
    seen: dict[tuple[str, str], int] = {}
    twice = []
    for row in rows:
        for command in row.commands:
            if (command, row.names[0]) in seen:
                twice.append(f"usage.md:{row.line}: rstar2 {command} {row.names[0]} again")
            seen[(command, row.names[0])] = row.line
    assert not twice, "\n".join(twice)


def test_the_not_taken_flags_are_not_taken(parsers: dict[str, list[argparse.Action]]) -> None:
    for command, flag in NOT_TAKEN:
        assert not any(flag in a.option_strings for a in parsers[command]), (command, flag)


def test_every_default_column_matches_the_parser(
    parsers: dict[str, list[argparse.Action]], rows: list[Row]
) -> None:
    wrong = []
    for row in rows:
        found = [(c, _find(parsers.get(c, []), row)) for c in row.commands]
        actions = [a for _, a in found if a is not None]
        if actions:
            command = found[0][0]
            problem = default_problem(command, row, actions)
            if problem:
                wrong.append(f"usage.md:{row.line}: rstar2 {command} {row.names[0]}: {problem}")
    assert not wrong, "\n".join(wrong)
