"""A small recorded run, written as `rstar2 train` writes one: its config, metrics rows and
trajectory log (through the real `TrajectoryLog`), for the viewer's tests."""

from __future__ import annotations

import json
from pathlib import Path

from rstar2.format_markers import IM_END, RESPONSE_PREFIX, RESPONSE_SUFFIX, TOOL_CALL, TOOL_CALL_END
from rstar2.problem import Problem
from rstar2.train.trajectory_log import TrajectoryLog
from rstar2.wire import TrajectoryResult
from tests.trajectories import trajectory

PROBLEMS = (Problem("a", "What is 6 * 7?", "42"), Problem("b", "Compute 40 + 3.", "43"))
STAGES = [{"name": "rl1", "steps": 5, "max_response_tokens": 160, "max_turns": 4}]


def call(code: str) -> str:
    body = json.dumps({"name": "execute_python_code_with_standard_io", "arguments": {"code": code}})
    return f"{TOOL_CALL}\n{body}\n{TOOL_CALL_END}"


def solved(value: str) -> str:
    """A response that runs the code once and answers `value`."""
    return (
        f"I will compute it.\n{call('print(6*7)')}{RESPONSE_PREFIX}Tool call success\n{value}\n"
        f"{RESPONSE_SUFFIX}<answer>The answer is \\boxed{{{value}}}</answer>{IM_END}"
    )


FAILED_THEN_SOLVED = (
    f"Let me try.\n{call('print(6*)')}{RESPONSE_PREFIX}Tool call failure\nerror\n"
    f"SyntaxError at line 1: invalid syntax{RESPONSE_SUFFIX}Fix it.\n{call('print(6*7)')}"
    f"{RESPONSE_PREFIX}Tool call success\n42\n{RESPONSE_SUFFIX}<answer>\\boxed{{42}}</answer>{IM_END}"
)
CUT = f"I will compute it.\n{call('print(6*7)')}{RESPONSE_PREFIX}Tool call succ"


def result(kind: str, step: int, prompt: int, sample: int) -> TrajectoryResult:
    """Sample 0 solves, 1 solves after a failed call, 2 answers wrong, 3 is cut."""
    reference = PROBLEMS[prompt].answer
    text, reward, finish, errors = {
        0: (solved(reference), 1.0, "answer", 0),
        1: (FAILED_THEN_SOLVED, 1.0 if reference == "42" else 0.0, "answer", 1),
        2: (solved("7"), 0.0, "answer", 0),
        3: (CUT, 0.0, "budget", 0),
    }[sample % 4]
    return TrajectoryResult(
        traj_id=f"{kind}/{step}/{prompt}/{sample}",
        step=step,
        kind=kind,
        answer=reference,
        trajectory=trajectory(
            prompt_id=f"{kind}/{step}/{prompt}",
            sample=sample,
            token_ids=[1] * 30,
            loss_mask=[0] * 10 + [1] * 20,
            logprobs=[0.0] * 10 + [-0.25] * 20,
            prompt_len=10,
            response_text=text,
            turns=2 + (sample % 4 == 1),
            tool_calls=1 + (sample % 4 == 1),
            tool_errors=errors,
            finish_reason=finish,
            reward=reward,
            tool_latencies=[0.01, 0.0],
            policy_versions=[step - 1, step - 1],
        ),
        prompt=prompt,
    )


def write_run(run: Path, *, finished: bool = True) -> Path:
    """The run directory of a 5-step run recording steps 1 and 5 and its evaluations."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text(json.dumps({"seed": 0, "record_every": 5, "stages": STAGES}))
    rows: list[dict[str, object]] = [
        {"step": 0, "stage": "sft", "heldout_accuracy": 0.25, "heldout_ci95": [0.1, 0.4]}
    ]
    for step in range(1, 6):
        rows.append({
            "step": step, "stage": "rl1", "reward_mean": 0.1 * step,
            "response_tokens_mean": 80.0 + step, "tool_calls_mean": 1.2,
            "tool_error_ratio_correct": 0.3, "correct_with_failed_call": 0.5,
            "time_gen_s": 1.0, "time_tool_s": 0.2, "time_reward_s": 0.1,
            "time_learner_s": 0.3, "time_sync_s": 0.05, "step_s": 1.7,
        })  # fmt: skip
    log = TrajectoryLog(run)
    batch = lambda kind, step: [result(kind, step, p, s) for p in range(2) for s in range(4)]  # noqa: E731
    log.write(batch("eval", 0), PROBLEMS, source="validation", step=0, stage="sft")
    for step in (1, 5):
        kept = {f"train/{step}/0/0": 0.5, f"train/{step}/0/2": -0.5}
        log.write(batch("train", step), PROBLEMS, source="train", step=step, stage="rl1",
                  advantages=kept)  # fmt: skip
    if finished:
        log.write(batch("eval", 5), PROBLEMS, source="validation", step=5, stage="final")
        rows.append(
            {"step": 5, "stage": "final", "heldout_accuracy": 0.5, "heldout_ci95": [0.3, 0.7]}
        )
        (run / "summary.json").write_text(json.dumps({"steps": 5}))
    log.close()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run
