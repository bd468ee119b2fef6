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
        cfg.check_devices(cuda_available=False)
    cfg.check_devices(cuda_available=True)
    from_dict(TrainConfig, {}).check_devices(cuda_available=False)  # auto: no GPU, the CPU


def test_engine_device_is_not_checked_for_vllm_engines() -> None:
    cfg = from_dict(
        TrainConfig, {"engine": {"device": "cuda"}, "cluster": {"engine_backend": "vllm"}}
    )
    cfg.check_devices(cuda_available=False)


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
