"""`rstar2 sandbox exec|bench`: line parsing, and the real commands run end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rstar2.commands.sandbox_exec import parse_line
from rstar2.wire import ExecRequest, ExecResult

CLI = [sys.executable, "-m", "rstar2.cli", "-q", "sandbox"]


def test_a_good_line_becomes_a_request() -> None:
    parsed = parse_line('{"id": "a", "code": "1", "stdin": "x", "timeout_s": 2}', 1)
    assert parsed == ExecRequest(id="a", code="1", stdin="x", timeout_s=2)


def test_input_is_an_alias_of_stdin() -> None:
    parsed = parse_line('{"id": "a", "code": "print(input())", "input": "x"}', 1)
    assert parsed == ExecRequest(id="a", code="print(input())", stdin="x")


@pytest.mark.parametrize(
    ("line", "rid", "message"),
    [
        ("{not json", "line-7", "invalid JSON"),
        ("[1, 2]", "line-7", "expected a JSON object"),
        ('{"id": "x"}', "x", '"code" must be a string'),
        ('{"id": 5, "code": "1", "timeout_s": "soon"}', "5", '"timeout_s" must be a number'),
        ('{"id": 6, "code": "1", "timeout_s": -5}', "6", '"timeout_s" must be > 0, got -5'),
        ('{"id": 8, "code": "1", "memory_mb": 0}', "8", '"memory_mb" must be >= 1, got 0'),
        ('{"id": "y", "code": "1", "user": "root"}', "y", "unknown field(s): user"),
        ('{"id": "z", "code": "1", "stdin": "a", "input": "b"}', "z", '"stdin" or its alias'),
        ('{"id": "w", "code": "1", "input": 3}', "w", '"stdin" must be a string'),
    ],
)
def test_a_bad_line_becomes_a_rejected_result(line: str, rid: str, message: str) -> None:
    parsed = parse_line(line, 7)
    assert isinstance(parsed, ExecResult)
    assert (parsed.id, parsed.status) == (rid, "rejected") and message in parsed.stderr


@pytest.mark.timeout(60)
def test_exec_answers_every_line_once_in_completion_order() -> None:
    lines = [
        json.dumps({"id": "slow", "code": "import time\ntime.sleep(0.8)\nprint('s')"}),
        "garbage",
        json.dumps({"id": "fast", "code": "print(input())", "stdin": "hi\n"}),
    ]
    done = subprocess.run(
        [*CLI, "exec", "--preload", ""], input="\n".join(lines) + "\n",
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["id"], r["status"]) for r in results] == [
        ("line-2", "rejected"),
        ("fast", "ok"),
        ("slow", "ok"),
    ]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_bench_prints_the_documented_keys() -> None:
    args = [
        "bench",
        "--json",
        "--seconds",
        "0.5",
        "--sweep",
        "1",
        "--burst",
        "50",
        "--concurrency",
        "2",
    ]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(done.stdout)
    for name in ("trivial", "numpy", "sympy"):
        assert {"rstar2_rps", "baseline_rps", "ratio", "p50_ms", "p99_ms"} <= set(out[name])
    burst = out["burst"]
    assert (burst["submitted"], burst["answered"], burst["duplicates"], burst["lost"]) == (
        50,
        50,
        0,
        0,
    )
    assert burst["peak_rss_mb"] > 0
