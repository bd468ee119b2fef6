"""One GRPO-RoC policy update: logprobs under the current policy, the clipped loss, AdamW.

`update_policy(model, optimizer, batch, cfg, rl)` takes the step's `TrainingBatch` (the kept
rollouts of every prompt with their advantages, see `rstar2.rl`) and:

1. splits it into `cfg.mini_batches` mini-batches (one optimizer step each: the first is
   on-policy, later ones are slightly off-policy, which is what the clip range is for), and
   goes over them `cfg.epochs` times (PPO epochs; 1 in the paper);
2. runs each mini-batch in micro-batches of `cfg.micro_batch_size` sequences, accumulating
   gradients; the loss is the token-level mean over all model tokens of the mini-batch
   (`num_tokens` passed to `policy_loss`), so a micro-batch split changes nothing;
3. importance ratios are against the behaviour policy's logprobs recorded by the engine at
   sampling time (tool and prompt tokens are masked out by the trajectory's loss mask), or,
   with truncated importance sampling (`rl.tis_cap`), against the learner's own logprobs
   before the step's update, each token weighted by min(exp(lp_learner - lp_engine), C);
4. clips the global gradient norm and steps the optimizer and its warm-up schedule; a step
   whose gradient norm is not finite is skipped (its update would turn every weight into
   NaN) and counted in the metric `skipped_updates`.

Training-inference mismatch. Every step reports `logprob_mismatch_mean` and
`logprob_mismatch_max`: |learner logprob - engine logprob| over all sampled tokens of the batch
(the rollouts RoC kept), the learner's taken before the step's first optimizer step
(`rstar2.rl.mismatch`). Where those pre-update logprobs come from:
- one mini-batch (the default), unless TIS is on with several epochs: the first optimizer
  step's forward covers the whole batch with untouched weights, so its logprobs are the
  measurement (and TIS's proximal logprobs); no extra cost;
- several mini-batches, or TIS with several epochs: a no-grad pre-pass over the batch first
  (one more forward per rollout, no backward: roughly a third more learner compute for a
  one-epoch step), whose logprobs are the measurement and, with TIS, the proximal logprobs of
  every optimizer step.

One micro-batch's forward and loss are in `micro_batch.py`, the settings in
`learner_config.py`, the model's preparation (packed head, checkpointing, compilation) in
`model_preparation.py`.

What it does not do: choose rollouts (rstar2.rl), talk to engines (the learner actor) or
checkpoint (checkpoint.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
from torch import nn

from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.micro_batch import (
    Proximal,
    even_chunks,
    micro_batch_logprobs,
    micro_batch_loss,
    split_micro_batches,
)
from rstar2.learner.step_timer import phase
from rstar2.rl.mismatch import Mismatch
from rstar2.rl.resampling import TrainingBatch
from rstar2.rl.rl_config import RLConfig

log = logging.getLogger(__name__)


def make_optimizer(model: nn.Module, cfg: LearnerConfig) -> torch.optim.AdamW:
    """AdamW over the model's parameters; its fused CUDA kernel when they are all on a GPU
    (one kernel launch for every tensor instead of chains of foreach ones: on an H200 the
    1.5B shape's optimizer step took 0.022 s with it, about 0.04 s without). FSDP2's DTensor
    parameters take the same kernel."""
    params = list(model.parameters())
    return torch.optim.AdamW(
        params,
        lr=cfg.lr,
        betas=cfg.betas,
        weight_decay=cfg.weight_decay,
        fused=fused_adamw(params),
    )


def fused_adamw(params: list[torch.Tensor]) -> bool | None:
    """True when every parameter is on CUDA (the fused AdamW kernel), else None (torch's
    default: foreach on the CPU)."""
    return True if params and all(p.is_cuda for p in params) else None


def make_lr_schedule(
    opt: torch.optim.Optimizer, cfg: LearnerConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to `cfg.lr` over `warmup_steps` optimizer steps, then constant."""
    warm = max(cfg.warmup_steps, 0)
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (warm + 1)))


def update_policy(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    batch: TrainingBatch,
    cfg: LearnerConfig,
    rl: RLConfig,
    pad_id: int = 0,
) -> dict[str, float]:
    """Apply the step's policy update in place; returns averaged metrics."""
    return optimizer_steps(
        model,
        optimizer,
        schedule,
        len(batch.rollouts),
        cfg,
        rl,
        lambda chunk, proximal: _mini_batch(model, batch, chunk, cfg, rl, pad_id, proximal),
        lambda chunk: _learner_logprobs(model, batch, chunk, cfg, pad_id),
    )


Accumulate = Callable[[list[int], Proximal | None], tuple[dict[str, float], Mismatch]]
"""`accumulate(chunk, proximal)`: forward and backward of the mini-batch `chunk` (batch
indices), gradients accumulated; returns its metrics and the mismatch its forward saw, both
global (over every rank)."""

