"""`cluster.weight_sync`: validated on load; "broadcast" makes the vLLM engines join the learner's
weight group ("external"), rooted on the learner's graph address."""

from __future__ import annotations

from pathlib import Path

import pytest

from rstar2.config import ConfigError, from_dict
from rstar2.train.cluster_config import ClusterConfig
from rstar2.train.config import TrainConfig
from rstar2.train.runner import train_graph, vllm_options


def test_broadcast_makes_the_engines_join_the_learners_group_on_cpu_and_gpu() -> None:
    assert "weight_sync" not in vllm_options(ClusterConfig())
    cpu = vllm_options(ClusterConfig(weight_sync="broadcast"))
    assert cpu == {"dtype": "float32", "enforce_eager": True, "weight_sync": "external"}
    gpu = vllm_options(ClusterConfig(gpus=8, weight_sync="broadcast"))
    assert gpu["weight_sync"] == "external" and gpu["dtype"] == "auto"


def test_the_learner_roots_the_group_on_its_graph_address(tmp_path: Path) -> None:
    cfg = TrainConfig()
    cfg.cluster.engine_backend = "vllm"
    cfg.cluster.weight_sync = "broadcast"
    graph = train_graph(cfg, tmp_path, tmp_path / "model", resume=False)
    learner = next(a for a in graph.actors if a.name == "learner")
    assert learner.params["weight_sync_host"] == graph.hosts[learner.host] == "127.0.0.1"


def test_an_unknown_weight_sync_names_the_key() -> None:
    with pytest.raises(ConfigError, match="cluster.weight_sync"):
        from_dict(ClusterConfig, {"weight_sync": "nfs"}, "cluster")
