"""The eval command's pieces that need no model: data errors, progress bar, records, table."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from rstar2.commands.eval import load_problem_set
from rstar2.commands.eval_run import ProgressBar, print_table, trajectory_record
from rstar2.config import ConfigError
from rstar2.rollout.evaluation import EvalItem, EvalSummary
from tests.trajectories import trajectory


def load_args(data: Path, **kw: object) -> argparse.Namespace:
    base = {
        "data": str(data), "problem_field": "problem", "answer_field": "answer",
        "id_field": None, "skip_bad_rows": False, "limit": None,
    }  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_missing_data_file_is_a_clean_exit(tmp_path: Path):
    with pytest.raises(ConfigError, match="nope.jsonl"):
        load_problem_set(load_args(tmp_path / "nope.jsonl"))


def test_bad_row_names_the_line(tmp_path: Path):
    data = tmp_path / "p.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "x"}\n')
    with pytest.raises(ConfigError, match="line 2"):
        load_problem_set(load_args(data))
    assert len(load_problem_set(load_args(data, skip_bad_rows=True))) == 1


def test_limit_and_empty(tmp_path: Path):
    data = tmp_path / "p.jsonl"
    data.write_text("".join(f'{{"problem": "{i}+1", "answer": "{i + 1}"}}\n' for i in range(5)))
    assert len(load_problem_set(load_args(data, limit=2))) == 2
    with pytest.raises(ConfigError, match="at least one problem"):
        load_problem_set(load_args(data, limit=0))


class NotATerminal(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_progress_bar_off_a_terminal_prints_every_tenth():
    out = NotATerminal()
    bar = ProgressBar(20, out)
    for k in range(20):
        bar.advance(1.0 if k % 2 else 0.0)
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 11  # the first rollout, then each further tenth
    assert lines[-1].startswith("eval [" + "#" * 30 + "] 20/20 mean reward 0.500 ")


def test_progress_bar_of_a_long_run_prints_a_line_every_interval():
    # issue 34 row 2: with 10^6 samples a tenth takes hours; a line every 10 s says it is alive
    out, now = NotATerminal(), [0.0]
    bar = ProgressBar(10**6, out, interval_s=10.0, clock=lambda: now[0])
    for _ in range(100):  # a rollout every 0.5 s for 50 s
        now[0] += 0.5
        bar.advance(1.0)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 + 4  # the first rollout, then at 10.5, 20.5, 30.5, 40.5 s
    assert lines[-1] == "eval [" + "-" * 30 + "] 81/1000000 mean reward 1.000 2.0/s"


def test_record_and_table():
    traj = trajectory(
        prompt_id="a", sample=1, token_ids=[1, 2], loss_mask=[0, 1], logprobs=[0.0, -0.5],
        prompt_len=1, response_text="r", answer_tags=0, finish_reason="no_tool_call",
    )  # fmt: skip
    record = trajectory_record(traj, EvalItem("a", [1], "7"), "3 + 4")
    assert record["reference"] == "7" and record["loss_mask"] == [0, 1] and record["sample"] == 1
    # the fields a run's trajectory log has too (rstar2 view reads both)
    assert record["problem"] == "3 + 4" and record["answer"] is None
    assert record["conversation"] == [{"role": "assistant", "text": "r", "call": ""}]
    assert record["logprob"] == {"tokens": 1, "mean": -0.5, "min": -0.5}
    out = io.StringIO()
    print_table(EvalSummary(0.5, 2, 3, 10.0, 1.5, 0.25, {"answer": 6}), "t.jsonl", out)
    assert "pass@1 (avg over samples)   0.5000\n" in out.getvalue()
    assert "tool error rate             0.250\n" in out.getvalue()