Measure = Callable[[list[int]], tuple[Proximal, Mismatch]]
"""`measure(chunk)`: the pre-pass over `chunk`, no gradients: the learner's logprobs of the
rollouts this rank trains on, and the global mismatch."""


def optimizer_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    n: int,
    cfg: LearnerConfig,
    rl: RLConfig,
    accumulate: Accumulate,
    measure: Measure,
) -> dict[str, float]:
    """One optimizer step per mini-batch of the `n` rollouts, `cfg.epochs` passes over the same
    mini-batches: `accumulate` the gradients, then clip, step, schedule. Shared by the
    single-process and the sharded (FSDP2) learner. Returns the metrics averaged over all
    optimizer steps, and the step's logprob mismatch: from the pre-pass when there is one
    (`needs_pre_pass`), else from the first (only) mini-batch's forward."""
    if n == 0:
        zeros = {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "grad_norm": 0.0,
                 "skipped_updates": 0.0}  # fmt: skip
        return {**zeros, **Mismatch().metrics()}
    model.train()
    sums: dict[str, float] = {}
    chunks = [c for c in even_chunks(list(range(n)), min(cfg.mini_batches, n)) if c]
    steps = [chunk for _ in range(cfg.epochs) for chunk in chunks]
    proximal: Proximal | None = None
    mismatch: Mismatch | None = None
    skipped = 0
    if needs_pre_pass(len(chunks), cfg.epochs, rl):
        proximal, mismatch = _pre_pass(chunks, measure)
    for chunk in steps:
        step_metrics, seen = accumulate(chunk, proximal)
        mismatch = seen if mismatch is None else mismatch
        with phase("optimizer"):
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP2 (the global norm)
                grad_norm = grad_norm.full_tensor()
            norm = float(grad_norm)
            if math.isfinite(norm):
                optimizer.step()
                schedule.step()
            else:  # every rank sees the same global norm, so every rank skips
                skipped += 1
                log.warning("gradient norm %s: optimizer step skipped", norm)
            optimizer.zero_grad(set_to_none=True)
        step_metrics["grad_norm"] = norm if math.isfinite(norm) else 0.0
        for k, v in step_metrics.items():
            sums[k] = sums.get(k, 0.0) + v
    out = {k: v / len(steps) for k, v in sums.items()}
    out["lr"] = float(optimizer.param_groups[0]["lr"])
    out["skipped_updates"] = float(skipped)
    out.update((mismatch or Mismatch()).metrics())
    return out


def needs_pre_pass(mini_batches: int, epochs: int, rl: RLConfig) -> bool:
    """Whether the step needs the learner's pre-update logprobs beyond what its first optimizer
    step's forward gives: when that step does not cover the whole batch (the mismatch is
    measured before any update), or when the decoupled loss (TIS, asynchronous RL) needs
    proximal logprobs in a later step."""
    return mini_batches > 1 or (rl.decoupled and epochs > 1)


def _pre_pass(chunks: list[list[int]], measure: Measure) -> tuple[Proximal, Mismatch]:
    proximal: Proximal = {}
    mismatch = Mismatch()
    with torch.no_grad():
        for chunk in chunks:
            part, seen = measure(chunk)
            proximal.update(part)
            mismatch += seen
    return proximal, mismatch


def _mini_batch(
    model: nn.Module,
    batch: TrainingBatch,
    chunk: list[int],
    cfg: LearnerConfig,
    rl: RLConfig,
    pad_id: int,
    proximal: Proximal | None,
) -> tuple[dict[str, float], Mismatch]:
    num_tokens = max(float(sum(sum(batch.rollouts[i].loss_mask[1:]) for i in chunk)), 1.0)
    weighted: dict[str, float] = {}
    seen = Mismatch()
    for micro in split_micro_batches(chunk, batch, cfg):
        part = [batch.rollouts[i] for i in micro]
        advantages = torch.tensor([batch.advantages[i] for i in micro])
        loss, metrics, mismatch = micro_batch_loss(
            model, part, micro, advantages, proximal, num_tokens, cfg, rl, pad_id
        )
        with phase("backward"):
            loss.backward()
        seen += mismatch
        for k, v in metrics.items():
            weighted[k] = weighted.get(k, 0.0) + v
    return weighted, seen


def _learner_logprobs(
    model: nn.Module, batch: TrainingBatch, chunk: list[int], cfg: LearnerConfig, pad_id: int
) -> tuple[Proximal, Mismatch]:
    proximal: Proximal = {}
    seen = Mismatch()
    for micro in split_micro_batches(chunk, batch, cfg):
        got, mismatch = micro_batch_logprobs(
            model, [batch.rollouts[i] for i in micro], micro, cfg, pad_id
        )
        proximal.update(got)
        seen += mismatch
    return proximal, seen
