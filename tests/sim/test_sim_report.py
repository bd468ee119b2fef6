"""The simulator's presentation: integer ticks on the engine axis, calibrate's table."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import sim.report as report
from rstar2.cli import main


def test_the_engine_axis_has_integer_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    closed = []
    monkeypatch.setattr(report.plt, "close", closed.append)
    result = SimpleNamespace(
        policy="static", busy_s=[1.0, 2.0, 3.0], idle_fractions=[0.1, 0.2, 0.3]
    )
    report.plot_idle([result], tmp_path / "idle.png")  # type: ignore[list-item]
    (ax,) = closed[0].axes
    ticks = [t for t in ax.get_xticks() if 0 <= t <= 2]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert (tmp_path / "idle.png").read_bytes()[:4] == b"\x89PNG"


def test_key_value_table_nests_and_aligns():
    text = report.key_value_table({"fit": {"a_s": 0.000123456789, "b": 2}, "points": 3})
    assert text.splitlines() == [
        "fit:",
        f"{'  a_s':<32}0.000123457",
        f"{'  b':<32}2",
        f"{'points':<32}3",
    ]


def test_calibrate_prints_a_table_and_json_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    points = [
        {"batch": b, "context_tokens": 100 * b, "prefill_tokens": 0, "step_s": 0.01 + 0.002 * b}
        for b in (1, 2, 4, 8, 16)
    ]
    path = tmp_path / "points.json"
    path.write_text(json.dumps(points))
    assert main(["-q", "sim", "calibrate", "--points", str(path)]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and out.startswith("fit:\n")
    assert any(line.split()[0] == "points" and line.split()[1] == "5" for line in out.splitlines())
    assert main(["-q", "sim", "calibrate", "--points", str(path), "--json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["points"] == 5 and isinstance(parsed["fit"], dict)
