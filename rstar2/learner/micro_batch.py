"""One micro-batch of a policy update: its rollouts padded or packed, their logprobs, its loss.

`micro_batch_loss` runs one micro-batch's forward and returns its part of the mini-batch's
loss (to backpropagate), its token-weighted metrics and the training-inference mismatch its
logprobs show; `micro_batch_logprobs` is the no-grad pre-pass over one micro-batch (the
learner's pre-update logprobs). A micro-batch takes the packed path (one row without padding,
the chunked LM head: `packing`, `logprob_head`) when the model was prepared for it
(`model_preparation.packed_head`), else padded rows and full logits (`pad_batch`,
`token_logprobs`). `split_micro_batches` sizes the micro-batches of a mini-batch.

Token alignment: position t of a sequence predicts token t+1, so the logprob, old logprob and
mask of token t+1 line up with the model's output at t.

What it does not do: step the optimizer, split the batch into mini-batches or run the pre-pass
over a whole step (`policy_update.py`), or prepare the model (`model_preparation.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

from rstar2.learner import packing
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.logprob_head import LogprobHead
from rstar2.learner.model_preparation import packed_head
from rstar2.learner.packing import PackedMicroBatch, pack, token_budget_micro_batches
from rstar2.learner.step_timer import phase
from rstar2.rl.mismatch import Mismatch, logprob_mismatch
from rstar2.rl.policy_loss import policy_loss
from rstar2.rl.resampling import TrainingBatch
from rstar2.rl.rl_config import RLConfig


class RolloutLike(Protocol):
    token_ids: Sequence[int]
    loss_mask: Sequence[int]
    logprobs: Sequence[float]


Proximal = dict[int, torch.Tensor]
"""The learner's logprobs before the step's first optimizer step, by batch index: one tensor per
rollout holding the logprobs of its loss tokens, in order."""


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
    model: nn.Module,
    ids: torch.Tensor,
    attn: torch.Tensor,
    with_entropy: bool = True,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprob of each next token (shape [B, T-1]) and, optionally, the policy's entropy there.

    `entropy_grad`: keep the entropy in the autograd graph (an entropy bonus in the loss,
    `rl.entropy_coef > 0`); otherwise it is a metric, computed without grad and in place. Peak
    memory is two float32 [B, T-1, vocab] tensors (the log-softmax and one temporary): at a
    151,936-token vocabulary that is 4.6 GiB for 4 x 2,048 tokens, so micro-batches are sized
    with it in mind."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    with phase("head_forward"):  # the log-softmax part (the projection is in the model)
        logp_all = F.log_softmax(logits.float(), dim=-1)
        del logits  # log_softmax's backward needs only its output
        logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        entropy = None
        if with_entropy and entropy_grad:
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        elif with_entropy:
            with torch.no_grad():
                entropy = -logp_all.exp().mul_(logp_all).sum(-1)
    return logp, entropy


def model_device(model: nn.Module) -> torch.device:
    """Where the model's parameters (their local shards under FSDP2) live."""
    param = next(model.parameters())
    return param.to_local().device if isinstance(param, DTensor) else param.device


def _autocast(enabled: bool, device: torch.device) -> torch.autocast:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def micro_batch_loss(
    model: nn.Module,
    part: Sequence[RolloutLike],
    rows: Sequence[int],
    advantages: torch.Tensor,
    proximal: Proximal | None,
    num_tokens: float,
    cfg: LearnerConfig,
    rl: RLConfig,
    pad_id: int,
) -> tuple[torch.Tensor, dict[str, float], Mismatch]:
    """One micro-batch's forward: its part of the mini-batch loss (to backpropagate), its
    metrics weighted by its share of the mini-batch's `num_tokens` (the caller sums them), and
    the mismatch of this forward's logprobs against the engine's. `rows` are the batch indices
    of `part` (keys of `proximal`).

    The ratio's reference: the engine's logprobs (the paper); with the decoupled loss (TIS on,
    or asynchronous RL: `rl.decoupled`) the learner's pre-update ones, from the pre-pass when there was one, else this forward's own
    (the model is untouched in a step's first optimizer step)."""
    device = model_device(model)
    head = packed_head(model)
    if head is not None:
        packed, out = _packed_forward(model, head, part, advantages.tolist(), cfg, device)
        logp, entropy = out[None, :, 0], out[None, :, 1]
        entropy = entropy if rl.entropy_coef > 0 else entropy.detach()
        behaviour = packed.behaviour[None]
        mask = torch.ones_like(behaviour)
        advantages = packed.advantages[None]
    else:
        ids, attn, mask, behaviour = (t.to(device) for t in pad_batch(part, pad_id))
        mask, behaviour = mask[:, 1:], behaviour[:, 1:]
        with phase("forward"), _autocast(cfg.bf16, device):
            logp, entropy = token_logprobs(model, ids, attn, entropy_grad=rl.entropy_coef > 0)
    reference, tis_behaviour = behaviour, None
    if rl.decoupled:
        reference, tis_behaviour = logp.detach(), behaviour
        if proximal is not None:
            reference = _scattered([proximal[i] for i in rows], mask, logp, head is not None)
    loss, metrics = policy_loss(
        logp,
        reference,
        advantages.to(device=device, dtype=torch.float32),
        mask,
        behaviour_logprobs=tis_behaviour,
        tis_cap=rl.tis_cap if rl.tis else None,
        eps_low=rl.eps_low,
        eps_high=rl.eps_high,
        entropy=entropy,
        entropy_coef=rl.entropy_coef,
        num_tokens=num_tokens,
    )
    share = float(mask.sum()) / num_tokens
    weighted = {k: v * share for k, v in metrics.items()}
    weighted["loss"] = float(loss.detach())
    return loss, weighted, logprob_mismatch(logp, behaviour, mask)


