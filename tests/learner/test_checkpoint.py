"""Checkpoints are atomic, pruned, and restore RNG state exactly."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from rstar2.learner.checkpoint import (
    CheckpointError,
    checkpoint_weights,
    load_checkpoint,
    load_latest,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def test_roundtrip_and_prune(tmp_path) -> None:
    assert load_latest(tmp_path) is None
    for step in (1, 2, 3):
        save_checkpoint(
            tmp_path, step, {"w": torch.full((2,), float(step)), "stage": "rl1"}, keep=2
        )
    ck = load_latest(tmp_path)
    assert ck is not None and ck.step == 3
    assert torch.equal(ck.state["w"], torch.full((2,), 3.0))
    kept = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    assert kept == ["step-000002", "step-000003"]


def test_torn_write_keeps_previous(tmp_path) -> None:
    save_checkpoint(tmp_path, 1, {"x": 1})
    # a crash mid-write leaves only a temporary directory behind: LATEST still names step 1
    (tmp_path / "checkpoints" / ".step-000002.tmp").mkdir()
    ck = load_latest(tmp_path)
    assert ck is not None and ck.step == 1 and ck.state["x"] == 1
    save_checkpoint(tmp_path, 2, {"x": 2})
    assert load_latest(tmp_path).state["x"] == 2


def test_rng_state_restores_streams() -> None:
    state = rng_state()
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(state)
    b = (random.random(), np.random.rand(), torch.rand(1).item())
    assert a == b


def test_gpu_rng_states_are_saved_and_restored_for_the_same_gpu_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With GPUs, each one's generator state is captured and restored (faked here: no GPU);
    on another GPU count, or none, the GPU states are left alone."""
    restored: list[object] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: ["gpu0", "gpu1"])
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    state = rng_state()
    assert state["cuda"] == ["gpu0", "gpu1"]
    set_rng_state(state)
    assert restored == [["gpu0", "gpu1"]]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    set_rng_state(state)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    set_rng_state(state)
    assert restored == [["gpu0", "gpu1"]]
    assert "cuda" not in rng_state()


def test_keep_must_be_positive(tmp_path) -> None:
    with pytest.raises(ValueError):
        save_checkpoint(tmp_path, 1, {}, keep=0)


def test_damaged_files_are_a_checkpoint_error_naming_the_checkpoint(tmp_path) -> None:
    ck = tmp_path / "step-000001"
    (ck / "policy").mkdir(parents=True)
    (ck / "state.pt").write_bytes(b"\x80\x02not a pickle")
    (ck / "meta.json").write_text('{"step": 1}')
    with pytest.raises(CheckpointError, match=r"step-000001 does not load \(UnpicklingError"):
        load_checkpoint(ck)
    (ck / "policy" / ".metadata").write_bytes(b"\x80\x02garbage")  # DCP's files, damaged
    with pytest.raises(CheckpointError, match=r"step-000001 does not load \("):
        checkpoint_weights(ck)
