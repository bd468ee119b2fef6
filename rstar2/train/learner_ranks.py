"""The learner's ranks in `rstar2 train`: how rank 0 starts the others
(`cluster.learner_ranks`).

Rank 0 is the learner actor on the bus (`RunState.open` calls `start_ranks`, then
`rstar2.learner.policy.load_policy`); ranks 1..N-1 run `rstar2.learner.policy.policy_rank`: join
the group, build the same policy from the same model directory (so every rank starts from
identical weights before FSDP2 shards them), and follow rank 0's commands until it stops them.
The group's backend follows the learner's device: NCCL (RCCL on ROCm) on GPUs, gloo on CPU.

Rank 0 spawns the other ranks on its own host (one host's GPUs, or CPU processes), or, with
`cluster.learner_rendezvous = "tcp://HOST:PORT"`, meets ranks started on any hosts by torchrun
or srun running `rstar2 learner-rank` (`rstar2.learner.policy.external_rank`; see
docs/production.md).

What it does not do: the update itself (`rstar2.learner.policy`), or the run's decisions.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rstar2.learner.policy import (
    backend_for,
    policy_rank,
    resolve_device,
)
from rstar2.learner.rank_group import RankGroup
from rstar2.train.config import TrainConfig

log = logging.getLogger(__name__)


def start_ranks(cfg: TrainConfig, model_dir: Path) -> RankGroup | None:
    """Start the learner's other ranks on this host; None for a one-rank learner."""
    world = cfg.cluster.learner_ranks
    if world == 1:
        return None
    backend = backend_for(resolve_device(cfg.learner.device))
    args = (str(model_dir), cfg.learner, cfg.rl, cfg.graph.learner_threads, cfg.seed)
    rendezvous = cfg.cluster.learner_rendezvous
    if rendezvous:
        group = RankGroup.meet(world, rendezvous, backend, args)
        log.info("learner: %d ranks met at %s (%s, FSDP2)", world, rendezvous, backend)
    else:
        group = RankGroup.spawn(world, policy_rank, args, backend)
        log.info("learner: %d ranks (%s, FSDP2)", world, backend)
    return group
