"""The policy one learner rank trains: model, optimizer and schedule, alone or sharded.

`LearnerPolicy` is the same object on every rank of the learner. With one rank it wraps the
plain model and `update_policy`; in a torch.distributed group (N ranks, or one rank that joined
a group of its own) the model is sharded with FSDP2 (`shard_model`) and the update is
`update_policy_sharded`, which gives the one-rank result up to float rounding. Methods marked
*collective* must be called by every rank, in the same order: rank 0 drives the others through
`rank_group.RankGroup`.

- `update(batch)`: one GRPO-RoC policy update (collective);
- `reset_optimizer()`: a fresh optimizer and warm-up schedule (the paper's stage-3 reset);
- `weights(bucket_bytes)`: the full (unsharded) tensors, yielded one bucket at a time on rank 0
  (collective): each tensor is all-gathered on its own and copied to the CPU, so the memory a
  weight push adds on any rank is one bucket plus the tensor being gathered, never the model;
- `save(dir)` / `load(dir)`: model and optimizer state with `torch.distributed.checkpoint`
  (collective). DCP stores each rank's shards under a global plan, so a checkpoint written by N
  ranks loads on M (tested 2 -> 1 and 1 -> 2); torch.save of a gathered state dict could not,
  and would hold the whole model and optimizer on rank 0.

Placement (`LearnerConfig`): `device` ("auto": CUDA when torch sees a GPU - ROCm is "cuda" in
torch - else the CPU; rank r takes GPU `local_rank`); `bf16`: bf16 compute with fp32 master
weights and fp32 optimizer state (FSDP2's `MixedPrecisionPolicy` when sharded on GPUs,
`torch.autocast` otherwise); `prepare_model` readies the model before sharding: packed rows and
the chunked LM head, activation checkpointing (every `checkpoint_every`-th decoder layer,
`activation_checkpoint.py`), compiled layers. FSDP2 with one rank keeps
the gathered parameters from forward to backward (`reshard_after_forward` False): resharding
would free nothing another rank could use, and gather them again; it reduces the gradients
once per mini-batch, after its last micro-batch (`sync_every_micro_batch`), instead of after
each; and it wraps the whole model as one FSDP2 unit (`shard_per_layer`), so no per-layer
hooks run around each layer's forward and backward.

`load_policy` builds a rank's policy from a model directory; `policy_rank` is the body of every
rank but 0 (used by `rstar2 train` and `rstar2 bench learner`).

What it does not do: start processes or pass commands between ranks (`rank_group.py`), choose
rollouts (rstar2.rl) or checkpoint the run's other state (the train package).
"""

from __future__ import annotations

import logging
import resource
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor

from rstar2 import devices
from rstar2.learner.distributed import (
    DistributedConfig,
    several_ranks_only,
    shard_model,
    syncs_every_micro_batch,
    update_policy_sharded,
)
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.model_preparation import packed_head, prepare_model
from rstar2.learner.policy_update import make_lr_schedule, make_optimizer, update_policy
from rstar2.learner.rank_group import follow, join_group, leave, serve_commands
from rstar2.model.loader import load_model
from rstar2.rl.resampling import TrainingBatch
from rstar2.rl.rl_config import RLConfig

log = logging.getLogger(__name__)


def resolve_device(setting: str, local_rank: int = 0) -> torch.device:
    """The device `learner.device = setting` means for the rank with this local index."""
    return devices.resolve_device(setting, "learner.device", local_rank)


