"""Devices of `rstar2 train`: cuda asked for on a machine without a GPU stops the run before
any work (SFT runs on `learner.device`, so it would otherwise train for minutes first)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from rstar2.cli import main
from rstar2.config import ConfigError, from_dict
from rstar2.train.config import TrainConfig


@pytest.mark.parametrize(
    ("sets", "key"),
    [
        ({"learner": {"device": "cuda"}}, "learner.device"),
        ({"engine": {"device": "cuda"}}, "engine.device"),
    ],
)
def test_cuda_is_refused_before_any_work_without_a_gpu(sets: dict, key: str) -> None:
    cfg = from_dict(TrainConfig, sets)
    with pytest.raises(ConfigError, match=key):
        cfg.check_devices(cuda_devices=0)
    cfg.check_devices(cuda_devices=1)
    from_dict(TrainConfig, {}).check_devices(cuda_devices=0)  # auto: no GPU, the CPU


def test_engine_device_is_not_checked_for_vllm_engines() -> None:
    cfg = from_dict(
        TrainConfig, {"engine": {"device": "cuda"}, "cluster": {"engine_backend": "vllm"}}
    )
    cfg.check_devices(cuda_devices=0)


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_learner_ranks_spawned_here_need_a_gpu_each(device: str) -> None:
    """Rank 0 spawns the other ranks on its own host, rank r on GPU r: more ranks than GPUs
    would put two NCCL ranks on one GPU (refused by NCCL after SFT), so train refuses first."""
    sets = {"learner": {"device": device}, "cluster": {"learner_ranks": 4}}
    with pytest.raises(ConfigError, match="cluster.learner_ranks.*<= 2, the GPUs"):
        from_dict(TrainConfig, sets).check_devices(cuda_devices=2)
    from_dict(TrainConfig, sets).check_devices(cuda_devices=4)
    met = {**sets, "cluster": {"learner_ranks": 4, "learner_rendezvous": "tcp://host0:29500"}}
    from_dict(TrainConfig, met).check_devices(cuda_devices=2)  # the others start elsewhere
    cpu = {**sets, "learner": {"device": "cpu"}}
    from_dict(TrainConfig, cpu).check_devices(cuda_devices=2)  # gloo ranks: no GPU each
    if device == "auto":
        from_dict(TrainConfig, sets).check_devices(cuda_devices=0)  # auto without GPUs: CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_train_with_cuda_and_no_gpu_is_a_one_line_error(tmp_path) -> None:
    run = tmp_path / "run"
    out = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "train", "--quick", "--run-dir", str(run),
         "--set", "learner.device=cuda"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "learner.device" in out.stderr and "no GPU" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (run / "model-init").exists()  # stopped before building anything


def test_dry_run_says_where_sft_the_learner_and_the_engine_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The embedded plan names the devices `train` will use (it said "CPU run" for a config
    that puts everything on CUDA)."""
    assert main(["train", "--config", "configs/gpu_20m.toml", "--dry-run"]) == 0
    line = capsys.readouterr().out
    assert "learner (1 rank, bf16) on cuda" in line and "engine(s) on cuda" in line
    assert main(["train", "--quick", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["learner_device"], plan["engine_device"]) == ("auto", "auto")
