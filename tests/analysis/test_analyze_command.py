"""`rstar2 analyze` end to end on a real `rstar2 eval` output: an untrained small embedded
model writes the trajectories, then analyze teacher-forces them through the same model (as the
comparison model too). The model is untrained, so this checks the plumbing and the figures'
consistency with the trajectories file, not what the entropies say."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rstar2.cli import main
from rstar2.model.tiny import init_model
from rstar2.model.tiny_config import TinyModelConfig
from rstar2.tasks.arithmetic import TaskConfig, generate_problems, write_jsonl

pytestmark = pytest.mark.slow

SMALL = TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                        intermediate_size=64, corpus_problems=300)  # fmt: skip
KEYS = ("tokens", "high_entropy_tokens", "reflection_fraction", "forking_fraction",
        "top_reflection_tokens", "top_forking_tokens", "entropy_by_distance")  # fmt: skip


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model directory, eval trajectories file)."""
    root = tmp_path_factory.mktemp("analyze")
    model = init_model(root / "model", SMALL)
    data = write_jsonl(generate_problems(TaskConfig(), "heldout")[:3], root / "p.jsonl")
    out = root / "trajs.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "-q", "eval", "--model", str(model), "--data",
         str(data), "--samples", "2", "--max-tokens", "40", "--temperature", "1", "--out",
         str(out)],
        capture_output=True, text=True, timeout=240, cwd=root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return model, out


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def test_analyze_an_eval_output_against_itself(
    evaluated: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, trajs = evaluated
    out = tmp_path / "an"
    argv = ["analyze", str(trajs), "--model", str(model), "--compare-model", str(model),
            "--out", str(out), "--json", "--batch-tokens", "100"]  # fmt: skip
    assert exit_code(argv) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert printed == json.loads((out / "analysis.json").read_text())
    assert "teacher-forced" in captured.err  # the progress line
    records = [json.loads(line) for line in trajs.read_text().splitlines()]
    generated = sum(sum(r["loss_mask"]) for r in records)
    for report in (printed, printed["compare"]):
        assert all(key in report for key in KEYS)
        assert report["tokens"] == generated
        assert report["high_entropy_tokens"] == math.ceil(0.2 * generated)
        assert report["reflection_fraction"] + report["forking_fraction"] == pytest.approx(1)
        # the model that sampled them at temperature 1: teacher forcing agrees with the engine
        assert report["recorded_logprob_gap"] < 1e-3
    assert printed["trajectories"] == len(records)
    assert printed["change"]["high_entropy_overlap"] == 1.0
    assert printed["change"]["mean_entropy"] == pytest.approx(0.0, abs=1e-6)
    for png in ("entropy_by_distance.png", "comparison.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_prints_a_table(
    evaluated: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, trajs = evaluated
    assert exit_code(["analyze", str(trajs), "--model", str(model), "--top", "0.5",
                      "--window", "4", "--out", str(tmp_path / "an")]) == 0  # fmt: skip
    table = capsys.readouterr().out
    assert "high-entropy (top 50%)" in table and "reflection share (d < 4)" in table
    assert not (tmp_path / "an" / "comparison.png").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--top", "0"], "--top"), (["--top", "1.5"], "--top"), (["--window", "0"], "--window")],
)
def test_a_bad_flag_is_one_line(
    evaluated: tuple[Path, Path], capsys: pytest.CaptureFixture[str], extra: list[str],
    message: str,
) -> None:  # fmt: skip
    model, trajs = evaluated
    assert exit_code(["analyze", str(trajs), "--model", str(model), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "message"), [(None, "No such file"), ("{", "t.jsonl:1: not JSON")]
)
def test_a_missing_or_broken_file_is_one_line(
    evaluated: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    text: str | None, message: str,
) -> None:  # fmt: skip
    model, _ = evaluated
    path = tmp_path / "t.jsonl"
    if text is not None:
        path.write_text(text + "\n")
    assert exit_code(["analyze", str(path), "--model", str(model)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "t.jsonl" in err and len(err.splitlines()) == 1


def test_a_file_without_tokens_is_one_line(
    evaluated: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, _ = evaluated
    trace = tmp_path / "rollout_trace.jsonl"
    trace.write_text(json.dumps({"step": 1, "prompt_id": "3", "turns": []}) + "\n")
    assert exit_code(["analyze", str(trace), "--model", str(model)]) == 2
    err = capsys.readouterr().err.strip()
    assert "rollout_trace.jsonl:1" in err and "rollout_trace_tokens" in err
    assert len(err.splitlines()) == 1


def test_token_ids_outside_the_vocabulary_are_one_line(
    evaluated: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Trajectories of another tokenizer (an id the model does not have) are bad input."""
    model, _ = evaluated
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"token_ids": [1, 2, 999_999], "loss_mask": [0, 1, 1]}) + "\n")
    assert exit_code(["analyze", str(path), "--model", str(model)]) == 2
    err = capsys.readouterr().err.strip()
    assert "vocabulary" in err and "999999" in err and len(err.splitlines()) == 1
