"""The sharded learner as `rstar2 train` drives it: rank 0 in this process, rank 1 spawned,
commands through `RankGroup.run` - against the one-rank `LearnerPolicy`."""

from __future__ import annotations

import copy
import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor

from rstar2.learner.policy import resolve_device
from rstar2.learner.rank_group import (
    LearnerRankDied,
    RankGroup,
    free_port,
    join_group,
    wait_for_joiners,
)
from rstar2.weights.buckets import manifest_of
from tests.learner.rank_entries import dies_before_joining, follower, policy, slow_leaver
from tests.production.distributed_ranks import synthetic_batch, tiny_model

TOL = 1e-5


def _one_rank_reference(tmp_path: Path) -> tuple[dict, dict, dict, dict, dict]:
    """One rank: update, checkpoint, update again (Adam's second step depends on the moments
    the first one left, so comparing it checks the optimizer state was restored)."""
    p = policy()
    batch = synthetic_batch(tiny_model())
    metrics = p.update(batch)
    after_one = p.full_weights()
    adam_after_one = copy.deepcopy(p.optimizer.state_dict()["state"])
    p.save(tmp_path / "one-rank")
    schedule = p.schedule.state_dict()
    p.update(batch)
    return metrics, after_one, p.full_weights(), schedule, adam_after_one


def _assert_same_adam_state(got: dict, want: dict, label: str) -> None:
    """Adam's per-parameter state (step, exp_avg, exp_avg_sq), compared directly."""
    assert got.keys() == want.keys()
    for i, state in want.items():
        assert got[i].keys() == state.keys()
        for k, v in state.items():
            torch.testing.assert_close(got[i][k], v, atol=TOL, rtol=0, msg=f"{label} {i} {k}")


@pytest.mark.slow
def test_two_ranks_update_and_checkpoint_like_one(tmp_path: Path) -> None:
    ref_metrics, ref_after_one, ref_after_two, schedule, ref_adam = _one_rank_reference(tmp_path)
    batch = synthetic_batch(tiny_model())
    group = RankGroup.spawn(2, follower, (), "gloo")
    try:
        p = policy()
        metrics = group.run(p, "update", batch)
        for k, v in ref_metrics.items():
            assert metrics[k] == pytest.approx(v, abs=TOL, rel=TOL), k
        got = group.run(p, "full_weights")
        assert got.keys() == ref_after_one.keys()
        for k, v in ref_after_one.items():
            torch.testing.assert_close(got[k], v, atol=TOL, rtol=0, msg=k)
        # 2 -> 1: a two-rank checkpoint, loaded by one rank, continues like the reference.
        group.run(p, "save", tmp_path / "two-rank")
        # 1 -> 2: the one-rank checkpoint loaded by both ranks, one more step.
        p2 = policy(seed=5)  # other weights and no optimizer state: the load must replace them
        group.run(p2, "load", tmp_path / "one-rank", schedule)
        group.run(p2, "update", batch)
        got = group.run(p2, "full_weights")
        for k, v in ref_after_two.items():
            torch.testing.assert_close(got[k], v, atol=TOL, rtol=0, msg=f"1->2 {k}")
    except BaseException:
        group.close(abort=True)  # rank 1 may be inside a collective, where STOP is never read
        raise
    finally:
        group.close()
    single = policy(seed=5)  # other weights: the load must replace them
    single.load(tmp_path / "two-rank", schedule)
    for k, v in ref_after_one.items():
        torch.testing.assert_close(single.full_weights()[k], v, atol=TOL, rtol=0, msg=f"2->1 {k}")
    _assert_same_adam_state(single.optimizer.state_dict()["state"], ref_adam, "2->1")
    single.update(batch)
    for k, v in ref_after_two.items():
        torch.testing.assert_close(single.full_weights()[k], v, atol=TOL, rtol=0, msg=f"2->1 {k}")


