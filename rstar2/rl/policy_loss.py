"""The GRPO-RoC policy loss: a token-level clipped surrogate with clip-higher, and optional
truncated importance sampling against the behaviour policy.

Two "old" policies, kept apart (the decoupled PPO form of AReaL):
- the *proximal* policy, the one the trust region is measured from: the ratio is clipped
  around it;
- the *behaviour* policy, the one that sampled the tokens (the engine's recorded logprobs).

For every loss-masked token t (mask 1: a sampled model token; tool output and prompt are 0):

    ratio_t = exp(logp_new_t - logp_prox_t)
    w_t     = min(exp(logp_prox_t - logp_behav_t), C)    (1 without behaviour logprobs)
    s_t     = w_t * min(ratio_t * A_t, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A_t)
    loss    = -(sum_t s_t) / N                    N = number of loss-masked tokens in the batch

Without behaviour logprobs the proximal ones are also the behaviour ones: the paper's loss, with
the engine's logprobs as the old policy. With them, w_t corrects for the tokens having been
drawn from the behaviour policy rather than the proximal one; truncating it at C (`tis_cap`,
truncated importance sampling, Yao et al. 2025) bounds its variance, and `tis_cap=None` leaves
it untruncated. w_t is a constant (no gradient flows through it) and weights the surrogate
only, not the KL or entropy terms. Synchronous training uses it for the training-inference
mismatch (proximal = the learner's own logprobs before the step's update, behaviour = the
engine's); an asynchronous trainer passes a stale engine's logprobs as behaviour.

Token-level averaging (one N for the whole batch, not a mean per sequence) lets long correct
solutions weigh in proportion to their length (DAPO); eps_high > eps_low ("clip-higher", 0.28
vs 0.2) leaves more room to raise the probability of unlikely tokens, which keeps entropy from
collapsing. With gradient accumulation, pass the whole step's token count as `num_tokens` so
that every micro-batch divides by the same N.

Optional terms, both off by default as in the paper:
- KL to a reference policy with the k3 estimator, per token
  kl_t = exp(logp_ref_t - logp_new_t) - (logp_ref_t - logp_new_t) - 1  (>= 0, unbiased),
  added as + kl_coef * sum_t kl_t / N;
- an entropy bonus from per-token entropies the caller computed from the logits,
  added as - entropy_coef * sum_t H_t / N.

Metrics (floats, averaged over this call's masked tokens):
- `clip_fraction`: share of tokens where the clipped term is the smaller one, i.e. where
  clipping removed the gradient (ratio > 1 + eps_high with A > 0, or ratio < 1 - eps_low with
  A < 0);
- `approx_kl`: k3 estimate of KL(proximal || new), mean of (ratio - 1) - log(ratio);
- `kl_ref` when reference logprobs are given; `entropy` when entropies are given;
- with behaviour logprobs, `tis_weight_mean` (mean w_t) and `tis_truncated_fraction` (share of
  tokens whose weight was cut to C).

Masked-out positions never reach the arithmetic (their log-ratios are replaced by 0), so garbage
logprobs there (e.g. 0.0 or -inf for tool tokens) cannot produce NaN.

What it does not do: compute logprobs or entropies from logits, or average over micro-batches.
"""

from __future__ import annotations

import torch


