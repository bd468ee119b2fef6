"""`LineFile`: whole lines only, written in batches as they come, cut back on a failed write."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from rstar2.cli import bad_input_message
from rstar2.commands import line_file
from rstar2.commands.line_file import LineFile


def test_lines_are_written_in_batches_by_size_and_time(tmp_path: Path) -> None:
    path, now = tmp_path / "out.jsonl", [0.0]
    with LineFile(path, flush_bytes=10, flush_s=5.0, clock=lambda: now[0]) as out:
        out.write_line("abc")
        assert path.read_text() == "" and out.lines == 0  # gathered
        out.write_line("defgh")  # 10 bytes gathered: written
        assert path.read_text() == "abc\ndefgh\n" and out.lines == 2
        out.write_line("i")
        now[0] = 5.0
        out.write_line("j")  # 5 s since the last write
        assert path.read_text() == "abc\ndefgh\ni\nj\n"
        out.write_line("k")
    assert path.read_text() == "abc\ndefgh\ni\nj\nk\n" and out.lines == 5


def test_a_line_with_a_newline_is_refused(tmp_path: Path) -> None:
    with LineFile(tmp_path / "out.jsonl") as out, pytest.raises(ValueError, match="newline"):
        out.write_line("a\nb")


def test_a_full_disk_mid_batch_leaves_only_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 34 row 8: a full disk under `eval --out` must leave nothing half-written
    path = tmp_path / "out.jsonl"
    out = LineFile(path, flush_bytes=1 << 20)
    out.write_line("first")
    out.flush()
    room, real_write = [4], os.write  # the disk has room for 4 more bytes

    def write(fd: int, data: bytes) -> int:
        if not room[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real_write(fd, data[: room[0]])
        room[0] -= n
        return n

    monkeypatch.setattr(line_file.os, "write", write)
    out.write_line("second")
    out.write_line("third")
    with pytest.raises(OSError) as caught:
        out.flush()
    assert path.read_text() == "first\n" and out.lines == 1  # "seco" cut off again
    assert bad_input_message(caught.value) == f"No space left on device: {path}"
    out.write_line("fourth")  # dropped: the run stops on that error, raised once
    out.close()
    assert path.read_text() == "first\n" and out.lines == 1
