"""What `rstar2 view` reads: sets of a run's trajectory log, rows, a rollout, two sets matched,
a run in progress, and the paths it refuses."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rstar2.config import UsageError
from rstar2.view.records import compare, open_source
from tests.view.run_files import write_run


def test_a_run_falls_into_steps_and_evaluations(tmp_path: Path) -> None:
    source = open_source(0, write_run(tmp_path / "run"))
    info = source.info()
    assert info["status"] == "finished" and info["total_steps"] == 5
    assert [s["label"] for s in info["sets"]] == [
        "validation at step 0 (sft)",
        "step 1 (rl1)",
        "step 5 (rl1)",
        "validation at step 5 (final)",
    ]
    step1 = info["sets"][1]
    assert (step1["rollouts"], step1["correct"], step1["with_failed_calls"]) == (8, 3, 2)
    assert [r["stage"] for r in info["metrics"]][:2] == ["sft", "rl1"]


def test_rows_and_a_rollout_with_its_group(tmp_path: Path) -> None:
    source = open_source(0, write_run(tmp_path / "run"))
    rows = source.rows("0.1")
    assert [(r["group"], r["sample"], r["correct"], r["kept"]) for r in rows[:4]] == [
        (0, 0, True, True),
        (0, 1, True, False),
        (0, 2, False, True),
        (0, 3, False, False),
    ]
    assert rows[3]["truncated"] and rows[1]["failed_calls"] == 1
    got = source.rollout("0.1", 1)
    assert [t["role"] for t in got["record"]["conversation"]] == [
        "assistant", "tool", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert [r["i"] for r in got["group"]] == [0, 1, 2, 3]
    with pytest.raises(KeyError):
        source.rollout("0.1", 99)


def test_two_sets_are_matched_by_problem(tmp_path: Path) -> None:
    source = open_source(0, write_run(tmp_path / "run"))
    both = compare(source.rows("0.0"), source.rows("0.3"))
    assert [p["reference"] for p in both] == ["42", "43"]
    assert both[0]["a_accuracy"] == 0.5 and len(both[0]["b"]) == 4


def test_a_run_in_progress_is_followed_line_by_line(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", finished=False)
    source = open_source(0, run)
    assert source.info()["status"] == "running" and len(source.sets) == 3
    log = run / "trajectories.jsonl"
    line = log.read_text().splitlines()[0]
    record = {**json.loads(line), "source": "validation", "step": 5, "stage": "final"}
    half = json.dumps(record)
    with log.open("a") as f:
        f.write(half[:40])  # a line being written is not read yet
    source.refresh()
    assert len(source.sets) == 3
    with log.open("a") as f:
        f.write(half[40:] + "\n")
    source.refresh()
    assert [s.label for s in source.sets.values()][-1] == "validation at step 5 (final)"


def test_an_eval_file_is_one_set(tmp_path: Path) -> None:
    path = tmp_path / "eval.jsonl"
    record = {"prompt_id": "7", "sample": 0, "response_text": "<answer>\\boxed{3}</answer>",
              "reward": 1.0, "reference": "3", "finish_reason": "answer"}  # fmt: skip
    path.write_text(json.dumps(record) + "\n")
    source = open_source(1, path)
    assert [s["label"] for s in source.info()["sets"]] == ["eval.jsonl"]
    got = source.rollout("1.0", 0)["record"]  # an older file: computed from response_text
    assert got["answer"] == "3" and got["conversation"][0]["role"] == "assistant"


def _missing(p: Path) -> Path:
    return p


def _empty_dir(p: Path) -> Path:
    p.mkdir()
    return p


def _not_jsonl(p: Path) -> Path:
    p.write_text("not json\n")
    return p


def _half_written_config(p: Path) -> Path:
    p.mkdir()
    (p / "config.json").write_text('{"se')
    return p


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_missing, "no such run directory or trajectory file"),
        (_empty_dir, "not a run directory (no config.json"),
        (_not_jsonl, "not a trajectory file"),
        (_half_written_config, "not JSON"),
    ],
)
def test_paths_it_cannot_show_are_one_line(
    tmp_path: Path, make: Callable[[Path], Path], message: str
) -> None:
    with pytest.raises(UsageError) as e:
        open_source(0, make(tmp_path / "x"))
    assert message in str(e.value) and "\n" not in str(e.value)
