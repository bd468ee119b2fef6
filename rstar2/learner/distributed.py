"""The GRPO-RoC policy update sharded over torch.distributed ranks with FSDP2 (`fully_shard`).

One code path for every placement: NCCL (RCCL on ROCm) on GPUs, gloo on CPU; a 2-rank gloo run
on one CPU host is what the tests check against the single-process `update_policy`.

How a step is split (it must give the single-process result, up to float rounding):

1. Every rank holds the same `TrainingBatch` (token lists are small next to the model) and cuts
   it into the same mini-batches as `update_policy`.
2. Rank r trains on `chunk[r::world]` of each mini-batch, cut into micro-batches by the token
   budget as `update_policy` does. Every rank runs the same number of micro-batches (FSDP2
   gathers parameters in each forward, so ranks must stay in step): each rank computes every
   rank's split, and one with fewer runs all-masked dummy micro-batches that add nothing.
3. Each rank's loss is normalised by the number of model tokens of the *whole* mini-batch, and
   FSDP2 reduce-scatters gradients as a sum (divide factor 1), so the reduced gradient is the
   gradient of the mini-batch's token-level mean loss:
       grad = sum_r d/dθ [ sum_{tokens t of rank r} l_t / T ],   T = model tokens of the chunk.
4. `clip_grad_norm_` on sharded (DTensor) gradients computes the global norm; the optimizer
   steps each rank's shard.
Metrics are each rank's token-weighted sums, all-reduced, so they equal the single-process ones.
The logprob mismatch is all-reduced as a sum of |differences| and a token count (its mean is
token-weighted) and a MAX of the ranks' maxima. The no-grad pre-pass (see `policy_update`: several
mini-batches, or TIS with several epochs) runs the same per-rank micro-batches as training, so
each rank holds the proximal logprobs of exactly the rollouts it trains on.

What it does not do: start processes (use torchrun, or `torch.multiprocessing` in tests), move
rollouts between ranks, or push weights to engines (`LearnerPolicy.weights` gathers them on
rank 0 for the caller to send).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.micro_batch import (
    Proximal,
    RolloutLike,
    micro_batch_logprobs,
    micro_batch_loss,
    model_device,
    split_micro_batches,
)
from rstar2.learner.policy_update import optimizer_steps
from rstar2.learner.step_timer import phase
from rstar2.rl.mismatch import Mismatch
from rstar2.rl.resampling import TrainingBatch
from rstar2.rl.rl_config import RLConfig

log = logging.getLogger(__name__)

METRIC_KEYS = ("loss", "clip_fraction", "approx_kl", "entropy")
TIS_METRIC_KEYS = ("tis_weight_mean", "tis_truncated_fraction")


@dataclass
class DistributedConfig:
    """How the learner's ranks talk and shard the model."""

    reshard_after_forward: bool = True
    """FSDP2: free gathered parameters after each forward (ZeRO-3 memory; one more all-gather in
    backward). False keeps them until backward (ZeRO-2-like, faster, more memory)."""
    bf16_params: bool = False
    """FSDP2 mixed precision on GPUs: bf16 compute copies of the parameters, fp32 gradient
    reduction and fp32 master weights. Ignored on CPU."""
    per_layer: bool = True
    """Each decoder layer a unit of its own, then the root; False: the whole model one unit
    (`LearnerConfig.shard_per_layer`)."""


def decoder_layers(model: nn.Module) -> Sequence[nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (`model.model.layers`)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if not isinstance(layers, nn.ModuleList) or len(layers) == 0:
        raise TypeError(
            f"{type(model).__name__} has no model.layers ModuleList; shard it by hand with "
            "fully_shard"
        )
    return list(layers)


def shard_model(model: nn.Module, cfg: DistributedConfig | None = None) -> nn.Module:
    """Apply FSDP2 to each decoder layer, then to the root (embeddings, norm, LM head); with
    `cfg.per_layer` False only to the root, which then holds every parameter.

    The model must be identical on every rank (same init seed or the same checkpoint). Gradients
    are reduced as a sum: `update_policy_sharded` normalises each rank's loss by the global token
    count, so a sum is the mean over the whole mini-batch.
    """
    cfg = cfg or DistributedConfig()
    kwargs: dict[str, object] = {"reshard_after_forward": cfg.reshard_after_forward}
    on_gpu = next(model.parameters()).is_cuda
    if cfg.bf16_params and on_gpu:
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        )
    for layer in decoder_layers(model) if cfg.per_layer else ():
        fully_shard(layer, **kwargs)  # type: ignore[arg-type]
    fully_shard(model, **kwargs)  # type: ignore[arg-type]
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            # A plain SUM collective: gloo has no PREMUL_SUM/AVG, and a sum is what we want.
            module.set_force_sum_reduction_for_comms(True)
    return model


def rank_share(indices: Sequence[int], rank: int, world: int) -> list[int]:
    """The rollouts rank `rank` of `world` trains on: every world-th one, from `rank`."""
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"need 0 <= rank < world, got rank={rank} world={world}")
    return list(indices[rank::world])


