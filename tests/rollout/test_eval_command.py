"""End to end: `rstar2 eval` and `rstar2 chat` on the untrained tiny model with the real sandbox.

The model is untrained, so these check structure (keys, counts, masks, limits), not accuracy.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rstar2.finish_reason import FINISH_REASONS
from rstar2.model.tiny import init_model
from rstar2.model.tiny_config import TinyModelConfig
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


def vm_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def test_eval_of_a_million_samples_keeps_its_memory_and_stops_on_ctrl_c(
    model_dir: Path, tmp_path: Path
):
    """Issue 34 row 2: with --samples 1000000 nothing was written, the memory grew ~80 MB/s and
    SIGINT was ignored for over a minute. Now trajectories stream to --out, the memory stays
    flat while they do, and one SIGINT ends the run within 5 s, exit code 130, whole lines."""
    data = write_jsonl(generate_problems(TaskConfig(), "heldout")[:2], tmp_path / "p.jsonl")
    out = tmp_path / "trajs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2.cli", "-q", "eval", "--model", str(model_dir),
         "--data", str(data), "--samples", "1000000", "--max-tokens", "16",
         "--concurrency", "16", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 45
        while not (out.exists() and out.stat().st_size) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.2)
        assert out.stat().st_size, "no trajectory written in 45 s"
        first, rss = out.stat().st_size, []
        for _ in range(8):  # ~4 s of rollouts
            rss.append(vm_rss_mb(proc.pid))
            time.sleep(0.5)
        assert out.stat().st_size > first  # written as they finish
        proc.send_signal(signal.SIGINT)
        stopped = time.monotonic()
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - stopped
    finally:
        proc.kill()
    assert max(rss) - rss[0] < 40, rss  # it grew ~80 MB/s
    assert proc.returncode == 130 and took < 5, (proc.returncode, took, err[-2000:])
    text = out.read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())
    assert f"eval stopped: {out} holds the {len(text.splitlines())} of 2000000" in err


def test_eval_out_past_the_file_size_limit_is_one_line_and_whole_lines(
    model_dir: Path, tmp_path: Path
):
    """Issue 34 row 8: --out on a full disk mid-run gave a nested ExceptionGroup and left a cut
    line. A file size limit of 100 kB (ulimit -f: EFBIG, as ENOSPC) stands for the full disk."""
    data = write_jsonl(generate_problems(TaskConfig(), "heldout")[:2], tmp_path / "p.jsonl")
    out = tmp_path / "trajs.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "eval", "--model", str(model_dir),
         "--data", str(data), "--samples", "100", "--max-tokens", "16", "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000)),
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == [f"rstar2 eval: error: File too large: {out}"]
    text = out.read_text()
    assert text.endswith("\n") and all(json.loads(line) for line in text.splitlines())
    assert f"eval stopped: {out} holds the {len(text.splitlines())} of 200" in proc.stderr


def test_chat_on_the_tiny_model(model_dir: Path, tmp_path: Path):
    proc = rstar2(
        "chat", "--model", str(model_dir), "--max-tokens", "48", "--temperature", "0",
        "What is 37 * 91?", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("=== assistant (turn 1) ===\n")
    assert "=== final answer ===\n" in proc.stdout and "\nfinish: " in proc.stdout
