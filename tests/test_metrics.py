"""Metrics: every step persisted, resume truncates to the checkpoint, the plot is written."""

from __future__ import annotations

import pytest

from rstar2.metrics import MetricsLog, plot_metrics, read_metrics


def test_write_resume_and_plot(tmp_path) -> None:
    m = MetricsLog(tmp_path, tensorboard=True)
    for step in range(1, 5):
        m.write({"step": step, "stage": "rl1", "reward_mean": step / 10})
    m.close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    assert any((tmp_path / "tensorboard").iterdir())
    m = MetricsLog(tmp_path, resume_step=2, tensorboard=False)
    m.write({"step": 3, "reward_mean": 0.9})
    m.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[-1]["reward_mean"] == 0.9
    png = plot_metrics({"a": rows}, tmp_path / "curves.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_row_needs_step(tmp_path) -> None:
    m = MetricsLog(tmp_path, tensorboard=False)
    with pytest.raises(ValueError):
        m.write({"reward_mean": 1.0})
    m.close()


def test_the_step_axis_has_integer_ticks(tmp_path, monkeypatch) -> None:
    """Three steps must not be labelled 1.0, 1.5, 2.0, ... (the figure is caught as it closes)."""
    import matplotlib.pyplot as plt

    closed = []
    monkeypatch.setattr(plt, "close", closed.append)
    rows = [{"step": s, "reward_mean": s / 10} for s in (1, 2, 3)]
    plot_metrics({"a": rows}, tmp_path / "curves.png", panels=[("reward_mean", "reward")])
    (ax, *_) = closed[0].axes
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)
