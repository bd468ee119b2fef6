"""Helpers of the distributed-learner tests: a seeded tiny Qwen2, a synthetic GRPO batch, and
the per-rank body that `torch.multiprocessing.spawn` runs (it must live in an importable module).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from transformers import Qwen2Config, Qwen2ForCausalLM

from rstar2.learner.distributed import DistributedConfig, shard_model, update_policy_sharded
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.micro_batch import pad_batch, token_logprobs
from rstar2.learner.policy_update import make_lr_schedule, update_policy
from rstar2.learner.rank_group import join_group, leave, wait_for_leavers
from rstar2.rl.resampling import TrainingBatch
from rstar2.rl.rl_config import RLConfig

VOCAB = 61


@dataclass
class Rollout:
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]


@dataclass
class Scenario:
    name: str
    optimizer: str  # "sgd" | "adamw"
    cfg: LearnerConfig
    rl: RLConfig = field(default_factory=RLConfig)


# SGD, no clipping: the update is the gradient itself, so a mis-scaled reduction shows.
# One rollout per micro-batch: rank 1 gets 1 of the 3 rollouts of the second mini-batch
# against rank 0's 2, so it runs the all-masked filler micro-batch.
SGD = LearnerConfig(lr=2.0, warmup_steps=0, grad_clip=1e6, micro_batch_size=1, mini_batches=2)

SCENARIOS = [
    Scenario("sgd", "sgd", SGD),
    # The same with FSDP2's gradient reduction forced after every micro-batch (the default
    # with several ranks) and deferred to a mini-batch's last one (the default with one rank):
    # each pairing of a world size and a choice is run by one of the tests.
    Scenario("sgd_sync_every", "sgd", replace(SGD, sync_every_micro_batch=True)),
    Scenario("sgd_deferred", "sgd", replace(SGD, sync_every_micro_batch=False)),
    # The RL learner's optimizer with clipping and warm-up, one mini-batch of odd size.
    Scenario(
        "adamw",
        "adamw",
        LearnerConfig(lr=1e-2, warmup_steps=3, grad_clip=0.5, micro_batch_size=3, mini_batches=1),
    ),
    # Truncated importance sampling over 2 mini-batches x 2 epochs: the pre-pass's proximal
    # logprobs must be on the rank that trains each rollout, and the cap (1.2 against the
    # batch's noise of 0.3 nats) truncates some weights.
    Scenario(
        "sgd_tis",
        "sgd",
        LearnerConfig(
            lr=2.0, warmup_steps=0, grad_clip=1e6, micro_batch_size=2, mini_batches=2, epochs=2
        ),
        RLConfig(tis_cap=1.2),
    ),
]


def tiny_model(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg)
    model.config._attn_implementation = "eager"
    return model


def synthetic_batch(model: Qwen2ForCausalLM, n: int = 7, seed: int = 1) -> TrainingBatch:
    """n rollouts of uneven length: prompt and a tool span masked out, behaviour logprobs off
    the current policy by noise (so ratios differ from 1 and some get clipped)."""
    g = torch.Generator().manual_seed(seed)
    rollouts = []
    for i in range(n):
        length = 8 + 3 * i % 13
        ids = torch.randint(1, VOCAB, (length,), generator=g).tolist()
        mask = [0] * 3 + [1] * (length - 3)
        mask[5:7] = [0, 0]
        rollouts.append(Rollout(ids, mask, [0.0] * length))
    ids, attn, _, _ = pad_batch(rollouts)
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids, attn, with_entropy=False)
    for i, r in enumerate(rollouts):
        noise = 0.3 * torch.randn(len(r.token_ids) - 1, generator=g)
        cur = (logp[i, : len(r.token_ids) - 1] + noise).tolist()
        r.logprobs = [0.0] + [lp if m else 0.0 for lp, m in zip(cur, r.loss_mask[1:], strict=True)]
    advantages = torch.randn(n, generator=g).tolist()
    return TrainingBatch(rollouts=rollouts, advantages=advantages, groups_kept=1)


def make_optimizer(model: torch.nn.Module, s: Scenario) -> torch.optim.Optimizer:
    if s.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=s.cfg.lr)
    return torch.optim.AdamW(model.parameters(), lr=s.cfg.lr, weight_decay=0.01)


def single_process_step(s: Scenario) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    model = tiny_model()
    batch = synthetic_batch(model)
    opt = make_optimizer(model, s)
    metrics = update_policy(model, opt, make_lr_schedule(opt, s.cfg), batch, s.cfg, s.rl)
    return metrics, {k: v.detach().clone() for k, v in model.state_dict().items()}


def sharded_step(
    s: Scenario, per_layer: bool = True
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Collective: every rank of the default group calls it. `per_layer`: FSDP2 units of one
    decoder layer each (the default with several ranks), or the whole model as one."""
    model = tiny_model()
    batch = synthetic_batch(model)
    shard_model(model, DistributedConfig(per_layer=per_layer))
    opt = make_optimizer(model, s)
    metrics = update_policy_sharded(model, opt, make_lr_schedule(opt, s.cfg), batch, s.cfg, s.rl)
    # the unsharded weights on rank 0 ({} on the others)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return metrics, get_model_state_dict(model, options=options)


def rank_main(rank: int, world: int, init_method: str, out_dir: str) -> None:
    """Body of one spawned rank: run every scenario, save metrics (and weights on rank 0).

    It leaves the group as the learner's ranks do (`rstar2.learner.rank_group`): a gloo rank
    whose peer closes its connections first may die of SIGABRT ("terminate called without an
    active exception"; seen twice on the loaded 2-core CI machine, once after a barrier was
    added), so rank 1 leaves, reports it and exits at once (`os._exit`, as `rstar2
    learner-rank` does), and rank 0 leaves last."""
    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    member = join_group(rank, world, init_method, "gloo")
    try:
        results = {s.name: sharded_step(s) for s in SCENARIOS}
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    if rank != 0:
        leave(rank, member)
        os._exit(0)
    wait_for_leavers(member.store, world, timeout_s=60.0)
    dist.destroy_process_group()
