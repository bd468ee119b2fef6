"""`run_trajectory`: one multi-turn rollout with the code tool, as an anyio task.

Per turn: ask the engine for tokens until `</tool_call>`, an end of turn or the shared budget;
parse the call; send it to the tool executor as soon as it is parsed; append the formatted
`<tool_response>` as forced tokens (mask 0); go on. Many trajectories run as separate tasks over
one engine, so while one waits for its tool call the engine keeps decoding the others. Every
decision (when to stop, what is masked, what is counted) lives in `TrajectoryState`; this module
only moves tokens between the engine, the executor and the state.

Each turn is its own engine request `"{prompt_id}/{sample}/t{turn}"` whose prompt is the whole
trajectory so far (engines with a prefix cache reuse it); its seed is derived from the
trajectory's seed and the turn index, so a seeded rollout is reproducible.

A prompt that leaves no room under the context limit is data, not an error: the rollout comes
back at once with no turns and finish reason "prompt_too_long", so one over-long problem does
not tear down the task group running the others (`rstar2 eval`, the trainer's rollouts).

A tool call that got no answer within `tool_wait_s` is answered as a timeout (the model reads
it like any timeout) and flagged as an infrastructure failure ("tool_wait": the sandbox was too
slow or unreachable, the code's own limit being `tool_timeout_s`); so is any result whose
`infra` the sandbox side set. The first marks the trajectory (`Trajectory.infra_failure`).

What it does not do: scheduling across engines, reward, or retrying a failed engine or executor
(their errors propagate; failures of the model's code come back as a failed tool response).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from rstar2.engine.protocol import Engine, SamplingParams
from rstar2.rollout.config import RolloutConfig
from rstar2.rollout.token_codec import TokenCodec, Tokenizer
from rstar2.rollout.tool_call import MalformedCall, ToolCall, extract_call_body, parse_tool_call
from rstar2.rollout.tool_response import format_malformed, format_result
from rstar2.rollout.trajectory import (
    TrajectoryState,
    TurnStop,
    classify_stop,
    count_answer_tags,
    unfit_trajectory,
)
from rstar2.wire import ExecRequest, ExecResult, Trajectory

log = logging.getLogger(__name__)

_SEED_MIX = 0x9E3779B97F4A7C15
_SEED_MOD = 2**63


class ToolExecutor(Protocol):
    """Runs one code tool call; the sandbox's local and remote executors satisfy it."""

    async def run(self, req: ExecRequest) -> ExecResult: ...


@dataclass(frozen=True)
class TurnEvent:
    """An assistant turn was generated."""

    turn: int
    text: str
    stop: TurnStop


@dataclass(frozen=True)
class ToolCallEvent:
    """A tool call was parsed (or failed to parse) and is about to be answered."""

    turn: int
    call: ToolCall | MalformedCall


@dataclass(frozen=True)
class ToolResultEvent:
    """The tool response the model will read."""

    turn: int
    text: str
    failed: bool


RolloutEvent = TurnEvent | ToolCallEvent | ToolResultEvent
EventSink = Callable[[RolloutEvent], None]
TurnHook = Callable[[int], Awaitable[None]]
"""Awaited with the turn index when a turn ended in a tool call, before the call is answered."""


def turn_seed(seed: int | None, turn: int) -> int | None:
    """The engine seed of one turn: distinct per turn, reproducible from the trajectory seed."""
    if seed is None:
        return None
    return (seed * _SEED_MIX + turn) % _SEED_MOD


def response_budget(prompt_len: int, max_response_tokens: int, context_limit: int | None) -> int:
    """Tokens a trajectory may add after its prompt: the config's budget, cut to the context
    (0 when the prompt leaves no room)."""
    if context_limit is None:
        return max_response_tokens
    return max(0, min(max_response_tokens, context_limit - prompt_len))


