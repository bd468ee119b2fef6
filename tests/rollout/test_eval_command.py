"""End to end: `rstar2 eval` and `rstar2 chat` on the untrained tiny model with the real sandbox.

The model is untrained, so these check structure (keys, counts, masks, limits), not accuracy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rstar2.finish_reason import FINISH_REASONS
from rstar2.model import TinyModelConfig, init_model
from rstar2.tasks.arithmetic import TaskConfig, generate_problems, write_jsonl

pytestmark = pytest.mark.slow

MAX_TOKENS = 96


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("tiny") / "model", TinyModelConfig())


def rstar2(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "-q", *args],
        capture_output=True, text=True, timeout=240, cwd=cwd,
    )  # fmt: skip


def test_eval_on_the_tiny_model(model_dir: Path, tmp_path: Path):
    data = write_jsonl(generate_problems(TaskConfig(), "heldout")[:4], tmp_path / "p.jsonl")
    out = tmp_path / "trajs.jsonl"
    proc = rstar2(
        "eval", "--model", str(model_dir), "--data", str(data), "--samples", "2",
        "--max-tokens", str(MAX_TOKENS), "--out", str(out), "--json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["samples"], summary["problems"]) == (2, 4)
    for key in ("pass_at_1", "mean_response_tokens", "tool_calls_per_problem", "tool_error_rate"):
        assert isinstance(summary[key], float | int) and summary[key] >= 0
    assert 0 <= summary["pass_at_1"] <= 1 and 0 < summary["mean_response_tokens"] <= MAX_TOKENS
    assert "eval [" in proc.stderr  # the progress bar
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted((r["prompt_id"], r["sample"]) for r in records) == sorted(
        (pid, k) for pid in {r["prompt_id"] for r in records} for k in (0, 1)
    )
    assert len(records) == 8
    for r in records:
        n = len(r["token_ids"])
        assert len(r["loss_mask"]) == n == len(r["logprobs"])
        assert r["loss_mask"][: r["prompt_len"]] == [0] * r["prompt_len"]
        assert 0 < n - r["prompt_len"] <= MAX_TOKENS
        assert r["finish_reason"] in FINISH_REASONS and r["reward"] in (0.0, 1.0)
        assert r["turns"] >= 1 and r["reference"]


def test_eval_scores_and_counts_a_problem_over_the_context(model_dir: Path, tmp_path: Path):
    """One problem far over the tiny model's 1024-token context among normal ones: the run
    finishes (rc 0), warns naming the problem, scores it 0 and counts it."""
    rows = [
        {"problem": p.problem, "answer": p.answer}
        for p in generate_problems(TaskConfig(), "heldout")[:3]
    ]
    rows.insert(1, {"problem": "What is 1 + 1? " * 400, "answer": "2"})  # line 2
    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "trajs.jsonl"
    proc = rstar2(
        "eval", "--model", str(model_dir), "--data", str(data), "--samples", "2",
        "--max-tokens", "16", "--out", str(out), "--json", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"problem 2 of {data}: its prompt of" in proc.stderr and "prompt_too_long" in proc.stderr
    summary = json.loads(proc.stdout)
    assert (summary["problems"], summary["prompts_too_long"]) == (4, 1)
    assert summary["finish_reasons"]["prompt_too_long"] == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 8
    long = [r for r in records if r["prompt_id"] == "2"]
    assert [r["finish_reason"] for r in long] == ["prompt_too_long"] * 2
    assert all(r["reward"] == 0.0 and r["turns"] == 0 and r["prompt_len"] > 1024 for r in long)


def test_chat_on_the_tiny_model(model_dir: Path, tmp_path: Path):
    proc = rstar2(
        "chat", "--model", str(model_dir), "--max-tokens", "48", "--temperature", "0",
        "What is 37 * 91?", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("=== assistant (turn 1) ===\n")
    assert "=== final answer ===\n" in proc.stdout and "\nfinish: " in proc.stdout
