"""The gloo weight group with real processes: one sender here, receivers spawned."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest
import torch
from weight_ranks import receive_updates

from rstar2.weights.buckets import manifest_of
from rstar2.weights.gloo_group import WeightReceiver, WeightSender


def updates() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    first = {
        "embed.weight": torch.randn(40, 8, generator=g),
        "norm.weight": torch.randn(8, generator=g).to(torch.bfloat16),
        "layer.0.w": torch.randn(8, 8, generator=g),
    }
    second = {k: v * 2 for k, v in first.items()} | {"extra.bias": torch.ones(3)}
    return [first, second]


@pytest.mark.slow
def test_two_receivers_get_two_updates_through_one_group(tmp_path: Path) -> None:
    """The group is reused: two updates (different manifests), many buckets each, both ranks."""
    ups = updates()
    manifests = [manifest_of(u) for u in ups]
    bucket_bytes = 300  # several buckets per update, and embed.weight (1,280 B) on its own
    sender = WeightSender.listen("127.0.0.1", 3, timeout_s=60, bucket_bytes=bucket_bytes)
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(
            target=receive_updates,
            args=(
                sender.port,
                rank,
                3,
                bucket_bytes,
                [m.to_payload() for m in manifests],
                str(tmp_path / f"rank{rank}.pt"),
            ),
        )
        for rank in (1, 2)
    ]
    for p in procs:
        p.start()
    try:
        sender.join()
        assert sender.missing_ranks() == []
        sent = [sender.send(manifests[0], list(ups[0].values()))]
        # the second from an iterator, consumed as the buckets need it: the first bucket goes
        # out before the last tensor is even asked for (a sharded learner gathers lazily)
        pulled: list[str] = []
        pulled_at_broadcast: list[int] = []
        broadcast = sender._broadcast

        def counted(buf: torch.Tensor) -> None:
            pulled_at_broadcast.append(len(pulled))
            broadcast(buf)

        sender._broadcast = counted  # type: ignore[method-assign]
        lazy = (pulled.append(k) or t for k, t in ups[1].items())
        sent.append(sender.send(manifests[1], lazy))
        assert pulled == list(ups[1])
        assert len(pulled_at_broadcast) > 1 and pulled_at_broadcast[0] < len(pulled)
        assert pulled_at_broadcast == sorted(pulled_at_broadcast)
    finally:
        sender.close()
        for p in procs:
            p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sent[0] >= sum(t.numel() * t.element_size() for t in ups[0].values())
    for rank in (1, 2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        for want, have in zip(ups, got, strict=True):
            assert list(have) == list(want)
            for name, t in want.items():
                assert have[name].dtype == t.dtype and torch.equal(have[name], t)


def test_a_receiver_that_never_comes_is_a_timeout_not_a_hang() -> None:
    sender = WeightSender.listen("127.0.0.1", 2, timeout_s=1)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timeout"):
        sender.join()
    assert time.monotonic() - start < 30
    assert sender.missing_ranks() == [1]  # the learner's error names who never came
    sender.close()
    sender.close()  # idempotent
    assert sender.closed
    with pytest.raises(RuntimeError, match="closed"):
        sender.join()


def test_bad_ranks_and_mismatched_tensors_are_refused() -> None:
    with pytest.raises(ValueError, match="world_size 1"):
        WeightSender.listen("127.0.0.1", 1)
    with pytest.raises(ValueError, match="rank 0 is the sender"):
        WeightReceiver.connect("127.0.0.1", 1, 0, 2)
    with pytest.raises(ValueError, match="outside"):
        WeightReceiver.connect("127.0.0.1", 1, 2, 2)
    sender = WeightSender.listen("127.0.0.1", 2, timeout_s=1)
    try:
        m = manifest_of({"w": torch.zeros(2, 2)})
        with pytest.raises(ValueError, match="manifest says float32 \\[2, 2\\]"):
            sender.send(m, [torch.zeros(4)])
        with pytest.raises(ValueError, match="0 tensors for a manifest of 1"):
            sender.send(m, [])
        with pytest.raises(RuntimeError, match="join"):
            sender.send(m, [torch.zeros(2, 2)])
    finally:
        sender.close()