async def run_trajectory(
    engine: Engine,
    tools: ToolExecutor,
    tok: Tokenizer | TokenCodec,
    prompt_ids: list[int],
    cfg: RolloutConfig,
    *,
    prompt_id: str,
    sample: int,
    seed: int | None = None,
    context_limit: int | None = None,
    on_event: EventSink | None = None,
    on_tool_turn: TurnHook | None = None,
) -> Trajectory:
    """Roll out one trajectory from `prompt_ids` (rendered up to `<|im_start|>assistant\\n`).

    `tok` is a Hugging Face tokenizer or a prebuilt `TokenCodec` (build one per tokenizer and
    pass it when running many rollouts). `context_limit` is the engine's longest sequence
    (prompt + output); when given, the budget shrinks so no turn is ever asked past it, and a
    prompt with no room left comes back unrun, finish reason "prompt_too_long".
    `on_event` sees each turn, call and tool response as it happens (for `rstar2 chat`); it
    must not block. `on_tool_turn` is awaited when a turn ends in a tool call (the live graph
    tells its scheduler that the engine is done with the turn).
    """
    codec = tok if isinstance(tok, TokenCodec) else TokenCodec(tok)
    if context_limit is not None and len(prompt_ids) >= context_limit:
        log.debug(
            "%s/%d: prompt of %d tokens leaves no room under the context limit %s",
            prompt_id, sample, len(prompt_ids), context_limit,
        )  # fmt: skip
        return unfit_trajectory(prompt_ids, prompt_id, sample)
    budget = response_budget(len(prompt_ids), cfg.max_response_tokens, context_limit)
    state = TrajectoryState(prompt_ids, budget, cfg.max_turns)
    emit: EventSink = on_event if on_event is not None else _ignore
    base_id = f"{prompt_id}/{sample}"
    while not state.finished:
        turn_text = await _generate_turn(engine, codec, state, cfg, base_id, seed, emit)
        if state.awaiting_tool:
            if on_tool_turn is not None:
                await on_tool_turn(state.turns - 1)
            await _answer_call(tools, codec, state, cfg, turn_text, base_id, seed, emit)
    response_text = codec.decode(state.token_ids[state.prompt_len :])
    return state.to_trajectory(prompt_id, sample, response_text)


_TURN_SUFFIX = re.compile(r"/t(\d+)$")


def turn_request_id(base_id: str, turn: int) -> str:
    """The engine request id of a rollout's turn (and of its tool call): `{base_id}/t{turn}`."""
    return f"{base_id}/t{turn}"


def turn_of(request_id: str) -> int:
    """The turn index of a `turn_request_id` (`.../t{turn}`); 0 for any other id."""
    match = _TURN_SUFFIX.search(request_id)
    return int(match.group(1)) if match else 0


async def _generate_turn(
    engine: Engine,
    codec: TokenCodec,
    state: TrajectoryState,
    cfg: RolloutConfig,
    base_id: str,
    seed: int | None,
    emit: EventSink,
) -> str:
    turn = state.turns
    request_id = turn_request_id(base_id, turn)
    params = SamplingParams(
        max_tokens=state.remaining,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        stop_token_ids=codec.stop_token_ids,
        seed=turn_seed(seed, turn),
    )
    try:
        out = await engine.generate(request_id, list(state.token_ids), params)
    except anyio.get_cancelled_exc_class():
        # Do not leave the request decoding (and holding KV) for nobody.
        with anyio.CancelScope(shield=True):
            await engine.abort(request_id)
        raise
    stop = classify_stop(out.token_ids, out.finish_reason, codec.call_end_id, codec.end_ids)
    text = codec.decode(out.token_ids)
    state.add_turn(out.token_ids, out.logprobs, stop, count_answer_tags(text), out.policy_version)
    emit(TurnEvent(turn=turn, text=text, stop=stop))
    return text


async def _answer_call(
    tools: ToolExecutor,
    codec: TokenCodec,
    state: TrajectoryState,
    cfg: RolloutConfig,
    turn_text: str,
    base_id: str,
    seed: int | None,
    emit: EventSink,
) -> None:
    turn = state.turns - 1
    body = extract_call_body(turn_text)
    call = parse_tool_call(body if body is not None else "")
    emit(ToolCallEvent(turn=turn, call=call))
    if isinstance(call, MalformedCall):
        text, failed, timed_out, infra = format_malformed(call.error), True, False, ""
        latency = 0.0
    else:
        started = time.perf_counter()
        result = await _execute(
            tools, call, cfg, turn_request_id(base_id, turn), turn_seed(seed, turn)
        )
        latency = time.perf_counter() - started
        text = format_result(result, max_chars=cfg.tool_output_chars, show_time=cfg.tool_show_time)
        failed, timed_out, infra = result.status != "ok", result.status == "timeout", result.infra
    emit(ToolResultEvent(turn=turn, text=text, failed=failed))
    ids = codec.tool_response_ids(text)
    state.add_tool_response(ids, failed=failed, timed_out=timed_out, infra=infra, latency=latency)


async def _execute(
    tools: ToolExecutor, call: ToolCall, cfg: RolloutConfig, request_id: str, seed: int | None
) -> ExecResult:
    req = ExecRequest(
        id=request_id, code=call.code, stdin=call.stdin, timeout_s=cfg.tool_timeout_s, seed=seed
    )
    with anyio.move_on_after(cfg.tool_wait_s):
        return await tools.run(req)
    log.warning("tool call %s got no answer within %.1fs", request_id, cfg.tool_wait_s)
    return ExecResult(
        id=request_id, status="timeout", stdout="", stderr="", exit_code=-1,
        wall_s=cfg.tool_wait_s, truncated=False, infra="tool_wait",
    )  # fmt: skip


def _ignore(event: RolloutEvent) -> None:
    del event