def policy_loss(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    behaviour_logprobs: torch.Tensor | None = None,
    tis_cap: float | None = None,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    num_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The scalar loss to minimise and its metrics.

    Shapes: `logprobs`, `proximal_logprobs`, `loss_mask` (and `behaviour_logprobs`,
    `ref_logprobs`, `entropy`) are [batch, tokens]; `advantages` is [batch] (one per sequence)
    or [batch, tokens]. `tis_cap` (C >= 1) needs `behaviour_logprobs`.
    """
    mask = _check_inputs(logprobs, proximal_logprobs, advantages, loss_mask, eps_low, eps_high)
    adv = advantages.unsqueeze(-1).expand_as(logprobs) if advantages.dim() == 1 else advantages
    adv = adv.to(logprobs.dtype)
    count = float(mask.sum().item())
    denom = float(num_tokens) if num_tokens is not None else max(count, 1.0)
    if denom <= 0:
        raise ValueError(f"num_tokens must be > 0, got {num_tokens}")
    per_call = max(count, 1.0)
    zeros = torch.zeros_like(logprobs)

    log_ratio = torch.where(mask, logprobs - proximal_logprobs.detach(), zeros)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    surrogate = torch.minimum(unclipped, clipped)
    metrics: dict[str, float] = {}
    if behaviour_logprobs is not None:
        weight, metrics = _tis_weight(proximal_logprobs, behaviour_logprobs, mask, tis_cap)
        surrogate = surrogate * weight.to(surrogate.dtype)
    elif tis_cap is not None:
        raise ValueError("tis_cap needs behaviour_logprobs")
    loss = -(surrogate * mask).sum() / denom

    with torch.no_grad():
        metrics["clip_fraction"] = float(((clipped < unclipped) & mask).sum().item() / per_call)
        metrics["approx_kl"] = float((((ratio - 1) - log_ratio) * mask).sum().item() / per_call)

    loss = _add_kl_ref(loss, metrics, logprobs, ref_logprobs, mask, kl_coef, denom, per_call)
    loss = _add_entropy(loss, metrics, logprobs, entropy, mask, entropy_coef, denom, per_call)
    return loss, metrics


def _add_kl_ref(
    loss: torch.Tensor,
    metrics: dict[str, float],
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    mask: torch.Tensor,
    kl_coef: float,
    denom: float,
    per_call: float,
) -> torch.Tensor:
    """`loss` plus the KL penalty to the reference policy (k3 estimator) when `kl_coef` > 0;
    sets `metrics["kl_ref"]` when `ref_logprobs` is given."""
    if ref_logprobs is None:
        if kl_coef > 0:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        return loss
    _same_shape(ref_logprobs, logprobs, "ref_logprobs")
    diff = torch.where(mask, ref_logprobs.detach() - logprobs, torch.zeros_like(logprobs))
    kl = (torch.exp(diff) - diff - 1) * mask
    metrics["kl_ref"] = float(kl.sum().item() / per_call)
    if kl_coef > 0:
        loss = loss + kl_coef * kl.sum() / denom
    return loss


def _add_entropy(
    loss: torch.Tensor,
    metrics: dict[str, float],
    logprobs: torch.Tensor,
    entropy: torch.Tensor | None,
    mask: torch.Tensor,
    entropy_coef: float,
    denom: float,
    per_call: float,
) -> torch.Tensor:
    """`loss` minus the entropy bonus when `entropy_coef` > 0; sets `metrics["entropy"]` when
    `entropy` is given."""
    if entropy is None:
        if entropy_coef > 0:
            raise ValueError("entropy_coef > 0 needs entropy")
        return loss
    _same_shape(entropy, logprobs, "entropy")
    ent = torch.where(mask, entropy, torch.zeros_like(entropy))
    metrics["entropy"] = float(ent.sum().item() / per_call)
    if entropy_coef > 0:
        loss = loss - entropy_coef * ent.sum() / denom
    return loss


def _tis_weight(
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cap: float | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """w_t = min(exp(logp_prox_t - logp_behav_t), cap), 1 where masked out; and its metrics."""
    _same_shape(behaviour_logprobs, proximal_logprobs, "behaviour_logprobs")
    if cap is not None and not cap >= 1:
        raise ValueError(f"tis_cap must be >= 1 (or None for no truncation), got {cap}")
    with torch.no_grad():
        log_w = proximal_logprobs.detach() - behaviour_logprobs.detach()
        raw = torch.exp(torch.where(mask, log_w, torch.zeros_like(log_w)))
        weight = raw if cap is None else torch.clamp(raw, max=cap)
        count = max(float(mask.sum().item()), 1.0)
        truncated = (raw > weight) & mask
        metrics = {
            "tis_weight_mean": float((weight * mask).sum().item() / count),
            "tis_truncated_fraction": float(truncated.sum().item() / count),
        }
    return weight, metrics


def _check_inputs(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
) -> torch.Tensor:
    """Validate shapes and clip ranges; return the mask as bool."""
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [batch, tokens], got shape {tuple(logprobs.shape)}")
    _same_shape(proximal_logprobs, logprobs, "proximal_logprobs")
    _same_shape(loss_mask, logprobs, "loss_mask")
    if advantages.dim() == 1:
        if advantages.shape[0] != logprobs.shape[0]:
            raise ValueError(
                f"advantages has {advantages.shape[0]} rows, logprobs {logprobs.shape[0]}"
            )
    else:
        _same_shape(advantages, logprobs, "advantages")
    if not (0 < eps_low < 1) or eps_high <= 0:
        raise ValueError(f"need 0 < eps_low < 1 and eps_high > 0, got {eps_low}, {eps_high}")
    return loss_mask.bool()


def _same_shape(t: torch.Tensor, ref: torch.Tensor, name: str) -> None:
    if t.shape != ref.shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(ref.shape)}")
