"""Batched prefill attention (step_batch's prefill groups): one step mixing one-token decodes,
fresh prompts and continuations of different lengths (`rstar2.engine.mixed_step`) gives each
request the logits of the model's own forward over its whole sequence."""

from __future__ import annotations

import torch

from rstar2.engine.mixed_step import mixed_step
from tests.engine.factories import tiny_qwen2


def test_a_mixed_prefill_step_gives_every_request_the_models_logits() -> None:
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
