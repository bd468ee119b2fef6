"""The learner's ranks in `rstar2 train`: how every rank builds its policy, and how rank 0
starts the others (`cluster.learner_ranks`).

Rank 0 is the learner actor on the bus (`RunState.open` calls `start_ranks`, then
`build_policy`); ranks 1..N-1 run `follower_main`: join the group, build the same policy from
the same model directory (so every rank starts from identical weights before FSDP2 shards
them), and follow rank 0's commands until it stops them (`rstar2.learner.rank_group`).
The group's backend follows the learner's device: NCCL (RCCL on ROCm) on GPUs, gloo on CPU.

Rank 0 spawns the other ranks on its own host (one host's GPUs, or CPU processes). Starting them
from torchrun or Slurm across hosts is not built yet (see docs/production.md).

What it does not do: the update itself (`rstar2.learner.policy`), or the run's decisions.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rstar2.learner.policy import LearnerPolicy, resolve_device
from rstar2.learner.rank_group import RankGroup, join_group, serve_commands
from rstar2.model.loader import load_model
from rstar2.train.config import TrainConfig

log = logging.getLogger(__name__)


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def build_policy(cfg: TrainConfig, model_dir: Path, local_rank: int) -> tuple[LearnerPolicy, Any]:
    """This rank's policy (sharded when the process group has several ranks) and tokenizer."""
    device = resolve_device(cfg.learner.device, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model, tokenizer = load_model(model_dir)
    pad_id = int(tokenizer.pad_token_id or 0)
    return LearnerPolicy(model, cfg.learner, cfg.rl, pad_id, device), tokenizer


def start_ranks(cfg: TrainConfig, model_dir: Path) -> RankGroup | None:
    """Start the learner's other ranks on this host; None for a one-rank learner."""
    world = cfg.cluster.learner_ranks
    if world == 1:
        return None
    backend = backend_for(resolve_device(cfg.learner.device))
    group = RankGroup.spawn(world, follower_main, (cfg, str(model_dir)), backend)
    log.info("learner: %d ranks (%s, FSDP2)", world, backend)
    return group


def follower_main(
    rank: int, world: int, init_method: str, cfg: TrainConfig, model_dir: str
) -> None:
    """Rank `rank` of the learner: join, build the policy, follow rank 0 until it stops."""
    if cfg.graph.learner_threads > 0:
        torch.set_num_threads(cfg.graph.learner_threads)
    torch.manual_seed(cfg.seed)
    backend = backend_for(resolve_device(cfg.learner.device, rank))
    control = join_group(rank, world, init_method, backend)
    try:
        policy, _ = build_policy(cfg, Path(model_dir), local_rank=rank)
        serve_commands(policy, control)
    finally:
        dist.destroy_process_group()
