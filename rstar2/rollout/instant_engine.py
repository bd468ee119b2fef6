"""`InstantEngine`: an engine with no model, whose every turn comes back at once, scripted.

`cluster.engine_backend = "instant"` gives the rollout workers this engine instead of a
model. Each rollout then costs everything but generation, as the real graph runs it: the
agent loop, its tool calls in the sandbox, the scheduler, the reward, the bus between them
and the learner. Its generated tokens over the rollout phase's wall time are the ceiling
that the rest of the system puts on generation, whatever an engine does: the profiler's
what-if of an infinitely fast engine (`rstar2 profile --set
cluster.engine_backend=instant`), and the measure of what caps issue 31's target on a
machine (docs/production.md, "What bounds RL generation").

The script of a rollout (`engine.instant_tool_calls`, `engine.instant_turn_tokens`): its
first `instant_tool_calls` turns each end in a call of the code tool (`print(2 + 3)`), the
turn after them in `<answer>\\boxed{5}</answer>` and the end of the turn; every turn is padded
in front with plain words to `instant_turn_tokens` tokens. The turn comes from the request
id's `/t{turn}` suffix, which the agent loop sets (`agent_loop.turn_of`). A turn is
cut at the request's `max_tokens` (finish reason "length"), as an engine would. Every
token's log-prob is `LOGPROB`.

What it does not do: compute anything, hold KV (its load reports the whole budget free), or
load weights (an update is accepted and dropped). Its rewards and updates mean nothing: only
the throughput of the rest is real.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import anyio.lowlevel

from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.format_markers import ANSWER, ANSWER_END, IM_END, TOOL_CALL, TOOL_CALL_END
from rstar2.rollout.agent_loop import turn_of
from rstar2.rollout.tool_call import TOOL_NAME
from rstar2.wire import EngineLoad

LOGPROB = math.log(0.5)
"""The log-prob reported for every scripted token."""

CALL_TEXT = (
    f'{TOOL_CALL}{{"name": "{TOOL_NAME}", "arguments": {{"code": "print(2 + 3)"}}}}{TOOL_CALL_END}'
)
"""A scripted tool-call turn's text after its padding."""
ANSWER_TEXT = f"{ANSWER}\\boxed{{5}}{ANSWER_END}{IM_END}"
"""The last scripted turn's text after its padding."""
PAD_TEXT = " so we compute the value"
"""Plain words repeated in front of a turn to pad it to `turn_tokens`."""


def scripted_turns(
    encode: Callable[[str], list[int]], turn_tokens: int
) -> tuple[list[int], list[int]]:
    """The token ids of a tool-call turn and of the answer turn, each padded in front to
    `turn_tokens` with `PAD_TEXT`'s tokens (`encode`: trusted text to ids, special tokens as
    themselves; `TokenCodec.encode_markup`)."""
    pad = encode(PAD_TEXT)

    def padded(text: str) -> list[int]:
        body = encode(text)
        room = max(0, turn_tokens - len(body))
        return [pad[i % len(pad)] for i in range(room)] + body

    return padded(CALL_TEXT), padded(ANSWER_TEXT)


class InstantEngine:
    """An `Engine` that answers every request at once from its script (module docstring)."""

    def __init__(
        self,
        call_turn: list[int],
        answer_turn: list[int],
        tool_calls: int,
        kv_capacity_tokens: int,
        max_model_len: int,
    ) -> None:
        self.call_turn = call_turn
        self.answer_turn = answer_turn
        self.tool_calls = tool_calls
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_model_len = max_model_len
        self.running = 0
        self.generated_tokens = 0

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        self.running += 1
        try:
            await anyio.lowlevel.checkpoint()  # an engine's reply is never synchronous
        finally:
            self.running -= 1
        turn = self.call_turn if turn_of(request_id) < self.tool_calls else self.answer_turn
        tokens = turn[: params.max_tokens]
        self.generated_tokens += len(tokens)
        reason = "stop" if len(tokens) == len(turn) else "length"
        return GenerationOutput(request_id, tokens, [LOGPROB] * len(tokens), reason)

    async def abort(self, request_id: str) -> None:
        del request_id  # nothing runs for long enough to abort

    async def update_weights(self, state_dict: dict[str, object]) -> None:
        del state_dict  # no model

    def stats(self) -> EngineLoad:
        return EngineLoad(
            kv_capacity_tokens=self.kv_capacity_tokens,
            kv_free_tokens=self.kv_capacity_tokens,
            running=self.running,
            waiting=0,
            generated_tokens=self.generated_tokens,
        )
