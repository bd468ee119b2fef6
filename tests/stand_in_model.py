"""A stand-in model directory: the files `--model` and `model.path` check for
(`rstar2.run_layout.model_files_problem`: a `config.json`, a weights file, a tokenizer), none of
which loads. For tests of what a command does before it loads the model."""

from __future__ import annotations

from pathlib import Path


def stand_in_model(path: Path, config: str = "{}") -> Path:
    """`path` made a stand-in model directory whose `config.json` holds `config`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(config)
    (path / "tokenizer.json").write_text("{}")
    (path / "model.safetensors").write_text("")
    return path
