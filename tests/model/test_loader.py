"""`weight_bytes`: the largest and all weight tensors, from the safetensors headers alone."""

from __future__ import annotations

from pathlib import Path

from rstar2.model import load_model
from rstar2.model.loader import weight_bytes


def test_weight_bytes_in_float32(tiny_dir: Path, tmp_path: Path) -> None:
    model, _ = load_model(tiny_dir)
    emb = model.get_input_embeddings().weight
    total = 4 * sum(p.numel() for p in model.parameters())  # tied: the embedding saved once
    assert weight_bytes(tiny_dir) == (4 * emb.numel(), total)
    half = tmp_path / "half"
    model.half().save_pretrained(half)
    assert weight_bytes(half) == (4 * emb.numel(), total)  # counted as float32, as pushed
    assert weight_bytes(tmp_path / "empty") == (0, 0)
