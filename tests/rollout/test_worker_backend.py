"""The rollout worker's engine choice: vLLM settings derived from the embedded engine's."""

from __future__ import annotations

import pytest

from rstar2.actors.plan import actor_params
from rstar2.config import ConfigError
from rstar2.engine.config import EngineConfig
from rstar2.rollout.engine_backend import kv_bytes_per_token, vllm_fields
from rstar2.rollout.worker import RolloutWorker
from rstar2.train.cluster_config import ClusterConfig
from rstar2.train.runner import vllm_options

TINY = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}


def test_kv_bytes_per_token_counts_k_and_v_of_every_layer() -> None:
    config = {**TINY, "hidden_size": 64, "torch_dtype": "bfloat16"}
    assert kv_bytes_per_token(config, "float32") == 2 * 2 * 2 * 16 * 4
    assert kv_bytes_per_token(config, "auto") == 2 * 2 * 2 * 16 * 2  # the checkpoint's dtype
    assert kv_bytes_per_token({**config, "head_dim": 8}, "float16") == 2 * 2 * 2 * 8 * 2
    with pytest.raises(ValueError, match="int8"):
        kv_bytes_per_token(config, "int8")


def test_vllm_engine_gets_the_embedded_engines_limits_and_kv_pool() -> None:
    engine = EngineConfig(kv_budget_tokens=4100, block_size=32, max_num_seqs=16, max_model_len=512)
    fields = vllm_fields("/m", engine, {**TINY, "hidden_size": 64}, {"enforce_eager": True})
    assert fields == {
        "model": "/m",
        "dtype": "float32",
        "max_model_len": 512,
        "max_num_seqs": 16,
        "block_size": 32,
        "kv_cache_memory_bytes": 4096
        * 512,  # 128 whole blocks; 2 layers x 2 heads x 16 x K,V x 4 B
        "enforce_eager": True,
    }


def test_on_gpus_the_pool_comes_from_the_memory_share() -> None:
    cpu = vllm_options(ClusterConfig())
    assert cpu == {"dtype": "float32", "enforce_eager": True}
    gpu = vllm_options(ClusterConfig(gpus=16, tp=2, gpu_memory_utilization=0.8))
    fields = vllm_fields("/m", EngineConfig(), {**TINY, "hidden_size": 64}, gpu)
    assert (fields["kv_cache_memory_bytes"], fields["gpu_memory_utilization"]) == (0, 0.8)
    assert (fields["tensor_parallel_size"], fields["dtype"]) == (2, "auto")


def test_an_unknown_backend_is_refused_when_the_graph_is_planned() -> None:
    params = {"model_dir": "/m", "engine_backend": "sglang"}
    with pytest.raises(ConfigError, match=r"'graph.actors\[2\].params.engine_backend'"):
        actor_params(RolloutWorker, params, "graph.actors[2].params")
    with pytest.raises(ConfigError, match=r"'graph.actors\[2\].params.engine.block_size'"):
        actor_params(
            RolloutWorker,
            {"model_dir": "/m", "engine": {"block_size": "x"}},
            "graph.actors[2].params",
        )
