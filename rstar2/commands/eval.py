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
`prompts_too_long`. A bad count flag (`--samples`, `--limit`, `--concurrency`) or an unusable
`--data` file is a `ConfigError` naming the flag (exit code 2).

What it does not do: pass@k for k > 1, or run on several engines (the trainer's rollout does).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import TextIO

import anyio

from rstar2.commands.rollout_options import RunSettings, add_rollout_arguments, resolve_settings
from rstar2.config import ConfigError
from rstar2.data import ANSWER_FIELDS, PROBLEM_FIELDS, BadRow, Problem, load_problems
from rstar2.engine.async_engine import open_engine
from rstar2.model import load_model, render_prompt
from rstar2.reward import open_reward_pool
from rstar2.rollout.evaluation import EvalItem, EvalSummary, evaluate, summarize
from rstar2.rollout.token_codec import TokenCodec
from rstar2.rollout.trajectory import Trajectory
from rstar2.sandbox.executor import open_executor

HELP = "evaluate a model on a problem set (pass@1, tool use)"
log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rollout_arguments(parser)
    parser.add_argument(
        "--data", required=True, metavar="FILE", help="JSONL, JSON or Parquet problems"
    )
    parser.add_argument("--samples", type=int, default=1, metavar="K", help="rollouts per problem")
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N problems")
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
        help="JSONL file for every trajectory (default: eval_trajectories.jsonl)",
    )  # fmt: skip
    parser.add_argument(
        "--concurrency", type=int, default=64, metavar="N", help="rollouts in flight at once"
    )
    parser.add_argument("--system", help="system prompt (default: the model's template default)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def run(args: argparse.Namespace) -> int:
    check_counts(args)
    problems = load_problem_set(args)
    settings = resolve_settings(args)
    summary = anyio.run(_evaluate, args, settings, problems)
    if args.json:
        print(json.dumps({**dataclasses.asdict(summary), "trajectories_file": args.out}))
    else:
        print_table(summary, args.out, sys.stdout)
    return 0


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


async def _evaluate(
    args: argparse.Namespace, settings: RunSettings, problems: list[Problem]
) -> EvalSummary:
    model, tok = load_model(args.model)
    codec = TokenCodec(tok)
    items = [EvalItem(p.id, render_prompt(tok, p.problem, args.system), p.answer) for p in problems]
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    bar = ProgressBar(len(items) * args.samples, sys.stderr)
    with out_path.open("w") as out:
        async with (
            open_engine(model, settings.engine, seed=args.seed) as engine,
            open_executor(settings.sandbox) as executor,
            open_reward_pool(settings.reward) as scorer,
        ):

            def on_done(traj: Trajectory, item: EvalItem) -> None:
                if traj.finish_reason == "prompt_too_long" and traj.sample == 0:
                    warn_too_long(traj, args.data, engine.core.max_model_len)
                out.write(json.dumps(trajectory_record(traj, item)) + "\n")
                bar.advance(traj.reward)

            trajs = await evaluate(
                engine, executor, scorer, codec, items, settings.rollout,
                samples=args.samples, seed=args.seed, concurrency=args.concurrency,
                on_done=on_done, context_limit=engine.core.max_model_len,
            )  # fmt: skip
    bar.close()
    log.info("wrote %d trajectories to %s", len(trajs), out_path)
    return summarize(trajs, args.samples)


def warn_too_long(traj: Trajectory, data: str, context_limit: int) -> None:
    """Name a problem whose prompt does not fit (once per problem: its sample 0)."""
    log.warning(
        "problem %s of %s: its prompt of %d tokens does not fit the model's context of %d "
        "tokens; scored 0 (finish reason prompt_too_long)",
        traj.prompt_id, data, traj.prompt_len, context_limit,
    )  # fmt: skip


def trajectory_record(traj: Trajectory, item: EvalItem) -> dict[str, object]:
    """One JSONL line: the trajectory's fields plus the reference answer."""
    return {**dataclasses.asdict(traj), "reference": item.reference}


class ProgressBar:
    """A one-line progress bar (redrawn in place on a terminal, every 10% otherwise)."""

    WIDTH = 30

    def __init__(self, total: int, out: TextIO) -> None:
        self.total = total
        self.out = out
        self.done = 0
        self.reward = 0.0
        self.tty = out.isatty()
        self._last_decile = -1

    def advance(self, reward: float) -> None:
        self.done += 1
        self.reward += reward
        decile = 10 * self.done // self.total
        if self.tty:
            self.out.write("\r" + self.line())
        elif decile != self._last_decile:
            self.out.write(self.line() + "\n")
        self._last_decile = decile
        self.out.flush()

    def line(self) -> str:
        filled = self.WIDTH * self.done // self.total
        mean = self.reward / self.done if self.done else 0.0
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        return f"eval [{bar}] {self.done}/{self.total} mean reward {mean:.3f}"

    def close(self) -> None:
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def print_table(summary: EvalSummary, out_file: str, out: TextIO) -> None:
    rows = [
        ("pass@1 (avg over samples)", f"{summary.pass_at_1:.4f}"),
        ("problems", str(summary.problems)),
        ("samples per problem", str(summary.samples)),
        ("mean response tokens", f"{summary.mean_response_tokens:.1f}"),
        ("tool calls per problem", f"{summary.tool_calls_per_problem:.2f}"),
        ("tool error rate", f"{summary.tool_error_rate:.3f}"),
        ("prompts too long (scored 0)", str(summary.prompts_too_long)),
        (
            "finish reasons",
            ", ".join(f"{k} {v}" for k, v in sorted(summary.finish_reasons.items())),
        ),
        ("trajectories", out_file),
    ]
    for name, value in rows:
        out.write(f"{name:<28}{value}\n")
