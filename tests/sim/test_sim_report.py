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


SMALL = ["--scenario", "short-uniform", "--prompts", "4", "--rollouts", "4", "--gpus", "2",
         "--cost", "constant", "--step-s", "1"]  # fmt: skip


def test_one_policy_has_no_ratio_to_static_and_the_table_has_a_legend(
    capsys: pytest.CaptureFixture[str],
):
    # issue 34 row 15: x_static was 1.000 though static never ran
    assert main(["-q", "sim", "run", "--policy", "kv_aware", *SMALL]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    row = dict(zip(head, lines[2].split(), strict=True))
    assert row["policy"] == "kv_aware" and row["x_static"] == "-"
    legend = {line.split()[0] for line in lines[lines.index("") + 1 :]}
    assert {"x_static", "x_bound", "sticky_lb", "preempt"} <= legend
    assert "recomputed:" in lines[lines.index("") + 3]


def test_a_compare_table_divides_by_the_static_row(capsys: pytest.CaptureFixture[str]):
    static = SimpleNamespace(policy="static", makespan_s=10.0)
    other = SimpleNamespace(policy="kv_aware", makespan_s=8.0)
    for r in (static, other):
        r.__dict__.update(ratio_to_bound=1.0, preemptions=0, recomputed_tokens=0, events=1,
                          sticky_bound_s=None, idle_fraction=0.0, kv_utilisation=0.0,
                          tokens_per_s=1.0, wall_s=0.0, lower_bound_s=8.0, spread_floor_s=8.0)  # fmt: skip
    lines = report.table([static, other]).splitlines()  # type: ignore[list-item]
    assert [line.split()[2] for line in lines[2:4]] == ["1.000", "0.800"]


def test_a_runs_table_explains_its_step_times(capsys: pytest.CaptureFixture[str]):
    argv = ["-q", "sim", "run", "--steps", "4", "--max-staleness", "1", *SMALL,
            "--update-s", "5", "--push-s", "2"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    legend = lines[lines.index("") + 1 :]
    assert [line.split()[0] for line in legend[:2]] == ["step_s_mean", "step_s_steady"]
