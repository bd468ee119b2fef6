"""Loading a local Hugging Face causal-LM directory (the embedded default or any checkpoint).

`load_model(path)` reads the weights (safetensors) and the tokenizer from a local directory with
`local_files_only=True`, so it never reaches a model hub; a missing directory or file is a clear
error. The model comes back in eval mode with the requested dtype.

What it does not do: create models (see `rstar2.model.tiny`) or move them to a device.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

log = logging.getLogger(__name__)


def load_model(
    path: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """The model and fast tokenizer saved in local directory `path` (never downloads)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory {path} does not exist")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json: not a Hugging Face model directory")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(f"{path}: expected a fast tokenizer, got {type(tokenizer).__name__}")
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    model.eval()
    log.debug("loaded %s (%s, %s)", path, type(model).__name__, dtype)
    return model, tokenizer
