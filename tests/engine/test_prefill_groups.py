"""Batched prefill attention, dynamic (step_batch's prefill groups) and on fixed shapes
(`prefill_graphs.FixedPrefill`): one step mixing one-token decodes, fresh prompts and
continuations of different lengths (`rstar2.engine.mixed_step`) gives each request the logits
of the model's own forward over its whole sequence, whatever memory layout the attention
kernel returns its output in."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from rstar2.engine.mixed_step import mixed_step
from rstar2.engine.prefill_graphs import FixedPrefill
from rstar2.engine.protocol import SamplingParams
from tests.engine.factories import tiny_qwen2


@pytest.fixture(params=["contiguous", "heads-strided"])
def attention_layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with SDPA's output as the CPU's kernels return it (contiguous) and as CUDA's
    flash and memory-efficient kernels do: the same values `[..., H, L, D]` stored heads
    innermost but one (`[..., L, H, D]` in memory), which `.view` cannot regroup by heads (an
    H200 run crashed on it: docs/production.md)."""
    if request.param == "heads-strided":
        sdpa = F.scaled_dot_product_attention

        def strided(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = sdpa(*args, **kwargs)
            return out.transpose(-3, -2).contiguous().transpose(-3, -2)

        monkeypatch.setattr(F, "scaled_dot_product_attention", strided)
    return request.param


def test_a_mixed_prefill_step_gives_every_request_the_models_logits(attention_layout: str) -> None:
    model = tiny_qwen2()
    t, cache, batch = mixed_step(model)
    # fresh 5 and 7 / fresh 40 / continuations 3 and 6 / 25 / 6 after a context over 64
    sizes = sorted(group.size for group in batch.prefill)
    assert sizes == [(1, 6), (1, 25), (1, 40), (2, 6), (2, 7)]  # padded slots, lone requests
    assert [n for _, n in batch.requests].count(1) == 2  # and two decodes
    logits = t.forward(batch, cache)
    with torch.inference_mode():
        for row, (req, _) in enumerate(batch.requests):
            full = model(torch.tensor([req.prompt_ids])).logits[0, -1]
            torch.testing.assert_close(logits[row], full, rtol=1e-9, atol=1e-9)


def test_fixed_shape_prefills_give_every_request_the_models_log_probs(
    attention_layout: str,
) -> None:
    """`FixedPrefill` (`engine.prefill_graph_tokens`): the mixed step's prefills of at most 32
    new tokens, padded to 6 rows of 32 query slots (one row a lone 25-token continuation
    after a short context, others fresh prompts and continuations after long contexts), each
    draw a token whose log-prob is the model's own; greedy rows take the model's argmax."""
    model = tiny_qwen2()
    t, cache, batch = mixed_step(model)
    prefill = FixedPrefill(t, cache, 8, 512, 32, graphs=False)
    rows = [(r, n) for r, n in batch.requests if prefill.takes(n)]
    assert sorted(n for _, n in rows) == [3, 5, 6, 6, 7, 25]  # fresh 40 is left out
    for i, (req, _) in enumerate(rows):
        if i % 2:
            req.params = SamplingParams(4, temperature=0.0)
    assert prefill.shape(rows).rows == 6 and prefill.shape(rows).tokens == 32
    drawn = prefill.prefill(rows, [7 * i for i in range(len(rows))]).tolist()
    with torch.inference_mode():
        for i, (req, _) in enumerate(rows):
            full = torch.log_softmax(model(torch.tensor([req.prompt_ids])).logits[0, -1], -1)
            token = int(drawn[0][i])
            assert abs(drawn[1][i] - float(full[token])) < 1e-9, req.request_id
            if i % 2:
                assert token == int(full.argmax()), req.request_id
    assert prefill.stats() == {"shapes": 1, "graphs": 0, "capture_failures": 0}
