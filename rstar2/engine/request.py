"""The engine-side state of one request: its tokens, KV blocks and RNG.

What it does not do: decide anything (the scheduler does) or touch tensors other than the
request's own `torch.Generator`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rstar2.engine.protocol import GenerationOutput, SamplingParams


@dataclass(eq=False)
class Request:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    arrival: int
    """Order of arrival (ties broken by nothing else: the counter is unique per engine)."""
    generator: torch.Generator | None = None
    """Seeded per-request RNG (None for greedy or unseeded requests)."""
    seed: int = 0
    """The seed of fixed-shape sampling (`sampler.sample_fixed`): the request's own, or one
    the engine drew for it."""
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    """KV blocks in position order: block i holds positions i*block_size .. (i+1)*block_size-1."""
    num_computed: int = 0
    """Leading tokens of `prompt_ids + output_ids` whose K/V are in the cache."""
    lost_tokens: int = 0
    """Tokens whose K/V were thrown away by a preemption and must be recomputed."""
    finish_reason: str | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def token_at(self, index: int) -> int:
        """Token `index` of the prompt followed by the output."""
        n_prompt = len(self.prompt_ids)
        return self.prompt_ids[index] if index < n_prompt else self.output_ids[index - n_prompt]

    def token_slice(self, start: int, end: int) -> list[int]:
        """Tokens `start:end` of the prompt followed by the output."""
        n_prompt = len(self.prompt_ids)
        if end <= n_prompt:
            return self.prompt_ids[start:end]
        if start >= n_prompt:
            return self.output_ids[start - n_prompt : end - n_prompt]
        return self.prompt_ids[start:] + self.output_ids[: end - n_prompt]

    def to_output(self) -> GenerationOutput:
        return GenerationOutput(
            request_id=self.request_id,
            token_ids=list(self.output_ids),
            logprobs=list(self.logprobs),
            finish_reason=self.finish_reason or "abort",
        )
