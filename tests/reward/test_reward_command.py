"""`rstar2 reward verify`: line parsing directly, and the real command on stdin/stdout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rstar2.commands.reward import parse_line


def test_parse_line_accepts_good_rows_and_numeric_answers() -> None:
    assert parse_line('{"id": 1, "response": "r", "answer": "2"}') == (1, "r", "2")
    assert parse_line('{"id": "a", "response": "r", "answer": 42}') == ("a", "r", "42")


@pytest.mark.parametrize(
    ("line", "row_id", "message"),
    [
        ("not json", None, "invalid JSON"),
        ("[1, 2]", None, "JSON object"),
        ('{"id": 3, "answer": "1"}', 3, '"response"'),
        ('{"id": 4, "response": 5, "answer": "1"}', 4, '"response"'),
        ('{"id": 5, "response": "r", "answer": ""}', 5, '"answer"'),
        ('{"id": 6, "response": "r", "answer": true}', 6, '"answer"'),
    ],
)
def test_parse_line_errors(line: str, row_id: object, message: str) -> None:
    row = parse_line(line)
    assert isinstance(row, dict)
    assert row["id"] == row_id and row["status"] == "error" and row["reward"] == 0.0
    assert message in row["message"]


@pytest.mark.slow
def test_verify_command_end_to_end() -> None:
    lines = [
        {"id": 1, "response": "<answer>\\boxed{1,000}</answer>", "answer": "1000"},
        {"id": 2, "response": "\\boxed{2\\sqrt{2}}", "answer": "\\sqrt{8}"},
        "this line is not JSON",
        {"id": 3, "response": "\\boxed{5}", "answer": "6"},
        {"id": 4, "response": "no answer", "answer": "6"},
        {"id": 5, "response": "\\boxed{9^{9^{9^{9}}}}", "answer": "1"},
    ]
    stdin = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    proc = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "-q", "reward", "verify", "--timeout", "0.5"],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    got = [(r["id"], r["reward"], r["extracted"], r["status"]) for r in rows]
    assert got == [
        (1, 1.0, "1,000", "ok"),
        (2, 1.0, "2\\sqrt{2}", "ok"),
        (None, 0.0, None, "error"),
        (3, 0.0, "5", "ok"),
        (4, 0.0, None, "no_answer"),
        (5, 0.0, "9^{9^{9^{9}}}", "timeout"),
    ]
    assert "invalid JSON" in rows[2]["message"]
