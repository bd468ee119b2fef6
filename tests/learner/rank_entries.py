"""Follower bodies of the rank-group tests (spawned processes import them from here)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.policy import LearnerPolicy
from rstar2.learner.rank_group import follow, join_group, leave, serve_commands
from rstar2.rl.rl_config import RLConfig
from tests.production.distributed_ranks import tiny_model

CFG = LearnerConfig(lr=1e-2, warmup_steps=2, grad_clip=0.5, micro_batch_size=2, mini_batches=2)


def policy(seed: int = 0) -> LearnerPolicy:
    return LearnerPolicy(tiny_model(seed), CFG, RLConfig())


def follower(rank: int, world: int, init_method: str) -> None:
    torch.set_num_threads(1)
    member = join_group(rank, world, init_method, "gloo")
    try:
        serve_commands(policy(), member.control)
    finally:
        leave(rank, member)


def dies_before_joining(rank: int, world: int, init_method: str) -> None:
    """A follower whose setup fails before it joins the group (a bad import, an unusable
    device)."""
    raise SystemExit(3)


def slow_leaver(rank: int, world: int, init_method: str, marker: str) -> None:
    """A rank started elsewhere (as `RankGroup.meet` expects) that, after `STOP`, takes a second
    before it leaves and writes `marker` just before it reports leaving."""
    member, _ = follow(rank, world, init_method, "gloo")
    serve_commands(object(), member.control)
    time.sleep(1.0)
    Path(marker).write_text("left")
    leave(rank, member)
