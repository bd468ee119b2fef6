"""Training-inference mismatch: how far the learner's logprobs are from the engine's.

The engine records log p(token) for every token it samples (the behaviour policy); the learner
recomputes the same logprobs with its own kernels, precision and batching. With the same weights
the two agree up to float noise; bf16 kernels, a different attention implementation or weights
that did not reach the engine make them drift apart, and then the rollouts are, silently, a
little off-policy (Yao et al. 2025). Over the loss-masked (sampled) tokens t of a step, with the
learner's logprobs taken before the step's first optimizer step:

    logprob_mismatch_mean = sum_t |lp_learner_t - lp_engine_t| / N     N = masked tokens
    logprob_mismatch_max  = max_t |lp_learner_t - lp_engine_t|

`Mismatch` keeps the sum, the token count and the maximum, so partial measurements (micro-
batches, ranks) combine exactly: sums and counts add, maxima take the larger.

What it does not do: run a model, or correct the mismatch (truncated importance sampling is a
weight in `policy_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Mismatch:
    """|learner - engine| logprob differences of some tokens, summarised."""

    abs_sum: float = 0.0
    """Sum of |lp_learner - lp_engine| over the tokens."""
    tokens: float = 0.0
    """How many tokens were compared."""
    abs_max: float = 0.0
    """The largest |lp_learner - lp_engine| (0 when no token was compared)."""

    def __add__(self, other: Mismatch) -> Mismatch:
        return Mismatch(
            self.abs_sum + other.abs_sum,
            self.tokens + other.tokens,
            max(self.abs_max, other.abs_max),
        )

    def metrics(self) -> dict[str, float]:
        """The step's metrics: `logprob_mismatch_mean` (0 without tokens) and `..._max`."""
        mean = self.abs_sum / self.tokens if self.tokens > 0 else 0.0
        return {"logprob_mismatch_mean": mean, "logprob_mismatch_max": self.abs_max}


def logprob_mismatch(
    learner_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> Mismatch:
    """The mismatch over the tokens where `loss_mask` is nonzero (same shapes, any layout).

    Masked-out positions are never read, so garbage there (0.0 or -inf for tool tokens) is
    harmless.
    """
    if not (learner_logprobs.shape == engine_logprobs.shape == loss_mask.shape):
        raise ValueError(
            f"shapes differ: learner {tuple(learner_logprobs.shape)}, engine "
            f"{tuple(engine_logprobs.shape)}, mask {tuple(loss_mask.shape)}"
        )
    mask = loss_mask.bool()
    diff = (learner_logprobs.detach().double() - engine_logprobs.double())[mask].abs()
    if diff.numel() == 0:
        return Mismatch()
    return Mismatch(float(diff.sum()), float(diff.numel()), float(diff.max()))
