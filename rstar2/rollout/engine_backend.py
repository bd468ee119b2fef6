"""A rollout worker's inference engine: which backend, sized how, opened and put to sleep.

- `open_worker_engine`: the embedded engine (`rstar2.engine`, the default), with
  `engine_backend="vllm"` a vLLM engine (`rstar2.engine.vllm_backend`, imported only then:
  vLLM is an optional install), or with `"instant"` no model at all, every turn scripted and
  back at once (`rstar2.rollout.instant_engine`: what the rest of the system costs), with the
  token codec and the engine's context limit;
- `vllm_fields`: a vLLM engine sized like the embedded one (same context length, batch and
  block size, a KV pool of `kv_budget_tokens`, `kv_bytes_per_token` from the model's config)
  unless the `vllm` options say otherwise;
- `sleep_or_wake`: colocation (`cluster.colocate`): `EngineSleep` frees the engine's GPU
  memory before the learner's update, `EngineWake` takes it back before the new weights
  arrive (`SleepableEngine`; the embedded engine cannot sleep: a TypeError naming the
  setting).

What it does not do: generate (the agent loops) or load weights (the worker's weight gate).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rstar2.config import from_dict
from rstar2.engine.async_engine import open_engine
from rstar2.engine.config import EngineConfig, resolve_device
from rstar2.engine.protocol import Engine, SleepableEngine
from rstar2.model.loader import load_model, load_tokenizer
from rstar2.rollout.instant_engine import InstantEngine, scripted_turns
from rstar2.rollout.token_codec import TokenCodec
from rstar2.weights import shared_policy
from rstar2.wire import EngineSleep, EngineSleepAck, EngineWake

ENGINE_BACKENDS = ("embedded", "vllm", "instant")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def model_config(model_dir: str) -> dict[str, Any]:
    """The Hugging Face `config.json` of `model_dir`, as a dict."""
    config: dict[str, Any] = json.loads((Path(model_dir) / "config.json").read_text())
    return config


def kv_bytes_per_token(model_config: dict[str, Any], dtype: str) -> int:
    """K and V of one token over all layers, from a HF `config.json` (dtype "auto": its own)."""
    if dtype == "auto":
        dtype = str(model_config.get("torch_dtype") or model_config.get("dtype") or "float32")
    if dtype not in _DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_BYTES)} or 'auto', got {dtype!r}")
    heads = model_config["num_attention_heads"]
    head_dim = model_config.get("head_dim") or model_config["hidden_size"] // heads
    kv_heads = model_config.get("num_key_value_heads") or heads
    return 2 * model_config["num_hidden_layers"] * kv_heads * head_dim * _DTYPE_BYTES[dtype]


def vllm_fields(
    model_dir: str, engine: EngineConfig, model_config: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """`VLLMConfig` fields of a worker's vLLM engine: the embedded engine's limits (context
    length, batch, block size, a KV pool of `kv_budget_tokens` in float32 unless `options` name
    a dtype), then `options` on top (e.g. `kv_cache_memory_bytes = 0` to size the pool by
    `gpu_memory_utilization` instead)."""
    dtype = str(options.get("dtype", "float32"))
    fields: dict[str, Any] = {
        "model": model_dir,
        "dtype": dtype,
        "max_model_len": engine.max_model_len,
        "max_num_seqs": engine.max_num_seqs,
        "block_size": engine.block_size,
        "kv_cache_memory_bytes": engine.num_blocks
        * engine.block_size
        * kv_bytes_per_token(model_config, dtype),
    }
    return {**fields, **options}


@asynccontextmanager
async def open_worker_engine(
    backend: str,
    model_dir: str,
    engine_cfg: EngineConfig,
    vllm_options: dict[str, Any],
    index: int,
    shared: str = "",
) -> AsyncIterator[tuple[Engine, TokenCodec, int]]:
    """The `backend`'s engine for rollout worker `index`, the token codec and the engine's
    context limit. `shared`: the embedded engine computes with the module the learner of this
    process shares under that key (`rstar2.weights.shared_policy`) instead of loading
    `model_dir`'s weights."""
    if backend == "embedded":
        device = resolve_device(engine_cfg.device, index)
        if shared:
            model = await shared_policy.wait_for(shared)
            shared_policy.check_shared(model, device)
            tokenizer = load_tokenizer(model_dir)
        else:
            model, tokenizer = load_model(model_dir)
        async with open_engine(model, engine_cfg, device=device) as embedded:
            yield embedded, TokenCodec(tokenizer), embedded.core.max_model_len
        return
    if backend == "instant":
        engine, codec = instant_engine(model_dir, engine_cfg)
        yield engine, codec, engine.max_model_len
        return
    # vLLM is optional (its own virtual environment): imported only when chosen.
    from rstar2.engine.vllm_backend import open_vllm_engine
    from rstar2.engine.vllm_config import VLLMConfig

    fields = vllm_fields(model_dir, engine_cfg, model_config(model_dir), vllm_options)
    codec = TokenCodec(load_tokenizer(model_dir))
    async with open_vllm_engine(from_dict(VLLMConfig, fields, "vllm")) as engine:
        yield engine, codec, engine.max_model_len


def instant_engine(model_dir: str, engine_cfg: EngineConfig) -> tuple[InstantEngine, TokenCodec]:
    """An instant engine scripted by `engine_cfg` in `model_dir`'s tokens (no weights loaded),
    with its token codec; its context limit is `engine.max_model_len`, else the model's."""
    codec = TokenCodec(load_tokenizer(model_dir))
    call_turn, answer_turn = scripted_turns(codec.encode_markup, engine_cfg.instant_turn_tokens)
    max_model_len = engine_cfg.max_model_len or int(
        model_config(model_dir)["max_position_embeddings"]
    )
    engine = InstantEngine(
        call_turn,
        answer_turn,
        engine_cfg.instant_tool_calls,
        kv_capacity_tokens=engine_cfg.num_blocks * engine_cfg.block_size,
        max_model_len=max_model_len,
    )
    return engine, codec


async def sleep_or_wake(
    engine: Engine, msg: EngineSleep | EngineWake, index: int, backend: str
) -> EngineSleepAck:
    """Free the engine's GPU memory for the learner's update, or take it back."""
    if not isinstance(engine, SleepableEngine):
        raise TypeError(
            f"the {backend} engine cannot sleep: cluster.colocate needs "
            'cluster.engine_backend = "vllm"'
        )
    start = time.perf_counter()
    if isinstance(msg, EngineSleep):
        await engine.sleep(msg.level)
    else:
        await engine.wake_up()
    seconds = time.perf_counter() - start
    return EngineSleepAck(engine=index, sleeping=engine.sleeping, seconds=seconds)
