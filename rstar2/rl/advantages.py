"""Group-relative advantages (GRPO): A_i = (r_i - mean(r)) / (std(r) + eps) within one prompt.

`std` is the sample standard deviation (Bessel's correction, divisor n - 1), as `torch.std`
computes by default and as verl's GRPO (the base of the released rStar2 code) uses; `eps`
(default 1e-6) is added to it so a near-uniform group cannot divide by zero. Example: rewards
[1, 0, 0, 0] have mean 0.25 and std sqrt(0.75 / 3) = 0.5, so A = [1.5, -0.5, -0.5, -0.5].

A group whose rewards are all equal has A = 0 everywhere: it carries no signal, costs compute,
and is dropped (`has_signal`). One advantage per rollout; the learner broadcasts it to every
loss-masked token of the rollout.

What it does not do: choose which rollouts form the group (see `resampling`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def has_signal(rewards: Sequence[float] | torch.Tensor) -> bool:
    """False when every reward in the group is the same (or the group is empty)."""
    values = [float(r) for r in rewards]
    return len(values) >= 2 and any(v != values[0] for v in values)


def group_advantages(rewards: Sequence[float] | torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(r - mean) / (sample std + eps) over one prompt's kept rollouts, as float32."""
    r = torch.as_tensor(rewards, dtype=torch.float64)
    if r.dim() != 1 or r.numel() < 2:
        raise ValueError(f"need a 1-D group of at least 2 rewards, got shape {tuple(r.shape)}")
    if not torch.isfinite(r).all():
        raise ValueError(f"rewards must be finite, got {r.tolist()}")
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    return ((r - r.mean()) / (r.std(unbiased=True) + eps)).to(torch.float32)
