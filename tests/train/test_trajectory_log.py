"""The trajectory log: which batches the controller marks for recording, and the lines."""

from __future__ import annotations

import json
from pathlib import Path

from rstar2.format_markers import RESPONSE_PREFIX, RESPONSE_SUFFIX, TOOL_CALL, TOOL_CALL_END
from rstar2.problem import Problem
from rstar2.train.controller import Controller
from rstar2.train.run_commands import RollOut, Update
from rstar2.train.trajectory_log import TRAJECTORY_FILE, TrajectoryLog, recorded_step
from rstar2.wire import TrajectoryResult
from tests.train.test_controller import HELDOUT, PROBLEMS, Driver, encode, make_config
from tests.trajectories import trajectory


def test_step_one_and_every_kth_are_recorded() -> None:
    assert [s for s in range(1, 11) if recorded_step(s, 4)] == [1, 4, 8]
    assert not any(recorded_step(s, 0) for s in range(1, 11))


def test_the_controller_marks_the_recorded_updates_and_every_evaluation() -> None:
    cfg = make_config(record_every=2, eval_every=2, stages=[{"name": "rl1", "steps": 3}])
    controller = Controller(cfg, PROBLEMS, HELDOUT, encode)
    commands = Driver(controller).run(controller.start(resume=False))
    updates = [c for c in commands if isinstance(c, Update)]
    assert [(u.step, u.record is not None) for u in updates] == [(1, True), (2, True), (3, False)]
    first = updates[0].record
    assert first is not None and first.source == "train" and first.stage == "rl1"
    tasks = next(c for c in commands if isinstance(c, RollOut) and c.kind == "train").tasks
    assert [first.problems[t.prompt].answer for t in tasks] == [t.answer for t in tasks]
    evals = [c.record for c in commands if isinstance(c, RollOut) and c.kind == "eval"]
    assert [(r.source, r.stage) for r in evals if r] == [
        ("validation", "sft"),
        ("validation", "rl1"),
        ("validation", "final"),
    ]
    assert all(r is not None and r.problems == tuple(HELDOUT) for r in evals)


def test_evaluations_are_not_marked_without_record_evaluations() -> None:
    cfg = make_config(record_evaluations=False, record_every=0)
    controller = Controller(cfg, PROBLEMS, HELDOUT, encode)
    commands = Driver(controller).run(controller.start(resume=False))
    assert all(c.record is None for c in commands if isinstance(c, RollOut | Update))


def result(prompt: int, sample: int, text: str, reward: float) -> TrajectoryResult:
    return TrajectoryResult(
        traj_id=f"train/3/{prompt}/{sample}",
        step=3,
        kind="train",
        answer="42",
        trajectory=trajectory(
            prompt_id=f"train/3/{prompt}",
            sample=sample,
            token_ids=[1, 2, 3, 4],
            loss_mask=[0, 1, 0, 1],
            logprobs=[0.0, -0.5, 0.0, -1.5],
            prompt_len=1,
            response_text=text,
            turns=2,
            tool_calls=1,
            tool_errors=1,
            reward=reward,
            tool_latencies=[0.01234567, 0.0],
        ),
        prompt=prompt,
    )


def test_a_line_holds_the_conversation_the_answer_and_what_trained(tmp_path: Path) -> None:
    text = (
        f"{TOOL_CALL}{{}}{TOOL_CALL_END}{RESPONSE_PREFIX}Tool call failure\nerror"
        f"{RESPONSE_SUFFIX}<answer>\\boxed{{42}}</answer>"
    )
    log = TrajectoryLog(tmp_path)
    problems = (Problem("a", "6 * 7", "42"), Problem("b", "40 + 2", "42"))
    batch = [result(1, 0, text, 1.0), result(0, 1, "no", 0.0), result(0, 0, text, 1.0)]
    assert (
        log.write(
            batch, problems, source="train", step=3, stage="rl1", advantages={"train/3/0/0": 0.5}
        )
        == 3
    )
    log.close()
    lines = [json.loads(line) for line in (tmp_path / TRAJECTORY_FILE).read_text().splitlines()]
    assert [(r["group"], r["sample"]) for r in lines] == [(0, 0), (0, 1), (1, 0)]
    first = lines[0]
    assert first["problem"] == "6 * 7" and lines[2]["problem"] == "40 + 2"
    assert first["answer"] == "42" and first["reference"] == "42" and first["reward"] == 1.0
    assert [t["role"] for t in first["conversation"]] == ["assistant", "tool", "assistant"]
    assert first["conversation"][1]["failed"] is True
    assert first["kept"] is True and first["advantage"] == 0.5
    assert lines[1]["kept"] is False and lines[1]["advantage"] is None
    assert lines[1]["answer"] is None
    assert first["logprob"] == {"tokens": 2, "mean": -1.0, "min": -1.5}
    assert first["tool_latencies"] == [0.0123, 0.0]
    assert (first["source"], first["step"], first["stage"]) == ("train", 3, "rl1")


def test_an_evaluation_line_has_no_kept_and_resume_drops_later_steps(tmp_path: Path) -> None:
    log = TrajectoryLog(tmp_path)
    problems = (Problem("a", "6 * 7", "42"),)
    for step in (0, 2, 4):
        log.write([result(0, 0, "x", 0.0)], problems, source="validation", step=step, stage="s")
    log.close()
    log = TrajectoryLog(tmp_path, resume_step=2)
    log.close()
    lines = [json.loads(line) for line in (tmp_path / TRAJECTORY_FILE).read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 2]
    assert "kept" not in lines[0]
    TrajectoryLog(tmp_path).close()  # a fresh run starts the file empty
    assert (tmp_path / TRAJECTORY_FILE).read_text() == ""
