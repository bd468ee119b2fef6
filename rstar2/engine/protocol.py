"""The engine protocol: what rollout and the scheduler call, whatever backend serves it.

`SamplingParams` and `GenerationOutput` are plain data (an engine's load is
`rstar2.wire.EngineLoad`, the record the scheduler reads); `Engine` is the async
interface (anyio: works under asyncio and trio) that the embedded CPU engine implements and a
vLLM backend implements too. It is request/response on purpose: one `generate` call per
assistant turn, the whole turn back with its logprobs, which maps onto vLLM's
`AsyncLLM.generate` (collect the stream) without forcing a streaming API on every backend.

`SleepableEngine` is the optional extra of an engine that can hand its accelerator memory to
a learner sharing its GPUs between rollouts (`cluster.colocate`; the vLLM backend's sleep mode).

What it does not do: tokenisation, chat templates or stop strings (token ids only), nor any
scheduling across engines (that is `rstar2/scheduler/`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from rstar2.wire import EngineLoad


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request. Validated on construction (ValueError / TypeError)."""

    max_tokens: int
    """New tokens for this request (at least 1)."""
    temperature: float = 1.0
    """Softmax temperature; 0.0 means greedy (argmax)."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    stop_token_ids: tuple[int, ...] = ()
    """Generation stops after emitting one of these; the stop token is included in the output."""
    seed: int | None = None
    """Per-request RNG seed: same seed, same weights, same prompt -> same tokens."""

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise TypeError(f"max_tokens must be an int, got {self.max_tokens!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not self.temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.stop_token_ids, tuple):
            raise TypeError(f"stop_token_ids must be a tuple, got {type(self.stop_token_ids)}")
        if any(isinstance(t, bool) or not isinstance(t, int) for t in self.stop_token_ids):
            raise TypeError(f"stop_token_ids must be ints, got {self.stop_token_ids!r}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise TypeError(f"seed must be an int or None, got {self.seed!r}")


@dataclass
class GenerationOutput:
    """One finished (or aborted) request."""

    request_id: str
    token_ids: list[int]
    """Generated tokens (stop token included when hit)."""
    logprobs: list[float]
    """log p(token) under the model at temperature 1 (the behaviour policy), one per token."""
    finish_reason: str
    """"stop" | "length" | "abort"."""
    policy_version: int = -1
    """The policy version that generated it (set by the rollout worker's weight gate; -1:
    unknown)."""


@runtime_checkable
class Engine(Protocol):
    """What rollout and the scheduler use; the embedded and the vLLM backends implement it."""

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        """Generate for one request; returns when it stops, hits max_tokens or is aborted."""
        ...

    async def abort(self, request_id: str) -> None:
        """Stop a request; its `generate` returns with finish_reason "abort". Unknown ids: no-op."""
        ...

    async def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load new policy weights (HF parameter names); later tokens use them."""
        ...

    def stats(self) -> EngineLoad:
        """Current KV occupancy and queue lengths (cheap, non-blocking)."""
        ...


@runtime_checkable
class SleepableEngine(Protocol):
    """An engine that can free its accelerator memory while a colocated learner trains."""

    async def sleep(self, level: int = 1) -> None:
        """Free the memory (level 1: weights to host memory, KV cache dropped). No request may
        be in flight; until `wake_up`, generating or loading weights is an error."""
        ...

    async def wake_up(self) -> None:
        """Take the memory back; the engine generates again with the weights it had."""
        ...

    @property
    def sleeping(self) -> bool:
        """Between `sleep` and `wake_up`."""
        ...
