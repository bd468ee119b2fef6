"""Exact values of the clipped surrogate on a hand-built 2 x 3 batch.

seq 0, A = +1, ratios [1.5, 0.5, 1.1]: min(r A, clip(r) A) = [1.28 (clipped), 0.5, 1.1]
seq 1, A = -2, ratios [0.5, 1.5, -] (last token masked, logprob -inf there):
                                     = [-1.6 (clipped: 0.8 * -2), -3.0, -]
sum = -1.72 over N = 5 masked tokens -> loss = 0.344; clip fraction 2/5.
"""

from __future__ import annotations

import math

import pytest
import torch

from rstar2.rl.policy_loss import policy_loss

RATIOS = [[1.5, 0.5, 1.1], [0.5, 1.5, 1.0]]
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
ADV = torch.tensor([1.0, -2.0])
MASKED_RATIOS = [1.5, 0.5, 1.1, 0.5, 1.5]


def new_logprobs() -> torch.Tensor:
    lp = torch.log(torch.tensor(RATIOS, dtype=torch.float64))
    lp[1, 2] = -math.inf  # garbage where the mask is 0 must not leak in
    return lp.requires_grad_(True)


def old_logprobs() -> torch.Tensor:
    return torch.zeros(2, 3, dtype=torch.float64)


def test_loss_value_and_metrics() -> None:
    lp = new_logprobs()
    loss, metrics = policy_loss(lp, old_logprobs(), ADV, MASK)
    assert loss.item() == pytest.approx(1.72 / 5, abs=1e-12)
    assert metrics["clip_fraction"] == pytest.approx(0.4)
    expected_kl = sum(r - 1 - math.log(r) for r in MASKED_RATIOS) / 5
    assert metrics["approx_kl"] == pytest.approx(expected_kl, abs=1e-12)
    assert set(metrics) == {"clip_fraction", "approx_kl"}


def test_gradient_is_zero_where_clipped_or_masked() -> None:
    lp = new_logprobs()
    loss, _ = policy_loss(lp, old_logprobs(), ADV, MASK)
    loss.backward()
    # d/dlogp of -(r A)/N = -(r A)/N where unclipped; 0 where clipped or masked
    expected = torch.tensor([[0.0, -0.5 / 5, -1.1 / 5], [0.0, 3.0 / 5, 0.0]], dtype=torch.float64)
    assert lp.grad is not None
    torch.testing.assert_close(lp.grad, expected)


def test_per_token_advantages_equal_broadcast_ones() -> None:
    per_token = ADV.unsqueeze(-1).expand(2, 3).to(torch.float64)
    a, _ = policy_loss(new_logprobs(), old_logprobs(), ADV, MASK)
    b, _ = policy_loss(new_logprobs(), old_logprobs(), per_token, MASK)
    assert a.item() == pytest.approx(b.item(), abs=1e-12)


def test_num_tokens_sets_the_denominator() -> None:
    loss, _ = policy_loss(new_logprobs(), old_logprobs(), ADV, MASK, num_tokens=10)
    assert loss.item() == pytest.approx(1.72 / 10, abs=1e-12)


def test_symmetric_clip_changes_the_value() -> None:
    # with eps_high = 0.2 the first token is clipped at 1.2 instead of 1.28: 0.08 less gain
    loss, _ = policy_loss(new_logprobs(), old_logprobs(), ADV, MASK, eps_high=0.2)
    assert loss.item() == pytest.approx((1.72 + 0.08) / 5, abs=1e-12)


def test_kl_term_k3_against_reference() -> None:
    ref = torch.zeros(2, 3, dtype=torch.float64)
    kl = sum(1 / r + math.log(r) - 1 for r in MASKED_RATIOS) / 5
    off, m_off = policy_loss(new_logprobs(), old_logprobs(), ADV, MASK, ref_logprobs=ref)
    on, m_on = policy_loss(new_logprobs(), old_logprobs(), ADV, MASK, ref_logprobs=ref, kl_coef=0.1)
    assert m_off["kl_ref"] == pytest.approx(kl, abs=1e-12)
    assert off.item() == pytest.approx(0.344, abs=1e-12)  # reported, not added, at coef 0
    assert on.item() == pytest.approx(0.344 + 0.1 * kl, abs=1e-12)


def test_entropy_term() -> None:
    ent = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]], dtype=torch.float64)
    loss, metrics = policy_loss(
        new_logprobs(), old_logprobs(), ADV, MASK, entropy=ent, entropy_coef=0.01
    )
    assert metrics["entropy"] == pytest.approx(15.0 / 5)
    assert loss.item() == pytest.approx(0.344 - 0.01 * 3.0, abs=1e-12)


def test_empty_mask_gives_zero_loss() -> None:
    loss, metrics = policy_loss(new_logprobs(), old_logprobs(), ADV, torch.zeros(2, 3))
    assert loss.item() == 0.0 and metrics["clip_fraction"] == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kl_coef": 0.1}, "ref_logprobs"),
        ({"entropy_coef": 0.1}, "entropy"),
        ({"eps_low": 1.0}, "eps_low"),
        ({"num_tokens": 0}, "num_tokens"),
    ],
)
def test_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy_loss(new_logprobs(), old_logprobs(), ADV, MASK, **kwargs)


def test_shape_mismatches() -> None:
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(new_logprobs(), torch.zeros(2, 4), ADV, MASK)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(new_logprobs(), old_logprobs(), torch.ones(3), MASK)
    with pytest.raises(ValueError, match=r"\[batch, tokens\]"):
        policy_loss(torch.zeros(3), torch.zeros(3), torch.ones(3), torch.ones(3))
