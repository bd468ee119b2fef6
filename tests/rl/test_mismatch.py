"""The training-inference logprob mismatch on hand-made tensors with exact values.

An engine whose recorded logprobs are the learner's shifted by known amounts on the sampled
tokens (mask 1): shifts [0.5, -0.25, 0.125 | 1.0, -], the last token a tool token (mask 0)
with -inf recorded there. |diff| = [0.5, 0.25, 0.125, 1.0]: mean 1.875 / 4, max 1.0.
"""

from __future__ import annotations

import math

import pytest
import torch

from rstar2.rl.mismatch import Mismatch, logprob_mismatch

LEARNER = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.75, -1.25]])
SHIFTS = torch.tensor([[0.5, -0.25, 0.125], [1.0, 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


def perturbed_engine() -> torch.Tensor:
    engine = LEARNER + SHIFTS
    engine[1, 1] = -math.inf  # tool token: nothing recorded there
    engine[1, 2] = 7.0
    return engine


def test_a_shifted_engine_gives_exactly_the_shift() -> None:
    m = logprob_mismatch(LEARNER, perturbed_engine(), MASK)
    assert m == Mismatch(abs_sum=1.875, tokens=4.0, abs_max=1.0)
    assert m.metrics() == {"logprob_mismatch_mean": 1.875 / 4, "logprob_mismatch_max": 1.0}


def test_the_same_logprobs_give_zero() -> None:
    m = logprob_mismatch(LEARNER, LEARNER.clone(), MASK)
    assert m.metrics() == {"logprob_mismatch_mean": 0.0, "logprob_mismatch_max": 0.0}


def test_parts_add_up_to_the_whole() -> None:
    """Micro-batches (or ranks) measured apart combine to the one-piece figures."""
    engine = perturbed_engine()
    parts = [
        logprob_mismatch(LEARNER[i : i + 1], engine[i : i + 1], MASK[i : i + 1]) for i in (0, 1)
    ]
    assert parts[0] + parts[1] == logprob_mismatch(LEARNER, engine, MASK)
    assert parts[0].abs_max == 0.5 and parts[1].abs_max == 1.0


def test_no_sampled_tokens_give_zero() -> None:
    m = logprob_mismatch(LEARNER, perturbed_engine(), torch.zeros(2, 3))
    assert m == Mismatch() and m.metrics()["logprob_mismatch_mean"] == 0.0


def test_shapes_must_agree() -> None:
    with pytest.raises(ValueError, match="shapes differ"):
        logprob_mismatch(LEARNER, torch.zeros(2, 4), MASK)
