"""scripts/async_compare.py's figures from a run directory, on a hand-made run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_module import load_script

compare = load_script("async_compare")


def fake_run(path: Path) -> Path:
    rows = [
        {"step": 0, "stage": "sft", "heldout_accuracy": 0.2},
        {"step": 1, "stage": "rl1", "step_s": 2.0, "staleness_mean": 0.0},
        {"step": 2, "stage": "rl1", "step_s": 3.0, "heldout_accuracy": 0.3, "staleness_mean": 1.0},
        {"step": 3, "stage": "rl1", "step_s": 1.0, "staleness_mean": 1.0},
        {"step": 4, "stage": "rl1", "step_s": 2.0, "heldout_accuracy": 0.5, "staleness_mean": 0.5},
        {"step": 4, "stage": "final", "test_accuracy": 0.45},
    ]
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "config.json").write_text(json.dumps({"prompts_per_step": 2, "rollouts_per_prompt": 4}))
    summary = {"evaluations": {"test_final": {"accuracy": 0.45, "ci95": [0.4, 0.5]},
                               "validation_final": {"accuracy": 0.5}}}  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_time_to_target_is_the_rl_time_until_the_first_evaluation_reaching_it(
    tmp_path: Path,
) -> None:
    rows = compare.rl_rows(fake_run(tmp_path / "run") / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert compare.time_to_target(rows, 0.3) == 5.0
    assert compare.time_to_target(rows, 0.4) == 8.0
    assert compare.time_to_target(rows, 0.6) is None


def test_run_figures(tmp_path: Path) -> None:
    fig = compare.run_figures(fake_run(tmp_path / "run"))
    assert (fig["steps"], fig["rl_s"], fig["step_s_mean"]) == (4, 8.0, 2.0)
    assert fig["completions_per_s"] == pytest.approx(4 * 8 / 8.0)
    assert (fig["test_accuracy"], fig["validation_accuracy"]) == (0.45, 0.5)
    assert fig["staleness_mean"] == pytest.approx(2.5 / 4)
    assert compare.relative_error(2.2, 2.0) == pytest.approx(0.1)


def test_accuracy_at_step_is_the_evaluation_of_that_step(tmp_path: Path) -> None:
    rows = compare.rl_rows(fake_run(tmp_path / "run") / "metrics.jsonl")
    assert compare.accuracy_at_step(rows, 2) == 0.3
    assert compare.accuracy_at_step(rows, 3) is None  # no evaluation at step 3


def _fig(step_s: float, rl_s: float, test: float | None, at_sync: float | None,
         reach: float | None) -> dict[str, object]:  # fmt: skip
    return {"step_s_mean": step_s, "rl_s": rl_s, "test_accuracy": test,
            "validation_at_sync_steps": at_sync, "time_to_sync_final_s": reach}  # fmt: skip


def test_aggregate_over_seeds() -> None:
    results = {
        "seed-0/k0": _fig(2.0, 200.0, 0.30, 0.35, 180.0),  # first reached before its end
        "seed-0/k1": _fig(1.0, 150.0, 0.40, 0.33, 90.0),  # reached in 90 s: 2x
        "seed-1/k0": _fig(4.0, 400.0, 0.50, 0.45, 400.0),
        "seed-1/k1": _fig(2.0, 300.0, 0.20, None, None),  # never reached
    }
    k0, k1 = compare.aggregate(results, [0, 1], [0, 1])
    assert k0 == {
        "k": 0, "seeds": 2, "step_s_mean": 3.0, "step_speedup": 1.0,
        "test_accuracy_mean": pytest.approx(0.40), "test_accuracy_sd": pytest.approx(0.1414, abs=1e-4),
        "validation_at_sync_steps_mean": pytest.approx(0.40), "reached_sync_final": 2,
        "time_to_sync_speedup": 1.0,
    }  # fmt: skip
    assert k1["step_speedup"] == 2.0 and k1["step_s_mean"] == 1.5
    assert k1["test_accuracy_mean"] == pytest.approx(0.30)
    assert k1["validation_at_sync_steps_mean"] == 0.33  # the seed without one is left out
    assert (k1["reached_sync_final"], k1["time_to_sync_speedup"]) == (1, 2.0)
