"""scripts/accuracy_by_kind.py on a hand-made trajectories.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.script_module import load_script

by_kind = load_script("accuracy_by_kind")

PACKS = "Ben buys 12 packs of {} pens. How many pens does Ben have now?"
SHARED = "84 apples are shared equally among {} friends, and Ana gets one share. Then Ana " \
    "loses 3. How many apples does Ana have now?"  # fmt: skip


def _row(source: str, step: int, problem: str, reward: float) -> dict:
    return {"source": source, "step": step, "problem": problem, "reward": reward}


def test_pass_at_1_and_k_per_kind_and_evaluation(tmp_path: Path, capsys) -> None:
    rows = [
        # step 0: packs problem A 1 of 2 correct, B 0 of 2; shared: none
        _row("validation", 0, PACKS.format(40), 1.0), _row("validation", 0, PACKS.format(40), 0.0),
        _row("validation", 0, PACKS.format(41), 0.0), _row("validation", 0, PACKS.format(41), 0.0),
        _row("validation", 0, SHARED.format(5), 0.0), _row("validation", 0, SHARED.format(5), 0.0),
        # step 20: packs both right on one sample each
        _row("validation", 20, PACKS.format(40), 1.0), _row("validation", 20, PACKS.format(40), 0.0),
        _row("validation", 20, PACKS.format(41), 1.0), _row("validation", 20, PACKS.format(41), 0.0),
        _row("train", 3, PACKS.format(40), 1.0),  # training rollouts are not evaluations
        _row("test", 0, "What is 3 + 4?", 1.0),
    ]  # fmt: skip
    table = by_kind.by_kind(rows, "validation")
    assert table == {
        ("validation", 0): {"{a} * {b}, 0 events": (2, 0.25, 0.5),
                            "{a} // {b}, 1 event": (1, 0.0, 0.0)},
        ("validation", 20): {"{a} * {b}, 0 events": (2, 0.5, 1.0)},
    }  # fmt: skip
    assert by_kind.by_kind(rows, "test") == {("test", 0): {"not a story": (1, 1.0, 1.0)}}
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert by_kind.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "| {a} * {b}, 0 events | 2 | 25 / 50 | 50 / 100 |" in out
    assert "| {a} // {b}, 1 event | 1 | 0 / 0 | - |" in out


@pytest.mark.parametrize("make", [False, True])
def test_a_run_without_evaluations_is_one_line(tmp_path: Path, capsys, make: bool) -> None:
    if make:
        (tmp_path / "trajectories.jsonl").write_text(json.dumps(_row("train", 1, "x", 0)) + "\n")
    assert by_kind.main([str(tmp_path)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _call(code: str) -> list[dict]:
    call = json.dumps({"name": "t", "arguments": {"code": code}})
    return [{"role": "assistant", "text": "", "call": call, "code": code},
            {"role": "tool", "text": "Tool call success\n1\n", "failed": False}]  # fmt: skip


def test_first_call_shapes_name_the_numbers_by_their_place_in_the_problem(
    tmp_path: Path, capsys
) -> None:
    problem = SHARED.format(12)  # numbers 84, 12, 3: a, b, c
    assert by_kind.call_shape(problem, _call("print(84 // 12 - 3)")) == "print(a // b - c)"
    assert by_kind.call_shape(problem, _call("print(12 + 7)")) == "print(b + N)"
    assert by_kind.call_shape(problem, []) == "<no call>"
    bad = [{"role": "assistant", "text": "", "call": "{not json", "call_error": "invalid JSON"}]
    assert by_kind.call_shape(problem, bad) == "<invalid call>"
    rows = [
        {**_row("test", 0, problem, 0.0), "conversation": _call("print(12 + 3)")},
        {**_row("test", 0, problem, 0.0), "conversation": _call("print(12 + 3)")},
        {**_row("test", 0, problem, 1.0), "conversation": _call("print(84 // 12 - 3)")},
        {**_row("test", 60, problem, 1.0), "conversation": _call("print(84 // 12 - 3)")},
    ]
    shapes = by_kind.call_shapes(rows, "test", None)  # the first evaluation: step 0
    assert shapes == {"{a} // {b}, 1 event": {"print(b + c)": 2, "print(a // b - c)": 1}}
    assert by_kind.call_shapes(rows, "test", 60)["{a} // {b}, 1 event"] == {"print(a // b - c)": 1}
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert by_kind.main([str(run), "--source", "test", "--calls"]) == 0
    out = capsys.readouterr().out
    assert "- {a} // {b}, 1 event (3 samples): `print(b + c)` 67%, `print(a // b - c)` 33%" in out
    assert by_kind.main([str(run), "--source", "test", "--calls", "--step", "7"]) == 2
