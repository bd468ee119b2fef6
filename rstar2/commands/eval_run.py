"""The heavy half of `rstar2 eval` (see `rstar2.commands.eval`, which checks the input first):
load the model, run and score the rollouts, write every trajectory as it finishes, print the
summary. The memory stays bounded by the rollouts in flight (`--concurrency`), whatever
`--samples` is: the rollouts are pulled from one iterator by a fixed pool of workers
(`rstar2.rollout.evaluation`), written out as they finish (`LineFile`: whole lines only) and
counted into a running tally. Ctrl-C (or a write error) stops the run at once; the file then
holds the whole lines of the trajectories finished before, and a warning says how many.

What it does not do: check flags or read the problem file (the light half does).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import anyio
import msgspec

from rstar2.commands.line_file import LineFile
from rstar2.commands.rollout_settings import RunSettings, load_model_of, resolve_settings
from rstar2.data import Problem
from rstar2.engine.async_engine import open_engine
from rstar2.model.chat_format import render_prompt
from rstar2.reward import open_reward_pool
from rstar2.reward.extraction import extract_answer
from rstar2.rollout.conversation import conversation, logprob_summary
from rstar2.rollout.evaluation import EvalItem, EvalSummary, evaluate
from rstar2.rollout.token_codec import TokenCodec
from rstar2.sandbox.executor import open_executor
from rstar2.wire import Trajectory

log = logging.getLogger(__name__)


def run_eval(args: argparse.Namespace, problems: list[Problem]) -> int:
    settings = resolve_settings(args)
    summary = anyio.run(_evaluate, args, settings, problems)
    if args.json:
        print(json.dumps({**dataclasses.asdict(summary), "trajectories_file": args.out}))
    else:
        print_table(summary, args.out, sys.stdout)
    return 0


async def _evaluate(
    args: argparse.Namespace, settings: RunSettings, problems: list[Problem]
) -> EvalSummary:
    model, tok = load_model_of(args)
    codec = TokenCodec(tok)
    items = [EvalItem(p.id, render_prompt(tok, p.problem, args.system), p.answer) for p in problems]
    texts = {p.id: p.problem for p in problems}
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    total = len(items) * args.samples
    with LineFile(out_path) as out:
        try:
            async with (
                open_engine(model, settings.engine, seed=args.seed) as engine,
                open_executor(settings.sandbox) as executor,
                open_reward_pool(settings.reward) as scorer,
            ):
                bar = ProgressBar(total, sys.stderr)

                def on_done(traj: Trajectory, item: EvalItem) -> None:
                    if traj.finish_reason == "prompt_too_long" and traj.sample == 0:
                        warn_too_long(traj, args.data, engine.core.max_model_len)
                    record = trajectory_record(traj, item, texts.get(item.prompt_id, ""))
                    out.write_line(json.dumps(record))
                    bar.advance(traj.reward)

                try:
                    tally = await evaluate(
                        engine, executor, scorer, codec, items, settings.rollout,
                        samples=args.samples, seed=args.seed, concurrency=args.concurrency,
                        on_done=on_done, context_limit=engine.core.max_model_len,
                    )  # fmt: skip
                finally:
                    bar.close()
        except BaseException:
            try:
                out.close()  # the trajectories finished so far, whole
            finally:
                log.warning("eval stopped: %s holds the %d of %d trajectories finished before",
                            out_path, out.lines, total)  # fmt: skip
            raise
    log.info("wrote %d trajectories to %s", out.lines, out_path)
    return tally.summary(args.samples)


def warn_too_long(traj: Trajectory, data: str, context_limit: int) -> None:
    """Name a problem whose prompt does not fit (once per problem: its sample 0)."""
    log.warning(
        "problem %s of %s: its prompt of %d tokens does not fit the model's context of %d "
        "tokens; scored 0 (finish reason prompt_too_long)",
        traj.prompt_id, data, traj.prompt_len, context_limit,
    )  # fmt: skip


def trajectory_record(traj: Trajectory, item: EvalItem, problem: str = "") -> dict[str, object]:
    """One JSONL line: the trajectory's fields plus the reference answer, and the fields a
    training run's trajectory log has too (`rstar2.train.trajectory_log`): the problem, the
    conversation by turn, the extracted answer and the log-probs' summary."""
    return {
        **msgspec.structs.asdict(traj),
        "reference": item.reference,
        "source": "eval",
        "problem": problem,
        "conversation": conversation(traj.response_text),
        "answer": extract_answer(traj.response_text),
        "response_tokens": traj.response_tokens,
        "logprob": logprob_summary(traj.logprobs, traj.loss_mask),
    }


class ProgressBar:
    """A one-line progress bar with the rate: redrawn in place on a terminal (at most every
    `redraw_s`), otherwise a line at every 10% and at least every `interval_s`, so that a long
    run (10^6 samples: 10% can be hours) still shows it is alive."""

    WIDTH = 30

    def __init__(
        self,
        total: int,
        out: TextIO,
        *,
        interval_s: float = 10.0,
        redraw_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.out = out
        self.done = 0
        self.reward = 0.0
        self.tty = out.isatty()
        self.interval_s = redraw_s if self.tty else interval_s
        self.clock = clock
        self._start = self._last_line = clock()
        self._last_decile = -1  # the first rollout gets a line

    def advance(self, reward: float) -> None:
        self.done += 1
        self.reward += reward
        now = self.clock()
        decile = 10 * self.done // self.total
        if decile == self._last_decile and now - self._last_line < self.interval_s:
            return
        self._last_decile, self._last_line = decile, now
        self.out.write(f"\r{self.line(now)}" if self.tty else f"{self.line(now)}\n")
        self.out.flush()

    def line(self, now: float | None = None) -> str:
        filled = self.WIDTH * self.done // self.total
        mean = self.reward / self.done if self.done else 0.0
        elapsed = (self.clock() if now is None else now) - self._start
        rate = self.done / elapsed if elapsed > 0 else 0.0
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        return f"eval [{bar}] {self.done}/{self.total} mean reward {mean:.3f} {rate:.1f}/s"

    def close(self) -> None:
        if self.tty and self.done:
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
