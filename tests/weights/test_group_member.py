"""A rollout worker's side of the learner's weight group: message checks and engine refusal.

The handlers' happy path runs against real receivers in tests/weights/test_learner_group.py
and against vLLM in tests/production/test_vllm_train.py.
"""

from __future__ import annotations

import msgspec
import pytest

from rstar2.weights.buckets import WeightManifest
from rstar2.weights.gloo_group import GroupPlace
from rstar2.weights.group_member import check_join, join_group, receive_broadcast
from rstar2.wire import WeightAck, WeightBroadcast, WeightGroupJoin, WeightGroupJoined
from tests.rollout.fakes import CharTokenizer, ScriptedEngine

pytestmark = pytest.mark.anyio

JOIN = WeightGroupJoin(
    host="127.0.0.1", port=4242, world_size=5, first_rank=3, workers=2, bucket_bytes=64,
    timeout_s=10.0,
)  # fmt: skip


class GroupFake:
    """Records what a `GroupEngine` is asked to do."""

    weight_workers = 2

    def __init__(self) -> None:
        self.joined: GroupPlace | None = None
        self.manifests: list[WeightManifest] = []

    async def join_weight_group(self, place: GroupPlace) -> None:
        self.joined = place

    async def receive_weights(self, manifest: WeightManifest) -> None:
        self.manifests.append(manifest)


def test_a_join_that_does_not_fit_this_engine_or_the_group_is_refused() -> None:
    check_join(JOIN, 2)
    with pytest.raises(ValueError, match="expects 2 worker\\(s\\) per engine, this engine has 1"):
        check_join(JOIN, 1)
    for change, match in [
        ({"first_rank": 0}, "ranks 0 .. 1 do not fit"),
        ({"first_rank": 4}, "ranks 4 .. 5 do not fit a weight group of 5"),
        ({"port": 0}, "port"),
        ({"host": ""}, "host is empty"),
        ({"bucket_bytes": 0}, "bucket_bytes"),
        ({"timeout_s": 0.0}, "timeout_s"),
    ]:
        with pytest.raises(ValueError, match=match):
            check_join(msgspec.structs.replace(JOIN, **change), 2)


async def test_the_handlers_answer_with_the_workers_index() -> None:
    engine = GroupFake()
    joined = await join_group(engine, JOIN, 1)
    assert isinstance(joined, WeightGroupJoined)
    assert (joined.engine, joined.first_rank, joined.workers) == (1, 3, 2)
    assert engine.joined == GroupPlace("127.0.0.1", 4242, 5, 3, 64, 10.0)
    msg = WeightBroadcast(version=7, names=["w"], dtype_names=["bfloat16"], shapes=[[2, 3]])
    ack = await receive_broadcast(engine, msg, 1)
    assert isinstance(ack, WeightAck) and (ack.version, ack.engine) == (7, 1)
    assert engine.manifests[0].shapes == ((2, 3),)


async def test_a_bad_manifest_or_an_engine_that_cannot_join_is_refused() -> None:
    bad = WeightBroadcast(
        version=1, names=["w", "w"], dtype_names=["float32"] * 2, shapes=[[1]] * 2
    )
    with pytest.raises(ValueError, match="names a tensor twice"):
        await receive_broadcast(GroupFake(), bad, 0)
    with pytest.raises(ValueError, match="unknown dtype"):
        await receive_broadcast(GroupFake(), WeightBroadcast(1, ["w"], ["complex64"], [[1]]), 0)
    with pytest.raises(TypeError, match='cannot join the learner\'s weight group.*"vllm"'):
        await join_group(ScriptedEngine(CharTokenizer(), {}), JOIN, 0)
