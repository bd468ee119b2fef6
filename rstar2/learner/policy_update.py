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
4. clips the global gradient norm and steps the optimizer and its warm-up schedule.

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

Token alignment: position t of a sequence predicts token t+1, so the logprob, old logprob and
mask of token t+1 line up with the model's output at t.

What it does not do: choose rollouts (rstar2.rl), talk to engines (the learner actor) or
checkpoint (checkpoint.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

from rstar2.config import require
from rstar2.learner.logprob_head import LogprobHead
from rstar2.learner.logprob_head import install as install_head
from rstar2.learner.packing import (
    PACKED_ATTENTION,
    PackedMicroBatch,
    pack,
    token_budget_micro_batches,
    use_packed_attention,
)
from rstar2.learner.step_timer import phase
from rstar2.rl import Mismatch, RLConfig, TrainingBatch, logprob_mismatch, policy_loss


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
    """At most this many sequences per forward/backward pass (gradient accumulation inside a
    mini-batch)."""
    micro_batch_tokens: int = 16384
    """At most this many tokens per forward/backward pass (a longer sequence is a micro-batch of
    its own); 0: micro-batches of `micro_batch_size` sequences only, split evenly."""
    packed: bool = True
    """Hugging Face models: each micro-batch's sequences packed into one row without padding
    (attention kept within each sequence) and log-probs computed by the chunked LM head, only
    at loss positions (`packing`, `logprob_head`). False: padded rows and full logits (the
    reference computation). Other models always take the padded path."""
    head_chunk: int = 1024
    """Positions per chunk of the chunked LM head (its memory: a few chunk x vocab buffers)."""
    compile_head: bool | None = None
    """torch.compile the chunked LM head's element-wise work (forward: log-sum-exp, the sampled
    token's log-prob, the entropy; backward: the logits' gradient), the matmuls left to cuBLAS;
    the first update pays the compilation. None: on when the learner computes on a GPU
    (measured on an H200 at Qwen2.5-0.5B shape: the head 0.195 -> 0.074 s of the update,
    +39% tokens/s, docs/production.md), off on the CPU."""
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
    """Recompute decoder layers' activations in backward instead of keeping them (less
    memory, about one more forward of compute); the Hugging Face model's gradient checkpointing."""
    checkpoint_every: int = 1
    """With activation checkpointing: checkpoint every k-th decoder layer (layers 0, k, 2k, ...;
    1: all), trading memory for the recomputation's time."""
    reshard_after_forward: bool | None = None
    """FSDP2: free the gathered parameters after forward and gather them again for backward.
    None: only with several ranks (one rank frees nothing another could use)."""
    compile: bool | None = None
    """torch.compile each decoder layer (in place: module names unchanged), before FSDP2 wraps
    it; the first update pays the compilation (about 20 s at Qwen2.5-0.5B shape). None: on
    when the learner computes on a GPU (measured on an H200: +25% tokens/s at 0.5B, +34% at
    1.5B, docs/production.md), off on the CPU."""

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
            self.micro_batch_tokens >= 0,
            "learner.micro_batch_tokens",
            self.micro_batch_tokens,
            ">= 0 (0: no token budget)",
        )
        require(self.head_chunk >= 1, "learner.head_chunk", self.head_chunk, ">= 1")
        require(
            self.checkpoint_every >= 1, "learner.checkpoint_every", self.checkpoint_every, ">= 1"
        )
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


Proximal = dict[int, torch.Tensor]
"""The learner's logprobs before the step's first optimizer step, by batch index: one tensor per
rollout holding the logprobs of its loss tokens, in order."""

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
        zeros = {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "grad_norm": 0.0}
        return {**zeros, **Mismatch().metrics()}
    model.train()
    sums: dict[str, float] = {}
    chunks = [c for c in even_chunks(list(range(n)), min(cfg.mini_batches, n)) if c]
    steps = [chunk for _ in range(cfg.epochs) for chunk in chunks]
    proximal: Proximal | None = None
    mismatch: Mismatch | None = None
    if needs_pre_pass(len(chunks), cfg.epochs, rl):
        proximal, mismatch = _pre_pass(chunks, measure)
    for chunk in steps:
        step_metrics, seen = accumulate(chunk, proximal)
        mismatch = seen if mismatch is None else mismatch
        with phase("optimizer"):
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
    with phase("forward"), _autocast(cfg.bf16, device), head.targets(packed.targets):
        return packed, model(**packed.forward_kwargs()).logits[0]


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


def split_micro_batches(
    items: Sequence[int], batch: TrainingBatch, cfg: LearnerConfig
) -> list[list[int]]:
    """The micro-batches of the rollouts `items` (batch indices): by `cfg.micro_batch_tokens`
    and `cfg.micro_batch_size` in order, or evenly by sequence count without a token budget."""
    if cfg.micro_batch_tokens <= 0:
        return micro_batches(items, cfg.micro_batch_size)
    lengths = [len(batch.rollouts[i].token_ids) for i in items]
    return token_budget_micro_batches(items, lengths, cfg.micro_batch_tokens, cfg.micro_batch_size)


def prepare_model(model: nn.Module, cfg: LearnerConfig) -> nn.Module:
    """Ready a learner's model for `update_policy` (in place, before FSDP2 wraps it): the
    chunked LM head and packed attention when `cfg.packed` and the model supports both,
    activation checkpointing of every `cfg.checkpoint_every`-th decoder layer, and compiled
    decoder layers with `cfg.compile` (by default on a GPU: call after moving the model); the
    head's element-wise work compiled with `cfg.compile_head` (by default on a GPU too)."""
    on_gpu = next(iter(model.parameters()), torch.empty(0)).is_cuda
    compile_head = on_gpu if cfg.compile_head is None else cfg.compile_head
    if (
        cfg.packed
        and hasattr(model, "config")
        and install_head(model, cfg.head_chunk, compile_head)
    ):
        use_packed_attention(model)
    layers = getattr(getattr(model, "model", None), "layers", None)
    if cfg.activation_checkpointing:
        if not hasattr(model, "gradient_checkpointing_enable"):
            raise TypeError(
                f"learner.activation_checkpointing needs a Hugging Face model, got "
                f"{type(model).__name__}"
            )
        model.gradient_checkpointing_enable({"use_reentrant": False})
        for i, layer in enumerate(layers or []):
            if hasattr(layer, "gradient_checkpointing"):
                layer.gradient_checkpointing = i % cfg.checkpoint_every == 0
    compile_layers = on_gpu if cfg.compile is None else cfg.compile
    if compile_layers:
        if not isinstance(layers, nn.ModuleList):
            raise TypeError(f"learner.compile needs model.model.layers, {type(model).__name__}")
        for layer in layers:
            layer.compile()
    return model


def packed_head(model: nn.Module) -> LogprobHead | None:
    """The model's chunked LM head when it is ready for packed rows (`prepare_model`)."""
    head = getattr(model, "lm_head", None)
    config = getattr(model, "config", None)
    if isinstance(head, LogprobHead) and getattr(config, "_attn_implementation", None) == (
        PACKED_ATTENTION
    ):
        return head
    return None


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
