"""Exact values of the clipped surrogate on a hand-built 2 x 3 batch.

seq 0, A = +1, ratios [1.5, 0.5, 1.1]: min(r A, clip(r) A) = [1.28 (clipped), 0.5, 1.1]
seq 1, A = -2, ratios [0.5, 1.5, -] (last token masked, logprob -inf there):
                                     = [-1.6 (clipped: 0.8 * -2), -3.0, -]
sum = -1.72 over N = 5 masked tokens -> loss = 0.344; clip fraction 2/5.

Truncated importance sampling: behaviour logprobs -log(w) against proximal ones of 0 give raw
weights w = [2, 0.5, 4 | 1, 3, -]; capped at C = 2.5 they are [2, 0.5, 2.5 | 1, 2.5]:
weighted s = [2.56, 0.25, 2.75 | -1.6, -7.5], sum -3.54 -> loss 0.708; mean weight 8.5/5 = 1.7,
2 of 5 truncated. Untruncated: [2.56, 0.25, 4.4 | -1.6, -9.0], sum -3.39 -> loss 0.678.
"""

from __future__ import annotations

import math

import pytest
import torch

from rstar2.config import ConfigError, from_dict
from rstar2.rl.policy_loss import policy_loss
from rstar2.rl.rl_config import RLConfig

RATIOS = [[1.5, 0.5, 1.1], [0.5, 1.5, 1.0]]
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
ADV = torch.tensor([1.0, -2.0])
MASKED_RATIOS = [1.5, 0.5, 1.1, 0.5, 1.5]
RAW_WEIGHTS = [[2.0, 0.5, 4.0], [1.0, 3.0, 1.0]]


def new_logprobs() -> torch.Tensor:
    lp = torch.log(torch.tensor(RATIOS, dtype=torch.float64))
    lp[1, 2] = -math.inf  # garbage where the mask is 0 must not leak in
    return lp.requires_grad_(True)


def proximal_logprobs() -> torch.Tensor:
    return torch.zeros(2, 3, dtype=torch.float64)


def behaviour_logprobs() -> torch.Tensor:
    """log w = proximal - behaviour, so behaviour = -log w; -inf where the mask is 0."""
    lp = -torch.log(torch.tensor(RAW_WEIGHTS, dtype=torch.float64))
    lp[1, 2] = -math.inf  # an infinite raw weight there must not leak in
    return lp


def test_loss_value_and_metrics() -> None:
    lp = new_logprobs()
    loss, metrics = policy_loss(lp, proximal_logprobs(), ADV, MASK)
    assert loss.item() == pytest.approx(1.72 / 5, abs=1e-12)
    assert metrics["clip_fraction"] == pytest.approx(0.4)
    expected_kl = sum(r - 1 - math.log(r) for r in MASKED_RATIOS) / 5
    assert metrics["approx_kl"] == pytest.approx(expected_kl, abs=1e-12)
    assert set(metrics) == {"clip_fraction", "approx_kl"}


def test_gradient_is_zero_where_clipped_or_masked() -> None:
    lp = new_logprobs()
    loss, _ = policy_loss(lp, proximal_logprobs(), ADV, MASK)
    loss.backward()
    # d/dlogp of -(r A)/N = -(r A)/N where unclipped; 0 where clipped or masked
    expected = torch.tensor([[0.0, -0.5 / 5, -1.1 / 5], [0.0, 3.0 / 5, 0.0]], dtype=torch.float64)
    assert lp.grad is not None
    torch.testing.assert_close(lp.grad, expected)


def test_per_token_advantages_equal_broadcast_ones() -> None:
    per_token = ADV.unsqueeze(-1).expand(2, 3).to(torch.float64)
    a, _ = policy_loss(new_logprobs(), proximal_logprobs(), ADV, MASK)
    b, _ = policy_loss(new_logprobs(), proximal_logprobs(), per_token, MASK)
    assert a.item() == pytest.approx(b.item(), abs=1e-12)


def test_num_tokens_sets_the_denominator() -> None:
    loss, _ = policy_loss(new_logprobs(), proximal_logprobs(), ADV, MASK, num_tokens=10)
    assert loss.item() == pytest.approx(1.72 / 10, abs=1e-12)


def test_symmetric_clip_changes_the_value() -> None:
    # with eps_high = 0.2 the first token is clipped at 1.2 instead of 1.28: 0.08 less gain
    loss, _ = policy_loss(new_logprobs(), proximal_logprobs(), ADV, MASK, eps_high=0.2)
    assert loss.item() == pytest.approx((1.72 + 0.08) / 5, abs=1e-12)


def test_kl_term_k3_against_reference() -> None:
    ref = torch.zeros(2, 3, dtype=torch.float64)
    kl = sum(1 / r + math.log(r) - 1 for r in MASKED_RATIOS) / 5
    off, m_off = policy_loss(new_logprobs(), proximal_logprobs(), ADV, MASK, ref_logprobs=ref)
    on, m_on = policy_loss(
        new_logprobs(), proximal_logprobs(), ADV, MASK, ref_logprobs=ref, kl_coef=0.1
    )
    assert m_off["kl_ref"] == pytest.approx(kl, abs=1e-12)
    assert off.item() == pytest.approx(0.344, abs=1e-12)  # reported, not added, at coef 0
    assert on.item() == pytest.approx(0.344 + 0.1 * kl, abs=1e-12)


