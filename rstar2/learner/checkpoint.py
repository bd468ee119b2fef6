"""Atomic training checkpoints: everything needed to continue a run bit-for-bit.

A checkpoint is a directory `RUN/checkpoints/step-000010/` holding `policy/` (model weights and
optimizer state as a torch.distributed.checkpoint directory, written by every learner rank
through the caller's `write_policy`), `model/` (the policy as a Hugging Face model directory that
`rstar2 eval`, `chat` and any HF loader read; the caller's `write_model`), `state.pt` (lr-scheduler state, data cursor, RNG states,
stage, step and any extra trainer state: small, rank 0's) and `meta.json` (step, stage, time;
human readable). It is written under a
temporary name, fsynced and renamed into place, and only then does `RUN/checkpoints/LATEST`
(itself replaced atomically) point at it. A crash at any moment therefore leaves either the
previous checkpoint or the new one, never a torn one. Old checkpoints beyond `keep` are pruned
after the new one is in place.

`publish_final_policy(run_dir)` links the latest checkpoint's `model/` as `RUN/model-rl/` when
a run finishes.

What it does not do: write or read the policy itself (`rstar2.learner.policy.LearnerPolicy`'s
`save` and `load`, collectives of every rank).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from rstar2.config import UsageError
from rstar2.model.saver import link_model_dir, save_model_dir
from rstar2.run_layout import FINAL_POLICY, LATEST, MODEL_DIR, STARTING_POLICIES, is_checkpoint

log = logging.getLogger(__name__)

POLICY_DIR = "policy"
"""The checkpoint's subdirectory holding the model and optimizer (torch.distributed.checkpoint)."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: its step, its directory and the saved state dict."""

    step: int
    path: Path
    state: dict[str, Any]


def rng_state() -> dict[str, Any]:
    """Capture the Python, NumPy and torch RNG states (the CPU's, and every GPU's when torch
    sees GPUs)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore `rng_state()`'s capture; the GPUs' states only where both the checkpoint and this
    machine have them for the same number of GPUs (a run moved to another GPU count or to the
    CPU resumes with fresh GPU generators)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(
    run_dir: Path,
    step: int,
    state: dict[str, Any],
    keep: int = 2,
    write_policy: Callable[[Path], None] | None = None,
    write_model: Callable[[Path], None] | None = None,
) -> Path:
    """Write `state` (and, through `write_policy(dir)`, the policy's training state into `dir`;
    through `write_model(dir)`, the policy as a model directory `dir`) as the checkpoint of
    `step` atomically and point LATEST at it."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    final = root / name
    tmp = root / f".{name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    if write_policy is not None:
        write_policy(tmp / POLICY_DIR)
    if write_model is not None:
        write_model(tmp / MODEL_DIR)
    with open(tmp / "state.pt", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    meta = {"step": step, "stage": state.get("stage"), "time": time.time()}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    _fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _point_latest(root, name)
    _fsync_dir(root)
    _prune(root, keep)
    log.debug("checkpoint %s written", final)
    return final


def _point_latest(root: Path, name: str) -> None:
    """Point `root/LATEST` at checkpoint `name`, atomically."""
    latest_tmp = root / f".{LATEST}.tmp"
    latest_tmp.write_text(name + "\n")
    os.replace(latest_tmp, root / LATEST)


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.glob("step-*") if p.is_dir())
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def load_latest(run_dir: Path) -> Checkpoint | None:
    """The newest complete checkpoint of a run, or None when it has none."""
    root = Path(run_dir) / "checkpoints"
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    path = root / pointer.read_text().strip()
    if not (path / "state.pt").is_file():
        raise FileNotFoundError(f"{pointer} names {path.name}, which has no state.pt")
    return load_checkpoint(path)


class CheckpointError(UsageError):
    """A checkpoint's files are there but do not load (truncated, overwritten, another format):
    one line naming the checkpoint at the CLI (exit code 2), not the unpickler's traceback."""

    def __init__(self, path: Path, error: BaseException) -> None:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = lines[-1] if lines else type(error).__name__  # DCP's: a traceback, the cause last
        super().__init__(
            f"checkpoint {path} does not load ({type(error).__name__}: {reason}); an earlier "
            "one of the run (RUN/checkpoints/step-N) may"
        )


