"""`cluster.weight_sync`: validated on load, passed to the vLLM engines only when not the default."""

from __future__ import annotations

import pytest

from rstar2.config import ConfigError, from_dict
from rstar2.train.config import ClusterConfig
from rstar2.train.runner import vllm_options


def test_broadcast_reaches_the_engines_options_on_cpu_and_gpu() -> None:
    assert "weight_sync" not in vllm_options(ClusterConfig())
    cpu = vllm_options(ClusterConfig(weight_sync="broadcast"))
    assert cpu == {"dtype": "float32", "enforce_eager": True, "weight_sync": "broadcast"}
    gpu = vllm_options(ClusterConfig(gpus=8, weight_sync="broadcast"))
    assert gpu["weight_sync"] == "broadcast" and gpu["dtype"] == "auto"


def test_an_unknown_weight_sync_names_the_key() -> None:
    with pytest.raises(ConfigError, match="cluster.weight_sync"):
        from_dict(ClusterConfig, {"weight_sync": "nfs"}, "cluster")