class LearnerPolicy:
    """Model, optimizer and schedule of one learner rank (see the module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        cfg: LearnerConfig,
        rl: RLConfig,
        pad_id: int = 0,
        device: torch.device | None = None,
    ) -> None:
        self.cfg = cfg
        self.rl = rl
        self.pad_id = pad_id
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.sharded = dist.is_initialized()
        """FSDP2 whenever the process is in a group, one rank too (`rstar2 bench learner
        --fsdp`: the sharded path, and NCCL, on a single GPU)."""
        self.device = device or torch.device("cpu")
        model.to(self.device)
        prepare_model(model, cfg)
        self.packed = packed_head(model) is not None
        """Whether updates take the packed, chunked-head path (`prepare_model`)."""
        self.reshard_after_forward: bool | None = None
        self.sync_every_micro_batch: bool | None = None
        self.shard_per_layer: bool | None = None
        if self.sharded:
            self.sync_every_micro_batch = syncs_every_micro_batch(cfg, self.world)
            # One rank holds every parameter anyway: resharding after forward would only
            # gather them again for backward, and per-layer units only add hooks.
            self.reshard_after_forward = several_ranks_only(cfg.reshard_after_forward, self.world)
            self.shard_per_layer = several_ranks_only(cfg.shard_per_layer, self.world)
            shard_model(
                model,
                DistributedConfig(
                    bf16_params=cfg.bf16,
                    reshard_after_forward=self.reshard_after_forward,
                    per_layer=self.shard_per_layer,
                ),
            )
        self.model = model
        self.optimizer = make_optimizer(model, cfg)
        self.schedule = make_lr_schedule(self.optimizer, cfg)

    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    def update(self, batch: TrainingBatch) -> dict[str, float]:
        """One policy update on the step's batch (collective); the same metrics on every rank."""
        step = update_policy_sharded if self.sharded else update_policy
        return step(
            self.model, self.optimizer, self.schedule, batch, self.cfg, self.rl, self.pad_id
        )

    def reset_optimizer(self) -> None:
        self.optimizer = make_optimizer(self.model, self.cfg)
        self.schedule = make_lr_schedule(self.optimizer, self.cfg)

    def weights(self, bucket_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
        """The full tensors (state-dict names, CPU, their own dtype) in buckets of about
        `bucket_bytes` (a tensor larger than that is a bucket of its own). Collective: every rank
        must exhaust the iterator; the buckets are yielded on rank 0 only. With one rank on the
        CPU the tensors are the parameters themselves: use them before the next update."""
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
        bucket: dict[str, torch.Tensor] = {}
        size = 0
        for name, tensor in self.model.state_dict().items():
            full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
            if self.rank != 0:
                continue
            # A gathered tensor is already a fresh one; a one-rank CPU tensor is the parameter
            # itself (no copy: the caller flattens or sends it before the next update).
            bucket[name] = full.detach().to("cpu")
            size += full.numel() * full.element_size()
            if size >= bucket_bytes:
                yield bucket
                bucket, size = {}, 0
        if bucket:
            yield bucket

    def full_weights(self) -> dict[str, torch.Tensor]:
        """Every full tensor on rank 0, `{}` elsewhere (collective; holds the whole model): a
        snapshot, copied where `weights` would hand out the parameters themselves."""
        out: dict[str, torch.Tensor] = {}
        for bucket in self.weights(2**62):
            out.update(bucket)
        if self.world == 1:
            out = {k: v.clone() for k, v in out.items()}
        return out

    def peak_memory_mb(self) -> float:
        """The largest peak memory of any rank, in MiB (collective): GPU memory allocated by
        torch on GPUs, the process's peak resident set on the CPU."""
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        value = torch.tensor([peak], dtype=torch.float64)
        if self.world > 1:
            gloo_ok = dist.get_backend() == "gloo"
            value = value if gloo_ok else value.to(self.device)
            dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return float(value.item())

    def save(self, path: Path) -> None:
        """Model and optimizer state into directory `path` with DCP (collective)."""
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        with _one_process_dcp():
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=Path(path))

    def load(self, path: Path, schedule: dict[str, Any] | None = None) -> None:
        """Restore model and optimizer state from `save`'s directory, whatever rank count
        wrote it, and the schedule's state when given (collective)."""
        if not (Path(path) / ".metadata").is_file():
            raise FileNotFoundError(f"{path} is not a torch.distributed.checkpoint directory")
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        state = {"model": model_state, "optim": optim_state}
        with _one_process_dcp():
            dcp.load(state, checkpoint_id=Path(path))
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
        )
        if schedule is not None:
            self.schedule.load_state_dict(schedule)


@contextmanager
def _one_process_dcp() -> Iterator[None]:
    """DCP warns on every save/load without a process group ("assuming the intent is to save
    in a single process"): exactly the one-rank learner's intent, so not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        yield


def use_device(setting: str, local_rank: int = 0) -> torch.device:
    """`resolve_device`, made this process's current CUDA device when it is one: before a rank
    joins an NCCL group, so that the group binds the rank's own GPU rather than cuda:0."""
    device = resolve_device(setting, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def backend_for(device: torch.device) -> str:
    """The process-group backend of learner ranks on `device`: NCCL (RCCL) on GPUs, else gloo."""
    return "nccl" if device.type == "cuda" else "gloo"


def load_policy(
    model_dir: Path, cfg: LearnerConfig, rl: RLConfig, local_rank: int
) -> tuple[LearnerPolicy, Any]:
    """This rank's policy from a model directory (sharded when the process group has several
    ranks) and the tokenizer, on the device `cfg.device` gives this local rank."""
    device = use_device(cfg.device, local_rank)
    model, tokenizer = load_model(model_dir)
    pad_id = int(tokenizer.pad_token_id or 0)
    return LearnerPolicy(model, cfg, rl, pad_id, device), tokenizer


def external_rank(rank: int, world: int, init_method: str, device: str, local_rank: int) -> None:
    """A follower rank started outside the learner actor (`rstar2 learner-rank`, by torchrun or
    srun): join rank 0 at `init_method`, take the policy's settings from it, load the policy on
    local device `local_rank` of `device`, and follow rank 0 until it stops. SIGINT is ignored,
    as in `policy_rank`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    member, args = follow(rank, world, init_method, backend_for(use_device(device, local_rank)))
    model_dir, cfg, rl, threads, seed = args
    try:
        if threads > 0:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        policy, _ = load_policy(Path(model_dir), cfg, rl, local_rank=local_rank)
        serve_commands(policy, member.control)
    finally:
        leave(rank, member)


def policy_rank(
    rank: int,
    world: int,
    init_method: str,
    model_dir: str,
    cfg: LearnerConfig,
    rl: RLConfig,
    threads: int = 0,
    seed: int = 0,
) -> None:
    """A follower rank (`RankGroup.spawn`'s entry): join, load the policy, follow rank 0 until it
    stops. `threads` > 0 sets torch's thread count. SIGINT is ignored: a Ctrl-C reaches the
    whole process group, and rank 0 owns the stop (it checkpoints with every rank first)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    member = join_group(rank, world, init_method, backend_for(use_device(cfg.device, rank)))
    try:
        policy, _ = load_policy(Path(model_dir), cfg, rl, local_rank=rank)
        serve_commands(policy, member.control)
    finally:
        leave(rank, member)
