"""engine.device: how a setting resolves, that the CPU engine keeps everything on the CPU, and
that its seeded draws are still the CPU generator's (outputs unchanged by the device plumbing).

CUDA placement itself cannot run here (no GPU on the CI machine): `resolve_device` is tested
as a plain function with the GPU count given.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2ForCausalLM

from rstar2.config import ConfigError, from_dict
from rstar2.engine.config import EngineConfig, resolve_device
from rstar2.engine.core import EngineCore
from rstar2.engine.protocol import SamplingParams
from tests.engine.factories import VOCAB, random_prompts

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")


@pytest.mark.parametrize(
    ("setting", "index", "gpus", "expected"),
    [
        ("auto", 0, 0, "cpu"),
        ("auto", 3, 0, "cpu"),
        ("cpu", 1, 4, "cpu"),
        ("auto", 0, 1, "cuda:0"),
        ("auto", 5, 4, "cuda:1"),
        ("cuda", 2, 8, "cuda:2"),
        ("cuda", 9, 8, "cuda:1"),
    ],
)
def test_resolve_device(setting: str, index: int, gpus: int, expected: str) -> None:
    assert resolve_device(setting, index, cuda_devices=gpus) == torch.device(expected)


def test_cuda_without_a_gpu_is_a_one_line_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"config key 'engine\.device': got 'cuda'") as e:
        resolve_device("cuda", cuda_devices=0)
    assert "\n" not in str(e.value) and e.value.key == "engine.device"
    with pytest.raises(ConfigError, match="engine.device"):
        resolve_device("gpu", cuda_devices=1)


def test_bad_device_is_rejected_on_load_naming_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        from_dict(EngineConfig, {"device": "gpu"}, "engine")
    assert e.value.key == "engine.device" and e.value.value == "gpu"
    assert from_dict(EngineConfig, {"device": "cuda"}, "engine").device == "cuda"  # resolved later


@NO_GPU
def test_cuda_engine_fails_at_start_without_a_gpu(qwen2: Qwen2ForCausalLM) -> None:
    with pytest.raises(ValueError, match="torch sees no GPU"):
        EngineCore(qwen2, EngineConfig(device="cuda"))


@NO_GPU
def test_default_engine_keeps_everything_on_the_cpu(qwen2: Qwen2ForCausalLM) -> None:
    core = EngineCore(qwen2)
    cpu = torch.device("cpu")
    assert core.device == cpu
    assert {p.device for p in qwen2.parameters()} == {cpu}
    assert {t.device for t in core.cache.k + core.cache.v} == {cpu}
    assert core.transformer.cos.device == core.transformer.sin.device == cpu
    core.add_request("r", [1, 2, 3], SamplingParams(4, temperature=1.0, seed=0))
    assert core._requests["r"].generator.device == cpu  # type: ignore[union-attr]
    out = core.generate([[4, 5]], SamplingParams(3, temperature=0.0))[0]
    assert all(type(t) is int for t in out.token_ids)
    assert all(type(x) is float for x in out.logprobs)


def test_seeded_draws_are_the_cpu_generators_gumbel_max(qwen2: Qwen2ForCausalLM) -> None:
    """Re-derive a seeded request from the HF model and a plain `torch.Generator()`: each step
    draws one uniform per vocabulary entry and takes argmax(log softmax(logits / T) + Gumbel)."""
    prompt, seed, temperature = random_prompts(1, seed=11)[0], 7, 0.8
    out = EngineCore(qwen2, EngineConfig(device="cpu")).generate(
        [prompt], SamplingParams(8, temperature=temperature, seed=seed)
    )[0]
    g = torch.Generator().manual_seed(seed)
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            logits = qwen2(torch.tensor([ids])).logits[0, -1]
            scaled = torch.log_softmax(logits / temperature, dim=-1)
            u = torch.empty(VOCAB, dtype=logits.dtype).uniform_(generator=g)
            ids.append(int((scaled - torch.log(-torch.log(u))).argmax()))
    assert out.token_ids == ids[len(prompt) :]
