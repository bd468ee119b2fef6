"""`largest_tensor_bytes`: the largest weight tensor, from the safetensors headers alone."""

from __future__ import annotations

from pathlib import Path

from rstar2.model import load_model
from rstar2.model.loader import largest_tensor_bytes


def test_largest_tensor_is_the_embedding_in_float32(tiny_dir: Path, tmp_path: Path) -> None:
    model, _ = load_model(tiny_dir)
    emb = model.get_input_embeddings().weight
    assert largest_tensor_bytes(tiny_dir) == 4 * emb.numel()
    half = tmp_path / "half"
    model.half().save_pretrained(half)
    assert largest_tensor_bytes(half) == 4 * emb.numel()  # counted as float32, as pushed
    assert largest_tensor_bytes(tmp_path / "empty") == 0