def micro_batch_logprobs(
    model: nn.Module,
    part: Sequence[RolloutLike],
    rows: Sequence[int],
    cfg: LearnerConfig,
    pad_id: int,
) -> tuple[Proximal, Mismatch]:
    """The pre-pass over one micro-batch (call under no_grad): the learner's logprobs of each
    rollout by batch index (`rows`), and their mismatch against the engine's."""
    device = model_device(model)
    head = packed_head(model)
    if head is not None:
        packed, out = _packed_forward(model, head, part, [0.0] * len(part), cfg, device)
        logp = out[:, 0]
        # not strict: a rank's filler micro-batch (one all-masked rollout) has no rows
        got = dict(zip(rows, logp.split(packed.counts), strict=False))
        ones = torch.ones_like(packed.behaviour)
        return got, logprob_mismatch(logp, packed.behaviour, ones)
    ids, attn, mask, behaviour = (t.to(device) for t in pad_batch(part, pad_id))
    with phase("forward"), _autocast(cfg.bf16, device):
        logp, _ = token_logprobs(model, ids, attn, with_entropy=False)
    mask, behaviour = mask[:, 1:], behaviour[:, 1:]
    got = {i: logp[j][mask[j].bool()] for j, i in enumerate(rows)}
    return got, logprob_mismatch(logp, behaviour, mask)


def _packed_forward(
    model: nn.Module,
    head: LogprobHead,
    part: Sequence[RolloutLike],
    advantages: Sequence[float],
    cfg: LearnerConfig,
    device: torch.device,
) -> tuple[PackedMicroBatch, torch.Tensor]:
    """The micro-batch packed into one row on `device`, and the model's forward over it: [N, 2],
    the log-prob and entropy of each of its N loss tokens."""
    packed = pack(part, advantages).to(device)
    dtype = packing.compute_dtype(model, cfg.bf16)
    packing.check_varlen(model, device, dtype)  # before the (maybe compiled) layers run
    with phase("forward"), _autocast(cfg.bf16, device), head.targets(packed.targets):
        out = model(**packed.forward_kwargs()).logits[0]
    packing.note_attention_path(model, device, dtype)
    return packed, out


def _scattered(
    rows: list[torch.Tensor], mask: torch.Tensor, like: torch.Tensor, packed: bool
) -> torch.Tensor:
    """Per-rollout loss-token logprobs laid out as `like`: packed ([1, N]), one row of every
    rollout's in turn; padded ([B, T-1]), row j's at the nonzero entries of `mask` row j."""
    out = torch.zeros_like(like)
    if packed:
        return torch.cat(rows)[None].to(like.dtype) if rows else out
    for j, row in enumerate(rows):
        out[j][mask[j].bool()] = row.to(like.dtype)
    return out


def split_micro_batches(
    items: Sequence[int], batch: TrainingBatch, cfg: LearnerConfig
) -> list[list[int]]:
    """The micro-batches of the rollouts `items` (batch indices): by `cfg.micro_batch_tokens`
    and `cfg.micro_batch_size` in order, or evenly by sequence count without a token budget."""
    if cfg.micro_batch_tokens <= 0:
        return micro_batches(items, cfg.micro_batch_size)
    lengths = [len(batch.rollouts[i].token_ids) for i in items]
    return token_budget_micro_batches(items, lengths, cfg.micro_batch_tokens, cfg.micro_batch_size)


def micro_batches(items: Sequence[int], size: int) -> list[list[int]]:
    """`items` in the fewest near-equal contiguous micro-batches of at most `size`."""
    return [m for m in even_chunks(items, math.ceil(len(items) / size)) if m]


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
