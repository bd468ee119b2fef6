"""Writing a policy's weights as a Hugging Face model directory any loader reads.

`save_model_dir(weights, like, out)` writes `out/` with the config, generation config, chat
template and tokenizer files of model directory `like` (the model training started from) and
one `model.safetensors` holding `weights` - exactly the tensors `like`'s safetensors files hold,
in their dtypes. So a tied `lm_head` stays tied (the source has no `lm_head.weight` entry and
neither does the copy), and a bfloat16 checkpoint stays bfloat16 although the learner keeps
float32 master weights. The directory appears atomically (written under a temporary name, then
renamed), so a crash leaves either no directory or a complete one.

`link_model_dir(src, out)` publishes a written directory under another name (hard links where
the file system allows them, so the run's final policy costs no extra disk).

What it does not do: gather weights from learner ranks (`LearnerPolicy.full_weights`) or
decide where directories go (`rstar2.learner.checkpoint`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".safetensors.index.json")
"""Files of a model directory that hold weights (not copied from `like`)."""
NOT_COPIED = {"sft.json"}
"""rstar2's own markers in a model directory, which do not describe the copy."""


def weight_layout(model_dir: Path) -> dict[str, torch.dtype]:
    """Name -> dtype of every tensor in `model_dir`'s safetensors files (headers only)."""
    layout: dict[str, torch.dtype] = {}
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                layout[name] = _DTYPES[f.get_slice(name).get_dtype()]
    return layout


_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def save_model_dir(weights: Mapping[str, torch.Tensor], like: Path, out: Path) -> Path:
    """Write `weights` as model directory `out`, laid out like model directory `like`."""
    like, out = Path(like), Path(out)
    layout = weight_layout(like)
    if not layout:
        raise FileNotFoundError(f"{like} holds no safetensors weights to take the layout from")
    missing = sorted(set(layout) - set(weights))
    if missing:
        raise ValueError(f"the policy lacks {len(missing)} tensor(s) of {like}, e.g. {missing[0]}")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:  # an interrupted or failed write leaves no temporary either
        for file in like.iterdir():
            if (
                file.is_file()
                and not file.name.endswith(WEIGHT_SUFFIXES)
                and file.name not in NOT_COPIED
            ):
                shutil.copy2(file, tmp / file.name)
        # contiguous copies: safetensors refuses views and tensors that share storage
        tensors = {
            name: weights[name].detach().to("cpu", dtype).contiguous().clone()
            for name, dtype in layout.items()
        }
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def link_model_dir(src: Path, out: Path) -> Path:
    """Publish model directory `src` as `out` (hard links, else copies), atomically."""
    src, out = Path(src), Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for file in src.iterdir():
        if file.is_file():
            try:
                os.link(file, tmp / file.name)
            except OSError:
                shutil.copy2(file, tmp / file.name)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out
