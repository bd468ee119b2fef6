"""The names inside a run directory, and what a user means by a path into one.

A run directory (`rstar2 train --run-dir RUN`) holds `config.json` (the train config),
`model-init/` and `model-sft/` (the starting policies), `checkpoints/step-N/` (each a
checkpoint: `state.pt`, `policy/` for resuming, `model/` a Hugging Face model directory),
`checkpoints/LATEST` (the newest one's name) and, once the run finished, `model-rl/` (the final
RL policy, linked from the last checkpoint's `model/`).

`model_dir_of(path)` resolves what users pass as `--model`: a model directory (as is), a
checkpoint directory (its `model/`), a run's `checkpoints/` (the latest one's) or a run
directory (its `model-rl/`, else its latest checkpoint's, else `model-sft/`, else
`model-init/`). Plain file-system checks, no torch: the CLI's argument types use it.

What it does not do: write any of these (`rstar2.learner.checkpoint`, `rstar2.train.runner`).
"""

from __future__ import annotations

from pathlib import Path

LATEST = "LATEST"
"""`RUN/checkpoints/LATEST`: the name of the newest complete checkpoint."""
MODEL_DIR = "model"
"""A checkpoint's subdirectory holding the policy as a Hugging Face model directory."""
FINAL_POLICY = "model-rl"
"""The run directory's final RL policy (links to the last checkpoint's `model/`)."""
STARTING_POLICIES = ("model-sft", "model-init")
"""A run directory's policies before RL, the later first."""


def is_checkpoint(path: str | Path) -> bool:
    return (Path(path) / "state.pt").is_file()


def is_run_dir(path: str | Path) -> bool:
    path = Path(path)
    return (path / "checkpoints").is_dir() or any((path / n).is_dir() for n in STARTING_POLICIES)


def model_dir_of(path: str | Path) -> Path:
    """The Hugging Face model directory a user means by `path` (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is a file; expected a model, checkpoint or run directory")
    if is_checkpoint(path):
        model = path / MODEL_DIR
        if not (model / "config.json").is_file():
            raise FileNotFoundError(
                f"checkpoint {path} has no {MODEL_DIR}/ (an older rstar2 wrote it): write one "
                f"with `rstar2 convert checkpoint {path} OUT_DIR`"
            )
        return model
    if (path / LATEST).is_file():  # RUN/checkpoints
        return model_dir_of(path / (path / LATEST).read_text().strip())
    if is_run_dir(path):
        if (path / FINAL_POLICY / "config.json").is_file():
            return path / FINAL_POLICY
        if (path / "checkpoints" / LATEST).is_file():
            return model_dir_of(path / "checkpoints")
        for name in STARTING_POLICIES:
            if (path / name / "config.json").is_file():
                return path / name
        raise FileNotFoundError(f"run directory {path} holds no model yet")
    return path
