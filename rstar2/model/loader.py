"""Loading a local Hugging Face causal-LM directory (the embedded default or any checkpoint).

`load_model(path)` reads the weights (safetensors) and the tokenizer from a local directory with
`local_files_only=True`, so it never reaches a model hub; a missing directory or file is a clear
error. The model comes back in eval mode with the requested dtype.

A tokenizer saved as a plain fast tokenizer (`tokenizer_class` "TokenizersBackend" or
"PreTrainedTokenizerFast", as the embedded one is) is loaded as exactly that. `AutoTokenizer`
would instead pick the model type's class (`Qwen2Tokenizer` for a `qwen2` config), which in
transformers 5 rebuilds its own pre-tokenizer around the saved vocabulary and so tokenizes
numbers differently from training. Other checkpoints (Qwen3, ...) go through `AutoTokenizer`.

A directory whose files do not load - a `config.json` that is not JSON, no weights file, a
truncated or corrupt safetensors file, a broken tokenizer - raises `ModelFileError` naming the
directory and the loader's reason (the commands report it as one line naming `--model`).

`weight_bytes(path)` reads only the safetensors headers: the sizes of the largest weight tensor
(the unit the trainer's weight pushes cannot split) and of all of them, in float32.

What it does not do: create models (see `rstar2.model.tiny`) or move them to a device.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

log = logging.getLogger(__name__)


class ModelFileError(ValueError):
    """A model directory's files do not load; the message names the directory and why."""


_PLAIN_FAST = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """The tokenizer saved in local directory `path`, with its saved pipeline kept intact."""
    path = Path(path)
    config_file = path / "tokenizer_config.json"
    declared = None
    if config_file.is_file():
        declared = json.loads(config_file.read_text()).get("tokenizer_class")
    if declared in _PLAIN_FAST:
        return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    return AutoTokenizer.from_pretrained(path, local_files_only=True)


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
    try:
        tokenizer = load_tokenizer(path)
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError(f"{path}: expected a fast tokenizer, got {type(tokenizer).__name__}")
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    except (OSError, ValueError, KeyError, SafetensorError) as e:  # transformers/safetensors
        reason = " ".join(str(e).split()) or type(e).__name__
        raise ModelFileError(f"{path}: the model does not load ({reason})") from e
    model.eval()
    log.debug("loaded %s (%s, %s)", path, type(model).__name__, dtype)
    return model, tokenizer


def weight_bytes(path: str | Path) -> tuple[int, int]:
    """(largest tensor, all tensors) of the safetensors files in `path`, in bytes counted in
    float32 (at least 4 bytes per element), from the file headers alone; (0, 0) if none."""
    largest = total = 0
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                numel = 1
                for dim in f.get_slice(name).get_shape():
                    numel *= int(dim)
                largest = max(largest, 4 * numel)
                total += 4 * numel
    return largest, total
