"""The learner-rooted weight group: rank layout, control messages, and the learner's code path
(`LearnerWeightGroup`) against fake rollout workers that use the real `WeightReceiver` and the
real worker-side handlers (`rstar2.weights.group_member`), spawned or in this process."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import anyio
import pytest
import torch
from group_workers import LocalRequest, PipeRequest, ReceiverEngine, serve_pipe

from rstar2.weights.learner_group import (
    GroupLayout,
    LearnerWeightGroup,
    WeightGroupError,
    check_ack,
    check_joined,
    join_failure,
    join_messages,
    layout_for,
)
from rstar2.wire import EngineLoad, EngineReport, WeightAck, WeightGroupJoined

BUCKET_BYTES = 16 * 1024  # several buckets per update


def test_ranks_depend_only_on_the_worker_index() -> None:
    layout = GroupLayout(engines=3, workers_per_engine=2)
    assert layout.world_size == 7
    assert [layout.first_rank(i) for i in range(3)] == [1, 3, 5]
    assert [layout.engine_of(r) for r in range(1, 7)] == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="rank 0 is no engine worker"):
        layout.engine_of(0)
    with pytest.raises(ValueError, match="engine 3 is outside"):
        layout.first_rank(3)
    with pytest.raises(ValueError, match="0 engines"):
        GroupLayout(0, 1)


def test_only_vllm_engines_with_broadcast_get_a_group() -> None:
    assert layout_for("embedded", "broadcast", 4, 0, 1) is None
    assert layout_for("vllm", "file", 4, 0, 1) is None
    assert layout_for("vllm", "broadcast", 4, 0, 2) == GroupLayout(4, 1)  # CPU: one worker
    assert layout_for("vllm", "broadcast", 4, 8, 2) == GroupLayout(4, 2)  # GPU: tp workers


def test_join_messages_and_answers_are_checked() -> None:
    layout = GroupLayout(2, 2)
    msgs = join_messages(layout, "10.0.0.1", 4242, 1024, 30.0)
    assert [(m.first_rank, m.workers, m.world_size, m.port) for m in msgs] == [
        (1, 2, 5, 4242),
        (3, 2, 5, 4242),
    ]
    check_joined(WeightGroupJoined(engine=1, first_rank=3, workers=2), 1, layout)
    with pytest.raises(WeightGroupError, match="rollout worker 1 answered"):
        check_joined(WeightGroupJoined(engine=1, first_rank=1, workers=2), 1, layout)
    with pytest.raises(WeightGroupError, match="rollout worker 0 answered"):
        check_joined(EngineReport(0, EngineLoad(0, 0, 0, 0)), 0, layout)
    check_ack(WeightAck(version=3, engine=1), 1, 3)
    with pytest.raises(WeightGroupError, match="not version 4"):
        check_ack(WeightAck(version=3, engine=1), 1, 4)


def test_a_join_failure_names_the_workers_whose_ranks_never_came() -> None:
    text = join_failure(
        GroupLayout(3, 2), [3, 4, 6], {"learner": RuntimeError("gloo timeout\nmore")}, 5.0
    )
    assert text.startswith("weight group failed: rollout worker 1, rollout worker 2 never joined")
    assert "within 5s (missing ranks [3, 4, 6] of 7)" in text
    assert text.endswith("learner: RuntimeError: gloo timeout")


def updates() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    first = {
        "embed.weight": torch.randn(256, 64, generator=g),
        "norm.weight": torch.randn(64, generator=g).to(torch.bfloat16),
        "layer.0.w": torch.randn(64, 64, generator=g),
    }
    return [first, {k: v * -3 for k, v in first.items()}]


@pytest.mark.slow
def test_each_update_is_broadcast_once_to_two_spawned_workers(tmp_path: Path) -> None:
    """Two workers join at ranks 1 and 2 (by index); two updates, several buckets each, go out
    once; the bus carries only the manifests; both workers hold exactly the learner's tensors."""
    ctx = mp.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(2)]
    procs = [
        ctx.Process(target=serve_pipe, args=(child, i, str(tmp_path / f"w{i}.pt")))
        for i, (_, child) in enumerate(pipes)
    ]
    for p in procs:
        p.start()
    request = PipeRequest([parent for parent, _ in pipes])
    stats = []

    async def run() -> None:
        group = LearnerWeightGroup.open(
            "127.0.0.1", GroupLayout(2, 1), request, timeout_s=60, bucket_bytes=BUCKET_BYTES
        )
        try:
            await group.join()
            for version, update in enumerate(updates()):
                stats.append(await group.push(update, version))
        finally:
            group.close()

    try:
        anyio.run(run)
    finally:
        for parent, _ in pipes:
            parent.send_bytes(b"")
        for p in procs:
            p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    for s, update in zip(stats, updates(), strict=True):
        nbytes = sum(t.numel() * t.element_size() for t in update.values())
        assert nbytes <= s.broadcast_bytes < nbytes + 64  # once, whatever the worker count
        assert 0 < s.bus_bytes < s.broadcast_bytes / 100
    for i in range(2):
        got = torch.load(tmp_path / f"w{i}.pt")
        for want, have in zip(updates(), got, strict=True):
            assert list(have) == list(want)
            for name, t in want.items():
                assert have[name].dtype == t.dtype and torch.equal(have[name], t)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_worker_that_never_joins_is_named_and_nothing_hangs(backend: str) -> None:
    engines = [ReceiverEngine(), ReceiverEngine(hang_on_join=True)]
    group = LearnerWeightGroup.open("127.0.0.1", GroupLayout(2, 1), LocalRequest(engines), 2.0)

    async def run() -> None:
        with pytest.raises(WeightGroupError) as e:
            await group.join()
        assert "rollout worker 1 never joined" in str(e.value)
        assert "missing ranks [2] of 3" in str(e.value)
        with pytest.raises(WeightGroupError, match="join"):
            await group.push({"w": torch.zeros(2)}, 0)

    start = time.monotonic()
    try:
        anyio.run(run, backend=backend)
    finally:
        group.close()
        for engine in engines:
            engine.close()
    assert time.monotonic() - start < 30


def test_a_state_dict_that_cannot_be_broadcast_is_refused_before_anything_moves() -> None:
    """Nothing was sent, so the group stays usable (not marked broken)."""
    group = LearnerWeightGroup.open("127.0.0.1", GroupLayout(1, 1), LocalRequest([]), 1.0)
    group._joined = True  # as after a join; the check comes before any message or collective

    async def run() -> None:
        with pytest.raises(ValueError, match="cannot be broadcast"):
            await group.push({"x": torch.zeros(2, dtype=torch.complex64)}, 1)
        with pytest.raises(ValueError, match="non-empty"):
            await group.push({}, 1)

    try:
        anyio.run(run)
        assert group._broken is None
    finally:
        group.close()