def test_a_sharded_policy_gathers_one_bucket_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The push's memory bound: a bucket's tensors are gathered only when that bucket is asked
    for (gathering everything first would hold the whole model on rank 0)."""
    join_group(0, 1, f"tcp://127.0.0.1:{free_port()}", "gloo")  # FSDP2 on one rank
    try:
        p = policy()
        assert p.sharded
        gathered: list[int] = []
        full_tensor = DTensor.full_tensor
        monkeypatch.setattr(
            DTensor, "full_tensor", lambda t: gathered.append(t.numel()) or full_tensor(t)
        )
        sizes = [v.numel() * 4 for v in p.model.state_dict().values()]
        buckets = p.weights(max(sizes))
        first = next(buckets)
        assert len(gathered) == len(first) < len(sizes)
        rest = list(buckets)
        assert len(gathered) == len(sizes) == len(first) + sum(len(b) for b in rest)
        # the broadcast's manifest comes from the sharded state dict, before any gathering
        whole = {k: v for b in [first, *rest] for k, v in b.items()}
        assert manifest_of(p.model.state_dict()) == manifest_of(whole)
    finally:
        dist.destroy_process_group()


def test_rank_zero_leaves_after_a_rank_started_elsewhere(tmp_path: Path) -> None:
    # A gloo rank whose peer closes first may abort (CI saw a torchrun-started rank end by
    # SIGABRT after STOP): rank 0, which hosts the store, leaves only once the others report.
    init = f"tcp://127.0.0.1:{free_port()}"
    marker = tmp_path / "left"
    rank1 = mp.get_context("spawn").Process(target=slow_leaver, args=(1, 2, init, str(marker)))
    rank1.start()
    try:
        group = RankGroup.meet(2, init, "gloo", (), timeout_s=120)
        group.close()
        assert marker.is_file()  # rank 1 had left when rank 0's close returned
    finally:
        rank1.join(timeout=30)
        if rank1.is_alive():
            rank1.kill()
    assert rank1.exitcode == 0


@pytest.mark.slow
def test_a_dead_rank_is_named_not_waited_for() -> None:
    group = RankGroup.spawn(2, follower, (), "gloo")
    try:
        p = policy()
        os.kill(group.processes[0].pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(LearnerRankDied, match="learner rank 1 was killed by signal 9"):
            group.run(p, "update", synthetic_batch(tiny_model()))
        assert time.monotonic() - start < 30
        start = time.monotonic()
        group.close()  # no wait for the dead rank to report leaving (a 30 s timeout)
        assert time.monotonic() - start < 20
    except BaseException:
        group.close(abort=True)
        raise
    finally:
        group.close()


@pytest.mark.slow
def test_a_rank_that_dies_before_joining_is_named_at_once() -> None:
    """Rank 0 used to wait out the group's 30-minute timeout for it, in a call no signal ends."""
    start = time.monotonic()
    with pytest.raises(LearnerRankDied, match="learner rank 1 exited with code 3 before it joined"):
        RankGroup.spawn(2, dies_before_joining, (), "gloo")
    assert time.monotonic() - start < 120
    assert not dist.is_initialized()


class _Store:
    def __init__(self, keys: set[str]) -> None:
        self.keys = keys

    def check(self, keys: list[str]) -> bool:
        return all(k in self.keys for k in keys)


class _Process:
    def __init__(self, alive: bool, exitcode: int | None = None) -> None:
        self.alive, self.exitcode = alive, exitcode

    def is_alive(self) -> bool:
        return self.alive


def test_joiners_are_waited_for_until_they_check_in_die_or_time_out() -> None:
    store = _Store({"rstar2/joined/1", "rstar2/joined/2"})
    wait_for_joiners(store, 3, [_Process(True), _Process(True)], timeout_s=1)  # type: ignore[arg-type]
    # rank 2 checked in and then ended: not a death before joining (the group's collectives see it)
    store = _Store({"rstar2/joined/2"})
    with pytest.raises(LearnerRankDied, match=r"^learner rank 1 was killed by signal 9 before"):
        wait_for_joiners(store, 3, [_Process(False, -9), _Process(False, 0)], 1)  # type: ignore[arg-type]
    with pytest.raises(TimeoutError, match=r"learner rank\(s\) 1 did not join within 0 s"):
        wait_for_joiners(_Store(set()), 2, [_Process(True)], timeout_s=0.2, poll_s=0.01)  # type: ignore[arg-type]
    # ranks started elsewhere (`meet`): no process to watch, each rank waited for by its key
    with pytest.raises(TimeoutError, match=r"learner rank\(s\) 2, 3 did not join"):
        wait_for_joiners(_Store({"rstar2/joined/1"}), 4, [], timeout_s=0.2, poll_s=0.01)  # type: ignore[arg-type]


def test_device_setting_resolves_or_says_why_not() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == torch.device("cpu")
        with pytest.raises(ValueError, match=r"config key 'learner\.device': got 'cuda'"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="learner.device"):
        resolve_device("tpu")


def test_weights_come_in_buckets_of_the_asked_size() -> None:
    p = policy()
    sizes = {k: v.numel() * v.element_size() for k, v in p.model.state_dict().items()}
    bucket = max(sizes.values())
    buckets = list(p.weights(bucket))
    assert len(buckets) > 1
    for b in buckets:  # a bucket closes as soon as it reaches the size
        total = sum(sizes[k] for k in b)
        assert total - sizes[list(b)[-1]] < bucket
    merged = {k: v for b in buckets for k, v in b.items()}
    assert list(merged) == list(sizes)
    for k, v in p.model.state_dict().items():
        assert torch.equal(merged[k], v)
