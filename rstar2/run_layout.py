"""The names inside a run directory, and what a user means by a path into one.

A run directory (`rstar2 train --run-dir RUN`) holds `config.json` (the train config),
`model-init/` and `model-sft/` (the starting policies), `checkpoints/step-N/` (each a
checkpoint: `state.pt`, `policy/` for resuming, `model/` a Hugging Face model directory),
`checkpoints/LATEST` (the newest one's name) and, once the run finished, `model-rl/` (the final
RL policy, linked from the last checkpoint's `model/`).

`model_dir_of(path)` resolves what users pass as `--model`: a model directory (as is), a
checkpoint directory (its `model/`), a run's `checkpoints/` (the latest one's) or a run
directory (its `model-rl/`, else its latest checkpoint's, else `model-sft/`, else
`model-init/`). `model_files_problem(dir)` says what a model directory lacks that every
loader needs (a `config.json` that parses, a weights file, a tokenizer), so that a bad `--model`
or `model.path` is one line before any work, not a traceback from an actor mid-run. Plain
file-system checks, no torch: the CLI's argument types use them.

What it does not do: write any of these (`rstar2.learner.checkpoint`, `rstar2.train.runner`).
"""

from __future__ import annotations

import json
from pathlib import Path

LATEST = "LATEST"
"""`RUN/checkpoints/LATEST`: the name of the newest complete checkpoint."""
MODEL_DIR = "model"
"""A checkpoint's subdirectory holding the policy as a Hugging Face model directory."""
FINAL_POLICY = "model-rl"
"""The run directory's final RL policy (links to the last checkpoint's `model/`)."""
STARTING_POLICIES = ("model-sft", "model-init")
"""A run directory's policies before RL, the later first."""
WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin")
"""The weights of a Hugging Face model directory, as `from_pretrained` finds them."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
"""Any of these makes a tokenizer `AutoTokenizer` can load from the directory."""


def is_checkpoint(path: str | Path) -> bool:
    return (Path(path) / "state.pt").is_file()


def is_run_dir(path: str | Path) -> bool:
    path = Path(path)
    return (path / "checkpoints").is_dir() or any((path / n).is_dir() for n in STARTING_POLICIES)


def model_files_problem(
    path: str | Path, expected: str = "a Hugging Face model directory"
) -> str | None:
    """What model directory `path` lacks that loading it needs (its `config.json` readable,
    a weights file, a tokenizer), None when nothing; without a `config.json`, it is not
    `expected` (what the caller takes: a `--model` flag also takes a run or checkpoint). It
    does not read the weights: a corrupt file still fails when loaded, as one line naming the
    directory (`ModelFileError`)."""
    path = Path(path)
    if not path.is_dir():
        return f"{path} is not a directory" if path.exists() else f"{path} does not exist"
    try:
        json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        return f"{path} has no config.json: not {expected}"
    except (OSError, ValueError) as e:
        return f"{path}/config.json does not read as JSON ({e})"
    if not any(next(path.glob(pattern), None) for pattern in WEIGHT_FILES):
        return f"{path} has no weights file (model.safetensors or pytorch_model.bin)"
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        return f"{path} has no tokenizer (tokenizer.json or tokenizer_config.json)"
    return None


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
