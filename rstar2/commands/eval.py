"""`rstar2 eval --model DIR --data FILE [--samples K] [--json]`: average pass@1 and tool use.

Runs K rollouts per problem with the code tool (real sandbox) over the embedded engine, scores
them with the reward pool, writes every trajectory to a JSONL file as it finishes, shows a
progress bar on stderr and prints the summary: a table, or with `--json` one object with the
keys `pass_at_1`, `samples`, `problems`, `mean_response_tokens`, `tool_calls_per_problem`,
`tool_error_rate`, `prompts_too_long` (and `finish_reasons`, `trajectories_file`). Works with
the embedded default and with any local Hugging Face model directory the embedded engine
supports.

A problem whose prompt does not fit the model's context does not stop the run: it is warned
about by id, written to the trajectories file with no response, finish reason
"prompt_too_long" and reward 0, and counted as not solved (in pass@1) and in
`prompts_too_long`.

This module is the light half: the flags, the problem file and `--out` are checked before
anything heavy is imported (a bad count flag is argparse's one line naming it, an unusable
`--data` file a `ConfigError` naming the flag: exit code 2, in well under a second); the
evaluation itself is `rstar2.commands.eval_run` (torch, the engine, the sandbox, the reward
pool), imported only then.

What it does not do: pass@k for k > 1, or run on several engines (the trainer's rollout does).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import tempfile
from pathlib import Path

from rstar2.commands.arguments import positive_int
from rstar2.commands.rollout_options import add_rollout_arguments
from rstar2.config import ConfigError, UsageError
from rstar2.data import ANSWER_FIELDS, PROBLEM_FIELDS, BadRow, Problem, load_problems

log = logging.getLogger(__name__)

EVAL_RUN = "rstar2.commands.eval_run"
"""The module that evaluates (torch and the engine), imported once the input is checked."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rollout_arguments(parser)
    parser.add_argument(
        "--data", required=True, metavar="FILE", help="JSONL, JSON or Parquet problems"
    )
    parser.add_argument(
        "--samples", type=positive_int, default=1, metavar="K", help="rollouts per problem"
    )
    parser.add_argument(
        "--limit", type=positive_int, metavar="N", help="only the first N problems (default: all)"
    )
    parser.add_argument(
        "--problem-field",
        help="problem text field; dots select a nested field (metadata.question); a chat list "
        f"gives its user turn (default: the first of {', '.join(PROBLEM_FIELDS)} the file has)",
    )
    parser.add_argument(
        "--answer-field",
        help="reference answer field (dotted: nested) "
        f"(default: the first of {', '.join(ANSWER_FIELDS)} the file has)",
    )
    parser.add_argument("--id-field", help="problem id field (default: the row number)")
    parser.add_argument(
        "--skip-bad-rows", action="store_true", help="skip and count bad rows instead of failing"
    )
    parser.add_argument(
        "--out", default="eval_trajectories.jsonl", metavar="FILE",
        help="JSONL file for every trajectory",
    )  # fmt: skip
    parser.add_argument(
        "--concurrency", type=positive_int, default=64, metavar="N",
        help="rollouts in flight at once",
    )  # fmt: skip
    parser.add_argument("--system", help="system prompt (default: the model's template default)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def run(args: argparse.Namespace) -> int:
    check_counts(args)
    problems = load_problem_set(args)
    check_out(args.out)
    return int(importlib.import_module(EVAL_RUN).run_eval(args, problems))


def check_out(path: str) -> None:
    """--out, before any work: its directory must be makeable and writable, and the path not
    a directory (one line, exit code 2, instead of a failure after the model has loaded)."""
    out = Path(path)
    if out.is_dir():
        raise UsageError(f"argument --out: is a directory: {out}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out.parent):
            pass
    except OSError as e:
        raise UsageError(f"argument --out: cannot write to {out.parent} ({e.strerror})") from None


def check_counts(args: argparse.Namespace) -> None:
    """Every count flag is an integer >= 1 (`--limit` when given); ConfigError names the flag."""
    for flag, value in (
        ("--samples", args.samples),
        ("--limit", args.limit),
        ("--concurrency", args.concurrency),
    ):
        if value is not None and value < 1:
            raise ConfigError(flag, value, "an integer >= 1")


FIELD_HINT = "; --problem-field, --answer-field and --id-field name the fields"


def problem_file_error(e: Exception) -> str:
    """A problem file's error as one line: an OSError's reason and path, else its message."""
    if isinstance(e, OSError) and e.strerror and e.filename:
        return f"{e.strerror}: {e.filename}"
    return str(e)


def load_problem_set(args: argparse.Namespace) -> list[Problem]:
    """The problems to evaluate; a missing file or a bad row is a one-line error, not a
    traceback (ConfigError on `--data`, the loader's message naming the file and line)."""
    try:
        loaded = load_problems(
            args.data, args.problem_field, args.answer_field, args.id_field, args.skip_bad_rows
        )
    except BadRow as e:  # named by file and line
        hint = FIELD_HINT if "missing field" in str(e) else ""
        raise ConfigError("--data", args.data, f"a usable problem file ({e}{hint})") from None
    except (OSError, ValueError) as e:  # missing file, a directory, not JSON/Parquet
        reason = problem_file_error(e)
        raise ConfigError("--data", args.data, f"a usable problem file ({reason})") from None
    if loaded.skipped:
        log.warning("skipped %d bad rows of %s", loaded.skipped, args.data)
    problems = loaded.problems
    if args.limit is not None:
        problems = problems[: args.limit]
    if not problems:
        raise ConfigError("--data", args.data, "a file with at least one problem")
    return problems
