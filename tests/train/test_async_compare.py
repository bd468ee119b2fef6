"""scripts/async_compare.py's figures from a run directory, on a hand-made run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "async_compare.py"
spec = importlib.util.spec_from_file_location("async_compare", SCRIPT)
assert spec is not None and spec.loader is not None
compare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare)


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
