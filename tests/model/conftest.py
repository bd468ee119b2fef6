"""Fixtures for the model tests: a small embedded model built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from rstar2.model import TinyModelConfig, init_model

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
