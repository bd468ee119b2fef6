"""`rstar2 sim run --steps N` and `rstar2 sim compare-staleness`: their JSON, the plot, a trace
replayed with the learner fitted to the run's metrics."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import rstar2.commands.sim_fidelity as fidelity_command
from rstar2.cli import main
from sim.cost import StepPoint, fit, load_points
from sim.learner import from_metrics
from sim.workload import load_trace_steps

SMALL = ["--scenario", "short-uniform", "--prompts", "4", "--rollouts", "4", "--gpus", "2",
         "--cost", "constant", "--step-s", "1", "--update-s", "5", "--push-s", "2"]  # fmt: skip
KEYS = {"trajectories_per_hour", "engine_idle_fraction", "staleness_mean", "staleness_max",
        "step_s_mean"}  # fmt: skip


def test_run_of_several_steps_prints_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-q", "sim", "run", "--steps", "4", "--max-staleness", "1", *SMALL, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= out.keys()
    assert out["steps"] == 4 and out["max_staleness"] == 1
    assert out["staleness_max"] <= 1
    assert out["step_s_mean"] == pytest.approx(out["run_s"] / 4, abs=1e-3)
    assert out["trajectories_per_hour"] == pytest.approx(3600 * 64 / out["run_s"], rel=1e-4)


def test_run_of_several_steps_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    # issue 34 row 1: the histogram's int keys made the table raise TypeError
    assert main(["-q", "sim", "run", "--steps", "4", "--max-staleness", "1", *SMALL]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
    assert rows["steps"] == ["4"] and rows["max_staleness"] == ["1"]
    assert "staleness_histogram:" in lines
    histogram = lines[lines.index("staleness_histogram:") + 1 :][:2]
    assert [line.split()[0] for line in histogram] == ["0", "1"]
    assert sum(int(line.split()[1]) for line in histogram) == 64


def test_without_steps_run_is_the_one_step_simulation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-q", "sim", "run", *SMALL, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "makespan_s" in out and "staleness_max" not in out


def test_max_staleness_without_steps_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-q", "sim", "run", "--max-staleness", "1", *SMALL]) == 2
    assert "--max-staleness needs --steps N" in capsys.readouterr().err


def test_compare_staleness_tabulates_every_k_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["-q", "sim", "compare-staleness", "--max-k", "2", "--steps", "5", *SMALL]
    assert main([*args, "--out-dir", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["max_staleness"] for r in rows] == [0, 1, 2]
    assert all(KEYS <= r.keys() and r["staleness_max"] <= r["max_staleness"] for r in rows)
    assert rows[1]["run_s"] < rows[0]["run_s"]  # the update overlaps generation
    assert (tmp_path / "staleness.png").read_bytes()[:4] == b"\x89PNG"
    assert main([*args, "--out-dir", str(tmp_path)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["k", "step_s_mean", "steady_s", "traj/hour"]
    assert [line.split()[0] for line in table[2:5]] == ["0", "1", "2"]


def write_run(tmp_path: Path) -> tuple[Path, Path]:
    """A trace of 3 steps (2 trajectories of 10 + 20 tokens each) and its metrics: the learner
    took 1 + 0.01 s per trained token, the push 0.5 s (median of 0.4, 0.5, 0.9)."""
    trace, metrics = tmp_path / "rollout_trace.jsonl", tmp_path / "metrics.jsonl"
    records = [
        {"step": s, "prompt_id": f"p{s}", "prompt_tokens": 10, "turns": [{"model_tokens": 20}]}
        for s in (1, 2, 3)
        for _ in range(2)
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    rows = [{"step": 0, "stage": "sft"}]
    for s, trained, sync in ((1, 2, 0.4), (2, 1, 0.9), (3, 2, 0.5)):
        rows.append({"step": s, "trained_rollouts": trained,
                     "time_learner_s": 1.0 + 0.01 * 30 * trained, "time_sync_s": sync})  # fmt: skip
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return trace, metrics


def test_the_learner_fit_to_a_runs_metrics(tmp_path: Path) -> None:
    trace, metrics = write_run(tmp_path)
    cost = from_metrics(metrics, load_trace_steps(trace))
    assert cost.fixed_s == pytest.approx(1.0)
    assert cost.per_token_s == pytest.approx(0.01)
    assert cost.train_fraction == pytest.approx((1 + 0.5 + 1) / 3)
    assert cost.push_s == 0.5


def test_a_trace_replayed_with_the_fitted_learner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One engine, decode steps of 1 s: each step generates for 20 s; the update of 60 tokens
    # x 5/6 trained takes 1 + 0.5 s, the push 0.5 s: 22 s a step, synchronously.
    trace, metrics = write_run(tmp_path)
    args = ["-q", "sim", "run", "--steps", "3", "--trace", str(trace), "--gpus", "1",
            "--cost", "constant", "--step-s", "1", "--learner-metrics", str(metrics), "--json"]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_s_mean"] == pytest.approx(22.0)


def test_calibrate_engine_saves_its_measured_steps_for_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [StepPoint(1, 10, 0, 0.002), StepPoint(4, 80, 16, 0.005), StepPoint(2, 30, 0, 0.003)]
    measured = SimpleNamespace(steps=steps, makespan_s=1.0, preemptions=0)
    fake = SimpleNamespace(cost=fit(steps), calibration=measured, fit_step_error=0.0,
                           check=measured, predicted_makespan_s=1.0, makespan_error=0.0,
                           predicted_preemptions=0)  # fmt: skip
    monkeypatch.setattr(fidelity_command, "tiny_random_model", lambda: None)
    monkeypatch.setattr(fidelity_command, "fidelity", lambda model, threads: fake)
    path = tmp_path / "points.json"
    assert main(["-q", "sim", "calibrate", "--engine", "--save-points", str(path), "--json"]) == 0
    capsys.readouterr()
    assert load_points(path) == steps
