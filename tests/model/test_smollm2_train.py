"""`configs/smollm2_135m.toml` end to end on the converted SmolLM2-135M: SFT, held-out
evaluation, one RL step with a weight push, at a smoke-test size (slow: ~2 min on 2 cores)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rstar2.train.config import load_train_config
from rstar2.train.runner import train_graph

CONFIG = Path(__file__).parents[2] / "configs" / "smollm2_135m.toml"


@pytest.mark.slow
def test_the_train_graph_admits_a_weight_bucket_of_smollm2(
    smollm2_dir: Path, tmp_path: Path
) -> None:
    cfg = load_train_config(CONFIG, sets=[f"model.path={smollm2_dir}"])
    graph = train_graph(cfg, tmp_path, smollm2_dir, resume=False)
    embedding = 49160 * 576 * 4  # the largest tensor: a bucket holds whole tensors
    assert graph.max_message_bytes >= cfg.cluster.weight_bucket_mb * 2**20 + embedding


def test_the_tiny_models_message_limit_is_unchanged(tiny_dir: Path, tmp_path: Path) -> None:
    cfg = load_train_config(None, sets=[f"model.path={tiny_dir}"])
    assert train_graph(cfg, tmp_path, tiny_dir, resume=False).max_message_bytes == 64 * 2**20


@pytest.mark.slow
def test_sft_then_rl_runs_on_smollm2(smollm2_dir: Path, tmp_path: Path) -> None:
    sets = [
        f"model.path={smollm2_dir}",
        "sft.steps=2",
        "heldout_problems=4",
        "test_problems=0",
        "prompts_per_step=2",
        "rollouts_per_prompt=4",
        "rl.group_size=2",
        # short responses: the two validations took 26 s each at the config's 192 tokens
        "rollout.max_response_tokens=48",
        'stages=[{"name": "rl1", "steps": 1, "max_response_tokens": 48}]',
    ]
    cmd = [sys.executable, "-m", "rstar2.cli", "-q", "train", "--config", str(CONFIG)]
    cmd += ["--run-dir", str(tmp_path / "run"), "--json"]
    for item in sets:
        cmd += ["--set", item]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 1 and summary["sft_accuracy"] is not None
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert any(r.get("gen_tokens", 0) > 0 for r in rows)
    assert (tmp_path / "run" / "model-sft" / "sft.json").is_file()
