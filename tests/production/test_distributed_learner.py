"""The sharded (FSDP2) policy update against the single-process `update_policy`.

The 2-rank test spawns two gloo ranks on this CPU; the rest run in this process (a world of
one rank, or no process group at all).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule

from production.distributed_ranks import (
    SCENARIOS,
    rank_main,
    sharded_step,
    single_process_step,
    synthetic_batch,
    tiny_model,
)
from rstar2.learner.distributed import (
    DistributedConfig,
    decoder_layers,
    rank_share,
    shard_model,
)
from rstar2.learner.learner_config import LearnerConfig
from rstar2.learner.micro_batch import even_chunks, pad_batch, token_logprobs
from rstar2.learner.policy import LearnerPolicy
from rstar2.learner.rank_group import free_port
from rstar2.rl.rl_config import RLConfig

TOL = 1e-5


def assert_same_step(got, want) -> None:
    got_metrics, got_state = got
    want_metrics, want_state = want
    assert set(got_metrics) == set(want_metrics)
    for k, v in want_metrics.items():
        assert got_metrics[k] == pytest.approx(v, abs=TOL, rel=TOL), k
    assert set(got_state) == set(want_state)
    for k, v in want_state.items():
        # relative too, as for the metrics: sgd_tis's lr 2.0 over four steps grows an embedding
        # weight to 4.04, and float32 sums of the two ranks round apart there by 2.1e-5 on an
        # AMD EPYC (5e-6 relative; the code before packed rows gave the same figure)
        torch.testing.assert_close(got_state[k], v, atol=TOL, rtol=TOL, msg=k)


def test_rank_shares_partition_the_mini_batch() -> None:
    chunk = list(range(10, 17))
    shares = [rank_share(chunk, r, 3) for r in range(3)]
    assert shares == [[10, 13, 16], [11, 14], [12, 15]]
    assert sorted(sum(shares, [])) == chunk
    with pytest.raises(ValueError):
        rank_share(chunk, 3, 3)


def test_even_chunks_keep_empty_parts_for_lockstep() -> None:
    assert even_chunks([1, 2, 3, 4, 5], 2) == [[1, 2, 3], [4, 5]]
    assert even_chunks([7], 3) == [[7], [], []]
    assert even_chunks([], 0) == [[]]


def test_a_model_without_decoder_layers_is_refused() -> None:
    with pytest.raises(TypeError, match="model.layers"):
        decoder_layers(torch.nn.Linear(2, 2))


def test_the_step_moves_the_weights_well_past_the_tolerance() -> None:
    # Otherwise the equality tests below could pass with a broken reduction.
    before = tiny_model().state_dict()
    for s in SCENARIOS:
        _, after = single_process_step(s)
        moved = max(float((after[k] - before[k]).abs().max()) for k in before)
        assert moved > 100 * TOL, s.name


def test_the_mismatch_is_the_batchs_noise_before_the_update() -> None:
    """The synthetic engine logprobs are the fresh model's plus noise: every scenario (one or
    two mini-batches, epochs, TIS) reports that noise, not a distance to updated weights."""
    model = tiny_model()
    batch = synthetic_batch(model)
    ids, attn, mask, engine = pad_batch(batch.rollouts)
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids, attn, with_entropy=False)
    noise = (logp - engine[:, 1:]).abs()[mask[:, 1:] > 0]
    for s in SCENARIOS:
        metrics, _ = single_process_step(s)
        assert metrics["logprob_mismatch_mean"] == pytest.approx(float(noise.mean()), abs=1e-6)
        assert metrics["logprob_mismatch_max"] == pytest.approx(float(noise.max()), abs=1e-6)
    tis, _ = single_process_step(next(s for s in SCENARIOS if s.rl.tis))
    assert 0 < tis["tis_truncated_fraction"] < 1


@pytest.fixture
def one_rank_group(tmp_path: Path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("per_layer", [True, False], ids=["layer-units", "one-unit"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_one_rank_fsdp_step_equals_single_process(one_rank_group, scenario, per_layer) -> None:
    assert_same_step(sharded_step(scenario, per_layer), single_process_step(scenario))


@pytest.mark.parametrize("per_layer", [True, False])
def test_fsdp_units_are_the_layers_and_the_root_or_the_root_alone(
    one_rank_group, per_layer
) -> None:
    model = tiny_model()
    shard_model(model, DistributedConfig(per_layer=per_layer))
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    layers = decoder_layers(model)
    assert units[0] is model
    assert len(units) == (len(layers) + 1 if per_layer else 1)
    assert all(isinstance(layer, FSDPModule) == per_layer for layer in layers)


@pytest.mark.slow
def test_two_gloo_ranks_equal_the_single_process_step(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    assert ctx is not None
    init = f"tcp://127.0.0.1:{free_port()}"
    mp.spawn(rank_main, args=(2, init, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for s in SCENARIOS:
        want = single_process_step(s)
        assert_same_step(ranks[0][s.name], want)
        assert ranks[1][s.name][0] == ranks[0][s.name][0]  # same metrics on every rank
        assert ranks[1][s.name][1] == {}  # full weights are gathered on rank 0 only


def test_one_rank_fsdp_with_checkpointing_and_deferred_reduction_equals_the_plain_policy(
    tmp_path: Path,
) -> None:
    """`LearnerPolicy` as `rstar2 train` builds it on one rank with FSDP2 and activation
    checkpointing: gradients reduced once per mini-batch of several micro-batches, with the
    layers recomputed in backward, give the unsharded policy's update."""
    cfg = LearnerConfig(lr=1e-2, warmup_steps=0, grad_clip=0.5, micro_batch_size=1, mini_batches=2)
    batch = synthetic_batch(tiny_model())
    plain = LearnerPolicy(tiny_model(), cfg, RLConfig())
    want = plain.update(batch)
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        sharded = LearnerPolicy(
            tiny_model(), replace(cfg, activation_checkpointing=True), RLConfig()
        )
        assert sharded.sharded and sharded.sync_every_micro_batch is False
        assert sharded.shard_per_layer is False  # one rank: the whole model one FSDP2 unit
        assert [m for m in sharded.model.modules() if isinstance(m, FSDPModule)] == [sharded.model]
        got = sharded.update(batch)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(sharded.model, options=options)
    finally:
        dist.destroy_process_group()
    assert_same_step((got, state), (want, plain.model.state_dict()))
