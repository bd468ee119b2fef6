"""`rstar2 eval`'s count flags and data file: a bad value is one line naming the flag, exit
code 2, before any model is loaded (so a directory with a config.json stands for the model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rstar2.cli import main
from tests.stand_in_model import stand_in_model


def exit_code(argv: list[str]) -> int:
    """`main`'s exit code, whether it returns it or argparse raises SystemExit."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return stand_in_model(tmp_path / "model")  # the files --model checks for


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--samples", "0"), ("--samples", "-3"), ("--limit", "0"), ("--limit", "-2"),
     ("--concurrency", "0")],
)  # fmt: skip
def test_a_bad_count_flag_is_named(
    tmp_path: Path, model: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    data = tmp_path / "p.jsonl"
    data.write_text('{"problem": "1+1?", "answer": 2}\n')
    argv = ["eval", "--model", str(model), "--data", str(data), flag, value]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and value in err and "Traceback" not in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "message"), [(None, "not found"), ("", "at least one problem"), ("{", "line 1")]
)
def test_an_unusable_data_file_is_one_line(
    tmp_path: Path,
    model: Path,
    capsys: pytest.CaptureFixture[str],
    text: str | None,
    message: str,
) -> None:
    data = tmp_path / "p.jsonl"
    if text is not None:
        data.write_text(text)
    assert exit_code(["eval", "--model", str(model), "--data", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--data" in err and message in err and len(err.splitlines()) == 1