_UNREADABLE = (pickle.UnpicklingError, EOFError, RuntimeError, ValueError, KeyError, TypeError)
"""What torch.load, DCP's reader and json raise for files that are not what they should be."""


def load_checkpoint(path: Path) -> Checkpoint:
    """The checkpoint in directory `path` (`RUN/checkpoints/step-N`); `CheckpointError` if its
    files do not load."""
    path = Path(path)
    if not (path / "state.pt").is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint directory (it has no state.pt)")
    try:
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
        meta = json.loads((path / "meta.json").read_text())
        return Checkpoint(step=int(meta["step"]), path=path, state=state)
    except _UNREADABLE as e:
        raise CheckpointError(path, e) from e


def drop_checkpoints_after(run_dir: Path, step: int) -> list[Path]:
    """Remove the run's checkpoints of steps after `step` (a resume from an earlier checkpoint
    runs those steps again) and point LATEST at `step`'s; returns the removed directories."""
    root = Path(run_dir) / "checkpoints"
    removed = []
    for path in sorted(root.glob("step-*")):
        if path.is_dir() and int(path.name.split("-")[1]) > step:
            shutil.rmtree(path)
            removed.append(path)
    if removed:
        _point_latest(root, f"step-{step:06d}")
    return removed


def publish_final_policy(run_dir: Path) -> Path | None:
    """Link the latest checkpoint's model directory as `RUN/model-rl/` (None: it has none)."""
    root = Path(run_dir) / "checkpoints"
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    model = root / pointer.read_text().strip() / MODEL_DIR
    if not (model / "config.json").is_file():
        return None
    return link_model_dir(model, Path(run_dir) / FINAL_POLICY)


def read_policy(checkpoint: Path) -> dict[str, Any]:
    """A checkpoint's model and optimizer state as one plain nested dict on this process
    ({"model": ..., "optim": ...}; full tensors, whatever rank count wrote them), for tools and
    tests. Uses DCP's own converter to a torch.save file, in a temporary directory."""
    policy = Path(checkpoint) / POLICY_DIR
    if not (policy / ".metadata").is_file():
        raise FileNotFoundError(f"{checkpoint} has no {POLICY_DIR}/ checkpoint")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "policy.pt"
        try:
            dcp_to_torch_save(policy, out)
        except (*_UNREADABLE, CheckpointException) as e:  # DCP's: each rank's error inside
            raise CheckpointError(Path(checkpoint), e) from e
        return torch.load(out, map_location="cpu", weights_only=False)


def checkpoint_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The model's full tensors of a checkpoint, whatever rank count (or rstar2 version: a
    `state.pt` holding "model") wrote it."""
    if (Path(checkpoint) / POLICY_DIR / ".metadata").is_file():
        return dict(read_policy(checkpoint)["model"])
    state = load_checkpoint(checkpoint).state
    if "model" not in state:
        raise FileNotFoundError(f"{checkpoint} holds no model weights")
    return dict(state["model"])


def export_checkpoint(path: Path, out: Path) -> Path:
    """Write the policy of checkpoint `path` (or of a run directory's latest checkpoint) as
    model directory `out`, laid out like the run's starting model (`rstar2 convert
    checkpoint`)."""
    path = Path(path)
    if not is_checkpoint(path):
        root = path / "checkpoints"
        if not (root / LATEST).is_file():
            raise FileNotFoundError(f"{path} is neither a checkpoint nor a run with checkpoints")
        path = root / (root / LATEST).read_text().strip()
    run_dir = path.parent.parent
    like = next(
        (run_dir / n for n in STARTING_POLICIES if (run_dir / n / "config.json").is_file()), None
    )
    if like is None and (run_dir / "config.json").is_file():
        model_path = json.loads((run_dir / "config.json").read_text()).get("model", {}).get("path")
        like = Path(model_path) if model_path else None
    if like is None or not (like / "config.json").is_file():
        raise FileNotFoundError(f"run {run_dir} has no starting model to take the layout from")
    return save_model_dir(checkpoint_weights(path), like, out)
