"""`weight_bytes`: the largest and all weight tensors, from the safetensors headers alone;
`load_model` on a directory whose files do not load."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from rstar2.cli import main
from rstar2.model.loader import ModelFileError, load_model, weight_bytes


def test_weight_bytes_in_float32(tiny_dir: Path, tmp_path: Path) -> None:
    model, _ = load_model(tiny_dir)
    emb = model.get_input_embeddings().weight
    total = 4 * sum(p.numel() for p in model.parameters())  # tied: the embedding saved once
    assert weight_bytes(tiny_dir) == (4 * emb.numel(), total)
    half = tmp_path / "half"
    model.half().save_pretrained(half)
    assert weight_bytes(half) == (4 * emb.numel(), total)  # counted as float32, as pushed
    assert weight_bytes(tmp_path / "empty") == (0, 0)


def _broken_config(model: Path) -> None:
    (model / "config.json").write_text("{not json")


def _config_only(model: Path) -> None:
    for f in model.iterdir():
        if f.name != "config.json":
            f.unlink()


def _truncated_weights(model: Path) -> None:
    with (model / "model.safetensors").open("r+b") as f:
        f.truncate(1000)


@pytest.mark.parametrize("breakage", [_broken_config, _config_only, _truncated_weights])
def test_files_that_do_not_load_are_a_model_file_error(
    tiny_dir: Path, tmp_path: Path, breakage: Callable[[Path], None]
) -> None:
    # issue 34 row 6: transformers' and safetensors' tracebacks, exit 1
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    breakage(model)
    with pytest.raises(ModelFileError, match=f"^{model}: the model does not load"):
        load_model(model)


def test_eval_with_a_model_that_does_not_load_is_one_line(
    tiny_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_dir, model)
    _truncated_weights(model)
    data = tmp_path / "p.jsonl"
    data.write_text('{"problem": "1+1?", "answer": 2}\n')
    out = tmp_path / "out.jsonl"
    argv = ["-q", "eval", "--model", str(model), "--data", str(data), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rstar2 eval: error: argument --model: got '{model}'")
    assert "invalid header length" in err and err.count("\n") == 1
    assert not out.exists()
