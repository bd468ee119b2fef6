"""Sampling rules on hand-made logits: greedy, nucleus, seeded draws, logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from rstar2.engine.protocol import SamplingParams
from rstar2.engine.request import Request
from rstar2.engine.sampler import sample, top_p_filter


def req(params: SamplingParams, seed: int | None = None) -> Request:
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    return Request("r", [0], params, 0, gen)


def test_top_p_keeps_the_smallest_set_reaching_the_mass() -> None:
    row = [0.1, 0.5, 0.3, 0.04, 0.06]
    probs = torch.tensor([row, row, row], dtype=torch.float64)
    kept = top_p_filter(probs, torch.tensor([0.8, 0.85, 1.0], dtype=torch.float64))
    assert kept.tolist() == [
        [0.0, 0.5, 0.3, 0.0, 0.0],
        [0.1, 0.5, 0.3, 0.0, 0.0],
        [0.1, 0.5, 0.3, 0.04, 0.06],
    ]


def test_greedy_takes_argmax_and_reports_temperature_one_logprob() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0]])
    tokens, logprobs = sample(logits, [req(SamplingParams(1, 0.0))], torch.Generator())
    assert tokens == [1]
    assert logprobs[0] == pytest.approx(2.0 - math.log(1 + math.e**2 + math.e))


def test_top_p_excludes_tail_tokens_from_draws() -> None:
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.05, 0.05]]))
    params = SamplingParams(1, 1.0, top_p=0.85)
    seen = {sample(logits, [req(params, seed=s)], torch.Generator())[0][0] for s in range(200)}
    assert seen == {0, 1}


def test_same_seed_same_draw_whatever_the_other_rows() -> None:
    logits = torch.zeros(3, 50)
    p = SamplingParams(1, 1.0)
    alone = sample(logits[:1], [req(p, seed=7)], torch.Generator())[0]
    mixed = sample(logits, [req(p, seed=1), req(p, seed=7), req(p)], torch.Generator())[0]
    assert mixed[1] == alone[0]


def test_row_count_must_match() -> None:
    with pytest.raises(ValueError):
        sample(torch.zeros(2, 4), [req(SamplingParams(1, 0.0))], torch.Generator())
