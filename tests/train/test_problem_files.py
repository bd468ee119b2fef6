"""A run's problem files: read with `data_format`, checked before any work, each split's source
logged (issue 34 rows 3, 4 and 14)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rstar2.config import ConfigError
from rstar2.train.config import load_train_config
from rstar2.train.runner import check_splits


def write(path: Path, rows: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [{"q": f"{i}+1?", "sol": i + 1} for i in range(40)]


def test_a_file_without_the_field_is_a_config_error_with_a_hint(tmp_path: Path) -> None:
    cfg = load_train_config(quick=True, sets=[f"data={write(tmp_path / 'p.jsonl', ROWS)}"])
    with pytest.raises(ConfigError) as info:
        check_splits(cfg)
    assert info.value.key == "data"
    assert "missing field 'problem' (the row's fields: q, sol)" in str(info.value)
    assert "data_format.problem_field" in str(info.value)


def test_data_format_names_the_fields_of_every_split(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "p.jsonl", ROWS)
    held = write(tmp_path / "h.jsonl", [{"q": f"{i}*2?", "sol": 2 * i} for i in range(30)])
    sets = [f"data={path}", f"heldout_data={held}", "data_format.problem_field=q",
            "data_format.answer_field=sol", "heldout_problems=20", "test_problems=10"]  # fmt: skip
    cfg = load_train_config(quick=True, sets=sets)
    with caplog.at_level(logging.INFO):
        check_splits(cfg)
    lines = [r.getMessage() for r in caplog.records]
    assert f"training problems: 40 from data {path}" in lines
    assert f"validation problems: 20 from heldout_data {held}" in lines
    assert f"test problems: 10 from heldout_data {held}, after the validation problems" in lines
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_training_data_with_built_in_evaluation_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "p.jsonl", [{"question": "1+1?", "answer": 2}])
    cfg = load_train_config(quick=True, sets=[f"data={path}"])
    with caplog.at_level(logging.INFO):
        check_splits(cfg)
    lines = [r.getMessage() for r in caplog.records]
    assert f"training problems: 1 from data {path}" in lines
    assert "validation problems: 32 from the built-in arithmetic task's held-out split" in lines
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "validating and testing on the built-in task" in warning


def test_a_missing_or_directory_file_names_the_key(tmp_path: Path) -> None:
    for value, reason in ((tmp_path, "Is a directory"), (tmp_path / "no.jsonl", "not found")):
        cfg = load_train_config(quick=True, sets=[f"heldout_data={value}"])
        with pytest.raises(ConfigError, match=f"config key 'heldout_data'.*{reason}"):
            check_splits(cfg)
