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
   sampling time (tool and prompt tokens are masked out by the trajectory's loss mask);
4. clips the global gradient norm and steps the optimizer and its warm-up schedule.

Token alignment: position t of a sequence predicts token t+1, so the logprob, old logprob and
mask of token t+1 line up with the model's output at t.

What it does not do: choose rollouts (rstar2.rl), talk to engines (the learner actor) or
checkpoint (checkpoint.py).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from rstar2.config import require
from rstar2.rl import RLConfig, TrainingBatch, policy_loss


@dataclass
class LearnerConfig:
    """Optimisation settings of the RL learner."""

    lr: float = 1e-6
    """Peak learning rate (paper: constant 1e-6 after warm-up)."""
    warmup_steps: int = 20
    """Linear warm-up over this many RL steps (paper: 20), then constant."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value."""
    micro_batch_size: int = 16
    """Sequences per forward/backward pass (gradient accumulation inside a mini-batch)."""
    mini_batches: int = 1
    """Optimizer steps per pass: the batch is split into this many mini-batches."""
    epochs: int = 1
    """Passes over the step's batch (PPO epochs; the paper: 1, each rollout used once). More
    passes reuse the rollouts for further, increasingly off-policy optimizer steps (the clip
    range bounds them) and multiply the update's work by `epochs`, which also makes it a
    what-if knob: `rstar2 profile --set learner.epochs=N` shows the step with an N times
    heavier policy update."""
    bf16: bool = False
    """bf16 compute with fp32 master weights and optimizer state: FSDP2's mixed-precision policy
    when the learner is sharded on GPUs, bf16 autocast of the forward pass otherwise."""
    device: str = "auto"
    """Where the learner computes: "auto" (a GPU when torch sees one, else the CPU), "cpu" or
    "cuda" (ROCm GPUs are "cuda" in torch). Rank r of a sharded learner takes its local GPU."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in backward instead of keeping them (less
    memory, about one more forward of compute); the Hugging Face model's gradient checkpointing."""

    def validate(self) -> None:
        require(self.lr > 0, "learner.lr", self.lr, "a positive number")
        require(self.warmup_steps >= 0, "learner.warmup_steps", self.warmup_steps, ">= 0")
        require(self.weight_decay >= 0, "learner.weight_decay", self.weight_decay, ">= 0")
        require(self.grad_clip > 0, "learner.grad_clip", self.grad_clip, "a positive number")
        require(
            self.micro_batch_size >= 1, "learner.micro_batch_size", self.micro_batch_size, ">= 1"
        )
        require(self.mini_batches >= 1, "learner.mini_batches", self.mini_batches, ">= 1")
        require(self.epochs >= 1, "learner.epochs", self.epochs, "an integer >= 1")
        require(
            self.device in ("auto", "cpu", "cuda"),
            "learner.device",
            self.device,
            '"auto", "cpu" or "cuda"',
        )


class RolloutLike(Protocol):
    token_ids: Sequence[int]
    loss_mask: Sequence[int]
    logprobs: Sequence[float]


def make_optimizer(model: nn.Module, cfg: LearnerConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
    )


def make_lr_schedule(
    opt: torch.optim.Optimizer, cfg: LearnerConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to `cfg.lr` over `warmup_steps` optimizer steps, then constant."""
    warm = max(cfg.warmup_steps, 0)
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (warm + 1)))


def pad_batch(rollouts: Sequence[RolloutLike], pad_id: int = 0) -> tuple[torch.Tensor, ...]:
    """Right-padded [B, T] token ids, attention mask, loss mask and old logprobs."""
    if not rollouts:
        raise ValueError("pad_batch needs at least one rollout")
    width = max(len(r.token_ids) for r in rollouts)
    ids = torch.full((len(rollouts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rollouts), width), dtype=torch.long)
    mask = torch.zeros((len(rollouts), width), dtype=torch.float32)
    old = torch.zeros((len(rollouts), width), dtype=torch.float32)
    for i, r in enumerate(rollouts):
        n = len(r.token_ids)
        if not (len(r.loss_mask) == len(r.logprobs) == n):
            raise ValueError(f"rollout {i}: token_ids, loss_mask and logprobs differ in length")
        ids[i, :n] = torch.tensor(r.token_ids, dtype=torch.long)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(r.loss_mask, dtype=torch.float32)
        old[i, :n] = torch.tensor(r.logprobs, dtype=torch.float32)
    return ids, attn, mask, old


def token_logprobs(
    model: nn.Module, ids: torch.Tensor, attn: torch.Tensor, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprob of each next token (shape [B, T-1]) and, optionally, the policy's entropy there."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def _autocast(enabled: bool) -> contextlib.AbstractContextManager[object]:
    if enabled:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


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
        lambda chunk: _mini_batch(model, batch, chunk, cfg, rl, pad_id),
    )


def optimizer_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    n: int,
    cfg: LearnerConfig,
    mini_batch: Callable[[list[int]], dict[str, float]],
) -> dict[str, float]:
    """One optimizer step per mini-batch of the `n` rollouts, `cfg.epochs` passes over the same
    mini-batches: `mini_batch(indices)` accumulates the gradients and returns its metrics; then
    clip, step, schedule. Shared by the single-process and the sharded (FSDP2) learner. Returns
    the metrics averaged over all optimizer steps."""
    if n == 0:
        return {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "grad_norm": 0.0}
    model.train()
    sums: dict[str, float] = {}
    chunks = [c for c in even_chunks(list(range(n)), min(cfg.mini_batches, n)) if c]
    steps = [chunk for _ in range(cfg.epochs) for chunk in chunks]
    for chunk in steps:
        step_metrics = mini_batch(chunk)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP2
            grad_norm = grad_norm.full_tensor()
        step_metrics["grad_norm"] = float(grad_norm)
        for k, v in step_metrics.items():
            sums[k] = sums.get(k, 0.0) + v
    out = {k: v / len(steps) for k, v in sums.items()}
    out["lr"] = float(optimizer.param_groups[0]["lr"])
    return out


def _mini_batch(
    model: nn.Module,
    batch: TrainingBatch,
    chunk: list[int],
    cfg: LearnerConfig,
    rl: RLConfig,
    pad_id: int,
) -> dict[str, float]:
    rollouts = [batch.rollouts[i] for i in chunk]
    advantages = torch.tensor([batch.advantages[i] for i in chunk], dtype=torch.float32)
    num_tokens = float(sum(sum(r.loss_mask[1:]) for r in rollouts))
    weighted: dict[str, float] = {}
    micro_batches = math.ceil(len(chunk) / cfg.micro_batch_size)
    for micro in [m for m in even_chunks(list(range(len(chunk))), micro_batches) if m]:
        ids, attn, mask, old = pad_batch([rollouts[i] for i in micro], pad_id)
        with _autocast(cfg.bf16):
            logp, entropy = token_logprobs(model, ids, attn)
        loss, metrics = policy_loss(
            logp,
            old[:, 1:],
            advantages[micro],
            mask[:, 1:],
            eps_low=rl.eps_low,
            eps_high=rl.eps_high,
            entropy=entropy,
            entropy_coef=rl.entropy_coef,
            num_tokens=max(num_tokens, 1.0),
        )
        loss.backward()
        share = float(mask[:, 1:].sum()) / max(num_tokens, 1.0)
        metrics["loss"] = float(loss.detach()) / share if share > 0 else 0.0
        for k, v in metrics.items():
            weighted[k] = weighted.get(k, 0.0) + v * share
    return weighted


def even_chunks(items: Sequence[int], parts: int) -> list[list[int]]:
    """`items` in `parts` contiguous chunks whose sizes differ by at most one; empty chunks kept
    (ranks need equal micro-batch counts). `parts` is clamped to at least 1."""
    parts = max(1, parts)
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for p in range(parts):
        end = start + size + (1 if p < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out
