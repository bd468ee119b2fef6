"""A running `rstar2 view` over a small recorded run (and an eval file), for the page tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.view.run_files import write_run


@dataclass(frozen=True)
class Viewer:
    url: str
    run: Path
    """The run directory it shows (source 0; an eval file is source 1)."""


def start_view(*args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`rstar2 view ARGS --port 0` in a child process, and the address it prints."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2.cli", "view", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("rstar2 view: http://"):
        proc.kill()
        pytest.fail(f"rstar2 view did not start: {line}{proc.communicate()[1][-2000:]}")
    return proc, line.split()[2]


def eval_file(path: Path) -> Path:
    """An `rstar2 eval --out` file of an older rstar2 (response text only, no conversation)."""
    records = [
        {
            "prompt_id": "0",
            "sample": s,
            "response_text": f"<answer>\\boxed{{{42 - s}}}</answer>",
            "reward": float(s == 0),
            "reference": "42",
            "finish_reason": "answer",
            "turns": 1,
            "tool_calls": 0,
            "tool_errors": 0,
            "tool_timeouts": 0,
        }  # fmt: skip
        for s in range(2)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    tmp = tmp_path_factory.mktemp("view")
    run = write_run(tmp / "run", finished=False)
    proc, url = start_view(str(run), str(eval_file(tmp / "eval.jsonl")))
    try:
        yield Viewer(url, run)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