def update_policy_sharded(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    batch: TrainingBatch,
    cfg: LearnerConfig,
    rl: RLConfig,
    pad_id: int = 0,
) -> dict[str, float]:
    """`update_policy` over the default process group: same arguments, same result on every
    rank (metrics included). `model` must come from `shard_model` when the world has 2+ ranks."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world > 1 and not isinstance(model, FSDPModule):
        raise TypeError("with several ranks the model must be sharded first (shard_model)")
    return optimizer_steps(
        model,
        optimizer,
        schedule,
        len(batch.rollouts),
        cfg,
        rl,
        lambda chunk, proximal: _sharded_mini_batch(
            model, batch, chunk, cfg, rl, pad_id, rank, world, proximal
        ),
        lambda chunk: _sharded_logprobs(model, batch, chunk, cfg, pad_id, rank, world),
    )


def _sharded_mini_batch(
    model: nn.Module,
    batch: TrainingBatch,
    chunk: list[int],
    cfg: LearnerConfig,
    rl: RLConfig,
    pad_id: int,
    rank: int,
    world: int,
    proximal: Proximal | None,
) -> tuple[dict[str, float], Mismatch]:
    """Accumulate this rank's gradients for one mini-batch; returns the global metrics and
    mismatch."""
    num_tokens = max(float(sum(sum(batch.rollouts[i].loss_mask[1:]) for i in chunk)), 1.0)
    keys = METRIC_KEYS + (TIS_METRIC_KEYS if rl.decoupled else ())
    weighted = torch.zeros(len(keys), dtype=torch.float64)
    seen = Mismatch()
    micro_batches = list(_rank_micro_batches(batch, chunk, cfg, pad_id, rank, world))
    defer = isinstance(model, FSDPModule) and not syncs_every_micro_batch(cfg, world)
    for i, (part, rows, advantages) in enumerate(micro_batches):
        if defer:
            set_gradient_sync(model, i == len(micro_batches) - 1)
        loss, metrics, mismatch = micro_batch_loss(
            model, part, rows, advantages, proximal, num_tokens, cfg, rl, pad_id
        )
        with phase("backward"):
            loss.backward()
        seen += mismatch
        weighted += torch.tensor([metrics.get(k, 0.0) for k in keys], dtype=torch.float64)
    device = model_device(model)
    weighted = _all_reduced_sum(weighted, device, world)
    return {k: float(weighted[j]) for j, k in enumerate(keys)}, _all_reduced(seen, device, world)


def several_ranks_only(setting: bool | None, world: int) -> bool:
    """An FSDP2 setting whose None means "with several ranks only" (`reshard_after_forward`,
    `sync_every_micro_batch`, `shard_per_layer`: what a rank gains from them, one rank does
    not), resolved for a world of `world` ranks."""
    return world > 1 if setting is None else setting


def syncs_every_micro_batch(cfg: LearnerConfig, world: int) -> bool:
    """Whether FSDP2 reduces gradients after every micro-batch (`sync_every_micro_batch`)."""
    return several_ranks_only(cfg.sync_every_micro_batch, world)


def set_gradient_sync(model: FSDPModule, sync: bool) -> None:
    """Before a micro-batch's backward: reduce the gradients (with those accumulated since the
    last reduction) and reshard the parameters after it, or neither (gradients accumulate
    unsharded, parameters stay gathered for the next micro-batch). Every rank makes the same
    choice for the same micro-batch: they run the same number (`_rank_micro_batches`)."""
    model.set_requires_gradient_sync(sync)
    model.set_reshard_after_backward(sync)


def _sharded_logprobs(
    model: nn.Module,
    batch: TrainingBatch,
    chunk: list[int],
    cfg: LearnerConfig,
    pad_id: int,
    rank: int,
    world: int,
) -> tuple[Proximal, Mismatch]:
    """The pre-pass over one mini-batch: this rank's rollouts' logprobs, the global mismatch."""
    proximal: Proximal = {}
    seen = Mismatch()
    for part, rows, _ in _rank_micro_batches(batch, chunk, cfg, pad_id, rank, world):
        got, mismatch = micro_batch_logprobs(model, part, rows, cfg, pad_id)
        proximal.update(got)
        seen += mismatch
    return proximal, _all_reduced(seen, model_device(model), world)


def _rank_micro_batches(
    batch: TrainingBatch,
    chunk: list[int],
    cfg: LearnerConfig,
    pad_id: int,
    rank: int,
    world: int,
) -> Iterator[tuple[Sequence[RolloutLike], list[int], torch.Tensor]]:
    """This rank's micro-batches of `chunk`: rollouts, their batch indices, advantages. Every
    rank gets the same number (FSDP2 gathers parameters in each forward, so ranks must stay in
    step); a rank with fewer rollouts gets an all-masked filler whose loss is exactly zero."""
    splits = [split_micro_batches(rank_share(chunk, r, world), batch, cfg) for r in range(world)]
    count = max(len(s) for s in splits)
    for micro in splits[rank] + [[]] * (count - len(splits[rank])):
        if micro:
            advantages = torch.tensor([batch.advantages[i] for i in micro])
            yield [batch.rollouts[i] for i in micro], micro, advantages
        else:
            yield [_EmptyRollout(pad_id)], [], torch.zeros(1)


def _all_reduced_sum(t: torch.Tensor, device: torch.device, world: int) -> torch.Tensor:
    """`t` summed over the ranks (on `device`: NCCL reduces GPU tensors only), back on the CPU."""
    if world == 1:
        return t
    t = t.to(device)
    dist.all_reduce(t)
    return t.cpu()


def _all_reduced(m: Mismatch, device: torch.device, world: int) -> Mismatch:
    """The mismatch of every rank's tokens: sums and counts added, the maximum of the maxima."""
    if world == 1:
        return m
    sums = _all_reduced_sum(torch.tensor([m.abs_sum, m.tokens], dtype=torch.float64), device, world)
    peak = torch.tensor([m.abs_max], dtype=torch.float64, device=device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return Mismatch(float(sums[0]), float(sums[1]), float(peak[0]))


@dataclass(frozen=True)
class _EmptyRollout:
    """Two pad tokens, nothing trained: a rank's filler micro-batch."""

    pad_id: int

    @property
    def token_ids(self) -> list[int]:
        return [self.pad_id, self.pad_id]

    @property
    def loss_mask(self) -> list[int]:
        return [0, 0]

    @property
    def logprobs(self) -> list[float]:
        return [0.0, 0.0]
