"""The heavy half of `rstar2 chat` (see `rstar2.commands.chat`): load the model, hold the
conversation, print each event as it happens and the final answer.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

import anyio

from rstar2.commands.rollout_settings import RunSettings, load_model_of, resolve_settings
from rstar2.engine.async_engine import open_engine
from rstar2.model.chat_format import render_prompt
from rstar2.reward import extract_answer
from rstar2.rollout.agent_loop import (
    RolloutEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEvent,
    run_trajectory,
)
from rstar2.rollout.tool_call import TOOL_NAME, MalformedCall
from rstar2.sandbox.executor import open_executor
from rstar2.wire import Trajectory


def run_chat(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    traj = anyio.run(_chat, args, settings)
    print_summary(traj, sys.stdout)
    return 0


async def _chat(args: argparse.Namespace, settings: RunSettings) -> Trajectory:
    model, tok = load_model_of(args)
    prompt_ids = render_prompt(tok, args.question, args.system)
    printer = EventPrinter(sys.stdout)
    async with (
        open_engine(model, settings.engine, seed=args.seed) as engine,
        open_executor(settings.sandbox) as executor,
    ):
        return await run_trajectory(
            engine, executor, tok, prompt_ids, settings.rollout,
            prompt_id="chat", sample=0, seed=args.seed, on_event=printer,
            context_limit=engine.core.max_model_len,
        )  # fmt: skip


class EventPrinter:
    """Writes each rollout event to a stream the moment it happens."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def __call__(self, event: RolloutEvent) -> None:
        if isinstance(event, TurnEvent):
            self._section(f"assistant (turn {event.turn + 1})", event.text)
        elif isinstance(event, ToolCallEvent):
            call = event.call
            if isinstance(call, MalformedCall):
                self._section("tool call (malformed)", call.error)
            else:
                stdin = f"\n--- stdin ---\n{call.stdin}" if call.stdin else ""
                self._section(f"tool call: {TOOL_NAME}", call.code + stdin)
        elif isinstance(event, ToolResultEvent):
            self._section("tool result", event.text)

    def _section(self, title: str, body: str) -> None:
        self.out.write(f"=== {title} ===\n{body}\n")
        self.out.flush()


def print_summary(traj: Trajectory, out: TextIO) -> None:
    """The final answer and how the conversation ended."""
    answer = extract_answer(traj.response_text)
    out.write(f"=== final answer ===\n{answer if answer is not None else '(none)'}\n")
    out.write(
        f"finish: {traj.finish_reason} | turns: {traj.turns} | tool calls: {traj.tool_calls} "
        f"({traj.failed_tool_calls} failed) | response tokens: {traj.response_tokens}\n"
    )
    out.flush()
