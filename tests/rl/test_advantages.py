from __future__ import annotations

import math

import pytest
import torch

from rstar2.rl.advantages import group_advantages, has_signal


def test_one_correct_of_four() -> None:
    # mean 0.25, sample std sqrt(3 * 0.0625 + 0.5625) / sqrt(3) = sqrt(0.25) = 0.5
    a = group_advantages([1.0, 0.0, 0.0, 0.0], eps=1e-6)
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6)
    torch.testing.assert_close(a, expected)
    assert a.dtype == torch.float32


def test_half_correct_uses_bessel_std() -> None:
    # mean 0.5; sample std = sqrt(4 * 0.25 / 3) = 1/sqrt(3); A = +-0.5 * sqrt(3)
    a = group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]))
    s = 0.5 / (1 / math.sqrt(3) + 1e-6)
    torch.testing.assert_close(a, torch.tensor([s, -s, s, -s]))


def test_uniform_group_has_zero_advantage_and_no_signal() -> None:
    torch.testing.assert_close(group_advantages([1.0, 1.0, 1.0]), torch.zeros(3))
    assert not has_signal([1.0, 1.0, 1.0])
    assert not has_signal([0.0])
    assert not has_signal([])
    assert has_signal([0.0, 0.0, 1.0])


@pytest.mark.parametrize("bad", [[1.0], [[1.0, 0.0]], [1.0, float("nan")]])
def test_bad_groups(bad: list) -> None:
    with pytest.raises(ValueError):
        group_advantages(bad)


def test_bad_eps() -> None:
    with pytest.raises(ValueError, match="eps"):
        group_advantages([1.0, 0.0], eps=0.0)
