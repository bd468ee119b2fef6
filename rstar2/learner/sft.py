"""Supervised fine-tuning (stage 0): teach the tool-call format on chat traces.

`SFTConfig` holds the settings (their defaults are the embedded default's measured budget, see
README "Model and task"). `encode_examples` turns chat traces into (token ids, loss mask)
pairs with `rstar2.model.encode_conversation`, so the loss covers assistant tokens only: mask 0
for system, user and tool-response tokens. `train_sft` runs AdamW with linear warm-up then
cosine decay, on right-padded random batches, with gradient clipping and a progress line every
`log_every` steps; a step whose loss or gradient is not finite is skipped (its update would
turn every weight into NaN), and `MAX_SKIPPED_IN_A_ROW` of them in a row stop SFT with
`SFTDivergedError`. It trains where the model's parameters are (`rstar2 train` puts them on
`learner.device`, with bf16 autocast under `learner.bf16`). With the same seed, data and
starting weights it gives the same weights (deterministic CPU kernels).

What it does not do: RL (see the learner actor), checkpointing mid-run, or evaluation.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from rstar2.learner.sft_config import SFTConfig
from rstar2.model.chat_format import encode_conversation

log = logging.getLogger(__name__)

Example = tuple[list[int], list[int]]


def sft_threads(cfg: SFTConfig) -> int:
    """The torch threads SFT runs with: `cfg.threads`, or every core."""
    return cfg.threads or os.cpu_count() or 1


@dataclass
class SFTResult:
    """What a run did: the loss of each step and the wall time."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0
    """Loss-bearing (assistant) tokens seen."""
    skipped: list[tuple[int, float, float]] = field(default_factory=list)
    """(1-based step, loss, gradient norm) of every step skipped for a non-finite loss or
    gradient (its update was not applied)."""


MAX_SKIPPED_IN_A_ROW = 10
"""Non-finite steps in a row after which SFT stops with `SFTDivergedError`: one bad batch is
skipped, a model that keeps producing NaN has diverged."""


class SFTDivergedError(RuntimeError):
    """SFT's loss or gradients stayed non-finite for `MAX_SKIPPED_IN_A_ROW` steps in a row."""


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Learning rate of 0-based `step`: linear warm-up, then cosine from lr to lr*min_lr_ratio."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def encode_examples(
    tokenizer: PreTrainedTokenizerBase, traces: Sequence[Sequence[dict[str, str]]]
) -> list[Example]:
    """(ids, mask) of each chat trace; mask 1 exactly on assistant-written tokens."""
    return [encode_conversation(tokenizer, trace) for trace in traces]


def collate(examples: Sequence[Example], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-pad to the longest example: (input_ids, attention_mask, loss_mask) tensors."""
    if not examples:
        raise ValueError("collate needs at least one example")
    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(examples), width), dtype=torch.long)
    loss = torch.zeros((len(examples), width), dtype=torch.float32)
    for row, (tok, mask) in enumerate(examples):
        if len(tok) != len(mask):
            raise ValueError(f"example {row}: {len(tok)} ids but {len(mask)} mask entries")
        ids[row, : len(tok)] = torch.tensor(tok)
        attn[row, : len(tok)] = 1
        loss[row, : len(tok)] = torch.tensor(mask, dtype=torch.float32)
    return ids, attn, loss


def masked_lm_loss(
    model: nn.Module, ids: torch.Tensor, attn: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """Mean next-token cross-entropy over the tokens whose loss mask is 1."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    targets = ids[:, 1:]
    weights = loss_mask[:, 1:]
    nll = nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="none"
    )
    return (nll * weights.reshape(-1)).sum() / weights.sum().clamp(min=1.0)


def _batches(n: int, cfg: SFTConfig) -> list[list[int]]:
    """Indices of every step's batch: shuffled epochs, seeded, never a short batch."""
    rng = random.Random(cfg.seed)
    order: list[int] = []
    out = []
    for _ in range(cfg.steps):
        if len(order) < cfg.batch_size:
            epoch = list(range(n))
            rng.shuffle(epoch)
            order += epoch
        out.append(order[: cfg.batch_size])
        order = order[cfg.batch_size :]
    return out


def train_sft(
    model: nn.Module,
    examples: Sequence[Example],
    cfg: SFTConfig,
    pad_id: int,
    on_step: Callable[[int], None] | None = None,
    bf16: bool = False,
) -> SFTResult:
    """Fine-tune `model` in place on `examples`, on the device its parameters are on; returns
    per-step losses.

    `on_step(step)` (1-based), if given, runs after every optimizer step, e.g. to evaluate
    along the way; it must leave the model in train mode. `bf16`: the forward pass under bf16
    autocast (the weights and AdamW's state stay float32, as the RL learner's `learner.bf16`).
    """
    cfg.validate()
    if not examples:
        raise ValueError("train_sft needs at least one example")
    torch.manual_seed(cfg.seed)
    model.train()
    # torch's default AdamW (foreach), not the RL learner's fused kernel: on an H200 SFT was
    # no faster with it (docs/production.md, "On a GPU")
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
    )
    result = SFTResult()
    device = next(model.parameters()).device
    start = time.perf_counter()
    in_a_row = 0
    for step, batch in enumerate(_batches(len(examples), cfg)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        ids, attn, loss_mask = (t.to(device) for t in collate([examples[i] for i in batch], pad_id))
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = masked_lm_loss(model, ids, attn, loss_mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
        if math.isfinite(grad_norm) and math.isfinite(loss.item()):
            opt.step()
            in_a_row = 0
        else:  # a NaN/inf step would poison every weight: skip it, stop if it persists
            result.skipped.append((step + 1, loss.item(), grad_norm))
            in_a_row += 1
            log.warning(
                "sft step %d: loss %s, gradient norm %s: update skipped (%d so far)",
                step + 1, loss.item(), grad_norm, len(result.skipped),
            )  # fmt: skip
            if in_a_row >= MAX_SKIPPED_IN_A_ROW:
                raise SFTDivergedError(
                    f"SFT diverged: {in_a_row} steps in a row with a non-finite loss or "
                    f"gradient (up to step {step + 1}; lr {lr_at(step, cfg):.2e}); lower sft.lr "
                    "or raise sft.warmup_steps"
                )
        result.losses.append(loss.item())
        result.tokens += int(loss_mask[:, 1:].sum())
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            elapsed = time.perf_counter() - start
            log.info(
                "sft step %5d/%d  loss %7.4f  lr %.2e  grad %6.3f  %6.1fs",
                step + 1,
                cfg.steps,
                result.losses[-1],
                lr_at(step, cfg),
                grad_norm,
                elapsed,
            )
        if on_step is not None:
            on_step(step + 1)
    model.eval()
    result.seconds = time.perf_counter() - start
    return result
