"""In-memory fakes for the agent loop: a character tokenizer, a scripted engine, an executor."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import anyio

from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.wire import EngineLoad, ExecRequest, ExecResult

SPECIALS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>", "<answer>", "</answer>", "<think>", "</think>",
)  # fmt: skip
_CHAR_BASE = 100


class CharTokenizer:
    """One token per character; the format's special tokens are ids 0..10."""

    eos_token_id = 0
    unk_token_id = None
    all_special_tokens = list(SPECIALS)

    def encode(
        self, text: str, add_special_tokens: bool = True, split_special_tokens: bool = False
    ) -> list[int]:
        del add_special_tokens
        ids: list[int] = []
        i = 0
        while i < len(text):
            hit = None if split_special_tokens else _special_at(text, i)
            if hit is not None:
                ids.append(SPECIALS.index(hit))
                i += len(hit)
            else:
                ids.append(_CHAR_BASE + ord(text[i]))
                i += 1
        return ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False, **kw: Any) -> str:
        del kw
        out = []
        for t in token_ids:
            if t < len(SPECIALS):
                out.append("" if skip_special_tokens else SPECIALS[t])
            else:
                out.append(chr(t - _CHAR_BASE))
        return "".join(out)

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return SPECIALS.index(token) if token in SPECIALS else None


def _special_at(text: str, i: int) -> str | None:
    for s in SPECIALS:
        if text.startswith(s, i):
            return s
    return None


class ScriptedEngine:
    """Returns scripted assistant turns, one per `generate`, per trajectory.

    `scripts` maps "prompt_id/sample" to the turn texts (including their stop marker). The
    engine honours max_tokens ("length") and stop_token_ids like a real one, and records every
    request. `gate`, when given, is awaited before answering a trajectory's turns.
    """

    def __init__(self, tok: CharTokenizer, scripts: dict[str, list[str]]) -> None:
        self.tok = tok
        self.scripts = scripts
        self.next_turn: dict[str, int] = defaultdict(int)
        self.requests: list[tuple[str, list[int], SamplingParams]] = []
        self.aborted: list[str] = []
        self.gates: dict[str, anyio.Event] = {}

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        self.requests.append((request_id, prompt_ids, params))
        key = request_id.rsplit("/", 1)[0]
        if key in self.gates:
            await self.gates[key].wait()
        await anyio.lowlevel.checkpoint()
        turn = self.next_turn[key]
        self.next_turn[key] += 1
        ids = self.tok.encode(self.scripts[key][turn])
        reason = "length"
        for i, t in enumerate(ids):
            if t in params.stop_token_ids:
                ids, reason = ids[: i + 1], "stop"
                break
        if len(ids) > params.max_tokens:
            ids, reason = ids[: params.max_tokens], "length"
        logprobs = [-0.01 * (k + 1) for k in range(len(ids))]
        return GenerationOutput(request_id, ids, logprobs, reason)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def update_weights(self, state_dict: dict[str, Any]) -> None:
        del state_dict

    def stats(self) -> EngineLoad:
        return EngineLoad(0, 0, 0, 0, 0, 0, 0)


Handler = Callable[[ExecRequest], ExecResult]


def echo_code(req: ExecRequest) -> ExecResult:
    """Default fake tool: prints the code back."""
    return ExecResult(id=req.id, status="ok", stdout=f"ran {req.code}\n", wall_s=0.01)


class FakeExecutor:
    """Answers tool calls with `handler`, after awaiting `gate` (all calls) or the gate of the
    call's trajectory in `gates` (keyed "prompt_id/sample") when set."""

    def __init__(self, handler: Handler = echo_code) -> None:
        self.handler = handler
        self.requests: list[ExecRequest] = []
        self.gate: anyio.Event | None = None
        self.gates: dict[str, anyio.Event] = {}

    async def run(self, req: ExecRequest) -> ExecResult:
        self.requests.append(req)
        if self.gate is not None:
            await self.gate.wait()
        trajectory = req.id.rsplit("/", 1)[0]
        if trajectory in self.gates:
            await self.gates[trajectory].wait()
        await anyio.lowlevel.checkpoint()
        return self.handler(req)
