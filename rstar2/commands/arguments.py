"""Argument types and the parser class shared by every `rstar2` subcommand.

- `positive_int`, `nonnegative_int`, `positive_float`, `nonnegative_float`, `int_list`,
  `model_directory`, `port_number`, `zmq_endpoint`: argparse `type=` callables; a bad value is
  argparse's one-line error naming the flag
  (`rstar2 sim: error: argument --prompts: expected an integer >= 1, got '0'`), exit code 2.
- `CommandParser`: an `ArgumentParser` whose errors are one line (no usage block) and whose
  help shows each flag's default (`HelpFormatter`). Subparsers inherit both, since
  `add_subparsers` makes its parsers of the parent's class.

What it does not do: validate config files (that is `rstar2.config`) or relations between flags
(each command checks those and raises `UsageError`).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from rstar2.config import ConfigError, UsageError
from rstar2.run_layout import model_dir_of, model_files_problem

EXIT_USAGE = 2
"""Exit code of bad input: a flag, a path or a file the command cannot use."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to a flag's help, except where that would be noise: no default
    (None), a switch (store_true, count), or a help text that already says its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default == [] or action.nargs == 0 or "default" in text:
            return action.help
        return super()._get_help_string(action)


class CommandParser(argparse.ArgumentParser):
    """An argument parser that reports a bad command line in one line on stderr (exit code 2)
    and shows defaults in `--help`."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(convert: Callable[[str], float], kind: str, low: float, strict: bool) -> Callable:
    bound = f"> {low:g}" if strict else f">= {low:g}"

    def parse(text: str) -> float:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind} {bound}, got {text!r}") from None
        if value != value or (value <= low if strict else value < low):  # NaN is out of range
            raise argparse.ArgumentTypeError(f"expected {kind} {bound}, got {text!r}")
        return value

    parse.__name__ = f"{kind.split()[-1]} {bound}"  # argparse names the type in some errors
    return parse


positive_int: Callable[[str], int] = _number(int, "an integer", 1, strict=False)
nonnegative_int: Callable[[str], int] = _number(int, "an integer", 0, strict=False)
positive_float: Callable[[str], float] = _number(float, "a number", 0, strict=True)
nonnegative_float: Callable[[str], float] = _number(float, "a number", 0, strict=False)


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer >= `low` (`positive_int` is `int_at_least(1)`)."""
    return _number(int, "an integer", low, strict=False)


def int_list(text: str) -> list[int]:
    """A comma-separated list of integers >= 1, e.g. "1,2,4,8" (empty items are skipped)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        values = [int(item) for item in items]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers >= 1, got {text!r}"
        ) from None
    return values


def model_directory(text: str) -> str:
    """A local Hugging Face model directory, or a run or checkpoint directory standing for the
    policy it holds (`rstar2.run_layout.model_dir_of`): the model directory meant."""
    try:
        path = model_dir_of(text)
    except OSError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    problem = model_files_problem(path, "a model, checkpoint or run directory")
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return str(path)


def port_number(text: str) -> int:
    """A TCP port, 0..65535 (0: any free one)."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0..65535, got {text!r}")
    return int(text)


def zmq_endpoint(text: str) -> str:
    """A ZeroMQ address rstar2 uses: inproc://NAME, ipc://PATH or tcp://HOST:PORT."""
    scheme, sep, rest = text.partition("://")
    port = rest.rpartition(":")[2]
    ok = sep and rest and scheme in ("inproc", "ipc", "tcp")
    if not ok or (scheme == "tcp" and not (port.isdigit() or port == "*")):
        raise argparse.ArgumentTypeError(
            f"expected inproc://NAME, ipc://PATH or tcp://HOST:PORT, got {text!r}"
        )
    return text


@contextmanager
def flag_names(flag_of: Callable[[str], str | None]) -> Iterator[None]:
    """Within: a `ConfigError` of a config key that a flag sets (`flag_of(key)`: the flag, or
    None) is raised again naming the flag, as the user typed it (`decode_steps`:
    `--decode-steps`)."""
    try:
        yield
    except ConfigError as e:
        flag = flag_of(e.key)
        if flag is None:
            raise
        raise ConfigError(flag, e.value, e.expected) from None


@contextmanager
def out_dir(path: str | Path, flag: str) -> Iterator[Path]:
    """An output directory, checked before the work in the block that fills it: a file there,
    or a directory that cannot be made or written (read-only, no permission), is one line now,
    not after minutes of work. It is made if missing; if the work then fails, the directories
    made here are removed again while they are empty (a failed command leaves none behind)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"argument {flag}: not a directory: {out}")
    made = [d for d in (out, *out.parents) if not d.exists()][::-1]  # outermost first
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as e:
        raise UsageError(f"argument {flag}: cannot write to {out} ({e.strerror})") from None
    try:
        yield out
    except BaseException:
        for d in reversed(made):
            try:
                d.rmdir()  # only an empty one
            except OSError:
                break
        raise
