"""`rstar2.whole_file`: an output appears whole or not at all, and no temporary stays behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from rstar2.whole_file import replacing, write_text


def test_write_text_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("old")
    assert write_text(path, "new") == path
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.mark.parametrize("error", [KeyboardInterrupt, OSError])
def test_an_interrupted_write_keeps_the_old_file_and_removes_the_temporary(
    tmp_path: Path, error: type[BaseException]
) -> None:
    path = tmp_path / "trace.json"
    path.write_text("old")
    with pytest.raises(error), replacing(path) as tmp:
        tmp.write_text("half of the ne")
        raise error()
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["trace.json"]


def test_a_directory_appears_whole(tmp_path: Path) -> None:
    out = tmp_path / "model"
    with pytest.raises(KeyboardInterrupt), replacing(out) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with replacing(out) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("{}")
    assert [p.name for p in out.iterdir()] == ["config.json"]


def test_a_directory_written_into_a_non_empty_one_replaces_its_files_one_by_one(
    tmp_path: Path,
) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text("old")
    (out / "notes.txt").write_text("kept")
    with replacing(out) as tmp:
        tmp.mkdir()
        (tmp / "config.json").write_text("new")
    assert (out / "config.json").read_text() == "new" and (out / "notes.txt").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