def test_entropy_term() -> None:
    ent = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 100.0]], dtype=torch.float64)
    loss, metrics = policy_loss(
        new_logprobs(), proximal_logprobs(), ADV, MASK, entropy=ent, entropy_coef=0.01
    )
    assert metrics["entropy"] == pytest.approx(15.0 / 5)
    assert loss.item() == pytest.approx(0.344 - 0.01 * 3.0, abs=1e-12)


def test_empty_mask_gives_zero_loss() -> None:
    loss, metrics = policy_loss(new_logprobs(), proximal_logprobs(), ADV, torch.zeros(2, 3))
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
        policy_loss(new_logprobs(), proximal_logprobs(), ADV, MASK, **kwargs)


def test_shape_mismatches() -> None:
    with pytest.raises(ValueError, match="proximal_logprobs"):
        policy_loss(new_logprobs(), torch.zeros(2, 4), ADV, MASK)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(new_logprobs(), proximal_logprobs(), torch.ones(3), MASK)
    with pytest.raises(ValueError, match=r"\[batch, tokens\]"):
        policy_loss(torch.zeros(3), torch.zeros(3), torch.ones(3), torch.ones(3))


def test_truncated_importance_weights_scale_each_token() -> None:
    lp = new_logprobs()
    loss, metrics = policy_loss(
        lp, proximal_logprobs(), ADV, MASK, behaviour_logprobs=behaviour_logprobs(), tis_cap=2.5
    )
    assert loss.item() == pytest.approx(3.54 / 5, abs=1e-12)
    assert metrics["tis_weight_mean"] == pytest.approx(1.7, abs=1e-12)
    assert metrics["tis_truncated_fraction"] == pytest.approx(0.4, abs=1e-12)
    assert metrics["clip_fraction"] == pytest.approx(0.4)  # the weights do not move the clip
    loss.backward()
    # d/dlogp of -(w r A)/N where unclipped: -(0.5 * 0.5)/5, -(2.5 * 1.1)/5, (2.5 * 1.5 * 2)/5
    expected = torch.tensor([[0.0, -0.05, -0.55], [0.0, 1.5, 0.0]], dtype=torch.float64)
    assert lp.grad is not None
    torch.testing.assert_close(lp.grad, expected)


def test_untruncated_weights_without_a_cap() -> None:
    loss, metrics = policy_loss(
        new_logprobs(), proximal_logprobs(), ADV, MASK, behaviour_logprobs=behaviour_logprobs()
    )
    assert loss.item() == pytest.approx(3.39 / 5, abs=1e-12)
    assert metrics["tis_weight_mean"] == pytest.approx(10.5 / 5, abs=1e-12)
    assert metrics["tis_truncated_fraction"] == 0.0


def test_behaviour_equal_to_proximal_is_the_plain_loss() -> None:
    plain, m_plain = policy_loss(new_logprobs(), proximal_logprobs(), ADV, MASK)
    same = proximal_logprobs()
    weighted, m = policy_loss(
        new_logprobs(), proximal_logprobs(), ADV, MASK, behaviour_logprobs=same, tis_cap=1.0
    )
    assert weighted.item() == pytest.approx(plain.item(), abs=1e-12)
    assert m["tis_weight_mean"] == 1.0 and m["tis_truncated_fraction"] == 0.0
    assert set(m) == set(m_plain) | {"tis_weight_mean", "tis_truncated_fraction"}


def test_tis_cap_needs_behaviour_logprobs_and_a_cap_of_at_least_one() -> None:
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        policy_loss(new_logprobs(), proximal_logprobs(), ADV, MASK, tis_cap=2.0)
    with pytest.raises(ValueError, match="tis_cap"):
        policy_loss(
            new_logprobs(),
            proximal_logprobs(),
            ADV,
            MASK,
            behaviour_logprobs=behaviour_logprobs(),
            tis_cap=0.5,
        )
    with pytest.raises(ValueError, match="behaviour_logprobs"):
        policy_loss(
            new_logprobs(), proximal_logprobs(), ADV, MASK, behaviour_logprobs=torch.zeros(2, 4)
        )


@pytest.mark.parametrize("cap", [0.5, -1.0])
def test_rl_tis_cap_below_one_is_refused_by_name(cap: float) -> None:
    with pytest.raises(ConfigError, match="rl.tis_cap"):
        from_dict(RLConfig, {"tis_cap": cap})


@pytest.mark.parametrize(("cap", "on"), [(None, False), (0.0, False), (1.0, True), (2.0, True)])
def test_rl_tis_cap_is_off_by_default_and_at_zero(cap: float | None, on: bool) -> None:
    cfg = RLConfig(tis_cap=cap)
    cfg.validate()
    assert cfg.tis is on
    assert RLConfig().tis is False
