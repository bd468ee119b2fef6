"""The policy's entropy at every token of recorded trajectories, by teacher forcing.

`teacher_force(model, sequences, ...)` runs each token sequence through a causal LM in one
forward pass (no sampling) and returns, per sequence and position t >= 1, the entropy of the
model's next-token distribution that chose token t,

    H_t = - sum_v p(v | x_<t) log p(v | x_<t),   p = softmax(logits at position t - 1)

in nats (at temperature 1: the policy as trained), and log p(x_t | x_<t), the teacher-forced
logprob of the recorded token. Position 0 has no prediction: NaN in both. The entropy is
`torch.distributions.Categorical(logits=...).entropy()`, torch's own numerically safe form
(a token of probability 0 adds 0), rather than a hand-written sum.

Sequences are batched by a token budget (`length_batches`): sorted longest first and packed
while (longest in the batch) x (sequences) <= `batch_tokens`, right-padded with an attention
mask, so a causal model's outputs at real positions do not depend on the padding; a sequence
longer than the budget goes alone. The logits of a batch ([B, L, vocab] floats) bound the
memory: lower `batch_tokens` for a large vocabulary.

What it does not do: choose which tokens to analyse (high_entropy.py) or load models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenScores:
    """One sequence's per-position scores (index 0: NaN, nothing predicts the first token)."""

    entropy: list[float]
    """Entropy (nats) of the model's distribution at each position."""
    logprob: list[float]
    """Log-probability the model gives the recorded token at each position."""


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of softmax(logits) over the last dimension, in float32."""
    return torch.distributions.Categorical(logits=logits.float(), validate_args=False).entropy()


def length_batches(lengths: Sequence[int], batch_tokens: int) -> list[list[int]]:
    """Indices of `lengths` grouped into batches, longest first, each with
    max length x size <= `batch_tokens` (a longer single sequence forms its own batch)."""
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        # sorted longest first: the batch's first sequence is its longest
        if batches and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


@torch.inference_mode()
def teacher_force(
    model: torch.nn.Module,
    sequences: Sequence[Sequence[int]],
    batch_tokens: int = 4096,
    device: str | torch.device = "cpu",
    on_batch: Callable[[int], None] | None = None,
) -> list[TokenScores]:
    """Scores of every sequence (see the module docstring); `model(input_ids=...,
    attention_mask=...)` must return an object with `.logits` [B, L, vocab]. `on_batch(n)` is
    called after each batch with the number of sequences it held."""
    out: list[TokenScores | None] = [None] * len(sequences)
    for batch in length_batches([len(s) for s in sequences], batch_tokens):
        width = len(sequences[batch[0]])
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            ids[row, : len(sequences[i])] = torch.as_tensor(list(sequences[i]))
            attention[row, : len(sequences[i])] = 1
        ids, attention = ids.to(device), attention.to(device)
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        entropy = entropy_from_logits(logits)
        logprob = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        nan = torch.full((len(batch), 1), float("nan"), device=entropy.device)
        entropy = torch.cat([nan, entropy], dim=1).cpu()
        logprob = torch.cat([nan, logprob], dim=1).cpu()
        for row, i in enumerate(batch):
            n = len(sequences[i])
            out[i] = TokenScores(entropy[row, :n].tolist(), logprob[row, :n].tolist())
        if on_batch is not None:
            on_batch(len(batch))
    return [s for s in out if s is not None]


def logprob_gap(
    masks: Sequence[Sequence[int]],
    recorded: Sequence[Sequence[float]],
    forced: Sequence[Sequence[float]],
) -> float:
    """Mean |forced - recorded| logprob over the generated (mask 1) tokens of all sequences:
    about 0 when `forced` comes from the model that sampled them at temperature 1."""
    gaps = [
        abs(f - r)
        for mask, rec, fo in zip(masks, recorded, forced, strict=True)
        for bit, r, f in zip(mask, rec, fo, strict=True)
        if bit
    ]
    if not gaps:
        raise ValueError("no generated tokens")
    return sum(gaps) / len(gaps)
