"""The RL controller on fakes: stages, the solved-filter, evaluation and checkpoint cadence, resume.

A `Driver` answers the controller's commands the way the learner actor would, without a graph:
a `RollOut` comes back as one scored result per task (rewards from a given function, in
reverse order, since the graph returns them in finishing order), an `Update` with fixed
metrics, a `PushWeights` with fixed byte counts; every command takes one tick of a fake clock.
"""

from __future__ import annotations

import logging
import pickle
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from rstar2.config import from_dict
from rstar2.problem import Problem
from rstar2.train.config import TrainConfig
from rstar2.train.controller import Controller
from rstar2.train.rollout_groups import rollout_tasks, unsolved
from rstar2.train.run_commands import (
    Checkpoint,
    Command,
    EnterPhase,
    Finish,
    OpenRun,
    PushWeights,
    ResetOptimizer,
    RollOut,
    TraceStep,
    Update,
    WriteMetrics,
)
from rstar2.train.seeds import derive_seed
from rstar2.train.step_metrics import progress_line
from rstar2.wire import RolloutTask, TrajectoryResult
from tests.trajectories import trajectory

PROBLEMS = [Problem(f"p{i}", f"{i} + 1", f"a{i}") for i in range(8)]
HELDOUT = [Problem(f"h{i}", f"{i} * 2", f"h{i}") for i in range(3)]
UPDATE = {"loss": 0.5, "clip_fraction": 0.25, "trained_rollouts": 4}
PUSH = {"weights_broadcast_bytes": 0.0, "weights_bus_bytes": 64.0}

Reward = Callable[[RolloutTask], float]


def make_config(**over: Any) -> TrainConfig:
    data: dict[str, Any] = {
        "seed": 7,
        "prompts_per_step": 2,
        "rollouts_per_prompt": 4,
        "heldout_problems": 3,
        "eval_every": 0,
        "checkpoint_every": 1,
        "rl": {"group_size": 2},
        "stages": [{"name": "rl1", "steps": 3}],
    }
    data.update(over)
    return from_dict(TrainConfig, data)


def encode(problem: Problem) -> list[int]:
    return [ord(c) for c in problem.problem]


def scored(task: RolloutTask, reward: float) -> TrajectoryResult:
    n = len(task.prompt_ids)
    return TrajectoryResult(
        traj_id=task.traj_id,
        step=task.step,
        kind=task.kind,
        answer=task.answer,
        trajectory=trajectory(
            prompt_id=task.prompt_id,
            sample=task.sample,
            token_ids=[*task.prompt_ids, 1, 2, 3],
            loss_mask=[0] * n + [1, 1, 1],
            logprobs=[0.0] * (n + 3),
            prompt_len=n,
            tool_calls=1,
            reward=reward,
        ),
        prompt=task.prompt,
        gen_s=1.0,
        tool_s=0.5,
        reward_s=0.5,
    )


def half_right(task: RolloutTask) -> float:
    """Even samples solve, odd ones fail: every group is mixed."""
    return 1.0 if task.sample % 2 == 0 else 0.0


@dataclass
class Driver:
    controller: Controller
    reward: Reward = half_right
    update: dict[str, float] = field(default_factory=lambda: dict(UPDATE))
    commands: list[Command] = field(default_factory=list)
    clock: float = 0.0

    def run(self, first: list[Command]) -> list[Command]:
        """Execute `first` and every command that follows, up to `Finish`; returns them all."""
        start = len(self.commands)
        pending = deque(first)
        while pending:
            command = pending.popleft()
            self.commands.append(command)
            if isinstance(command, Finish):
                assert not pending and self.controller.done
                break
            pending.extend(self.reply(command))
        return self.commands[start:]

    def reply(self, command: Command) -> list[Command]:
        started, self.clock = self.clock, self.clock + 1.0
        c = self.controller
        match command:
            case PushWeights(version=version):
                return c.weights_pushed(version, dict(PUSH), started, self.clock)
            case RollOut(step=step, tasks=tasks):
                results = [scored(t, self.reward(t)) for t in reversed(tasks)]
                return c.rollouts_done(step, results, started, self.clock)
            case Update(step=step):
                return c.update_done(step, dict(self.update), started, self.clock)
        return []


def run_all(cfg: TrainConfig, reward: Reward = half_right) -> list[Command]:
    controller = Controller(cfg, PROBLEMS, HELDOUT[: cfg.heldout_problems], encode)
    return Driver(controller, reward).run(controller.start(resume=False))


def rollouts(commands: list[Command], kind: str) -> list[RollOut]:
    return [c for c in commands if isinstance(c, RollOut) and c.kind == kind]


def rows(commands: list[Command]) -> list[dict[str, Any]]:
    return [c.row for c in commands if isinstance(c, WriteMetrics)]


def trained_problems(commands: list[Command]) -> set[str]:
    return {t.answer.replace("a", "p") for r in rollouts(commands, "train") for t in r.tasks}


# --- a whole run ----------------------------------------------------------------------------


SOLVED = {"accuracy": 1.0, "ci95": [1.0, 1.0], "problems": 3, "samples": 1, "pass_at_k": 1.0}


def test_a_fresh_run_issues_the_learner_actors_sequence() -> None:
    cfg = make_config(stages=[{"name": "rl1", "steps": 2}], checkpoint_every=2)
    commands = run_all(cfg)
    kinds = [type(c).__name__ + (f":{c.kind}" if isinstance(c, RollOut) else "") for c in commands]
    assert kinds == [
        "OpenRun", "PushWeights", "RollOut:eval", "WriteMetrics", "EnterPhase",
        "RollOut:train", "TraceStep", "Update", "PushWeights", "WriteMetrics",
        "RollOut:train", "TraceStep", "Update", "PushWeights", "WriteMetrics", "Checkpoint",
        "EnterPhase", "RollOut:eval", "WriteMetrics", "Checkpoint", "Finish",
    ]  # fmt: skip
    assert commands[0] == OpenRun(resume_step=None)
    assert [c.version for c in commands if isinstance(c, PushWeights)] == [0, 1, 2]
    assert [c.phase for c in commands if isinstance(c, EnterPhase)] == ["rl", "final"]
    finish = commands[-1]
    assert isinstance(finish, Finish)
    assert finish.summary == {
        "steps": 2,
        "sft_accuracy": 1.0,  # held-out tasks are all sample 0: solved
        "final_accuracy": 1.0,
        "evaluations": {
            "validation_sft": {
                **SOLVED,
                "response_tokens_mean": 3.0,
                "tool_calls_mean": 1.0,
                "tool_error_ratio_correct": 0.0,
            },
            "validation_final": {
                **SOLVED,
                "response_tokens_mean": 3.0,
                "tool_calls_mean": 1.0,
                "tool_error_ratio_correct": 0.0,
            },
        },
        "extra": {},
    }


def test_the_step_row_has_the_metrics_and_timings_of_the_learner_actor() -> None:
    commands = run_all(make_config(heldout_problems=0))
    first = next(c for c in commands if isinstance(c, WriteMetrics))
    assert list(first.row) == [
        "step", "stage", "infra_failed",
        "reward_mean", "response_tokens_mean", "tool_calls_mean", "tool_error_ratio_correct",
        "correct_with_failed_call", "mixed_group_fraction", "gen_tokens", "moved_turns",
        "loss", "clip_fraction", "trained_rollouts", "weights_broadcast_bytes", "weights_bus_bytes",
        "time_gen_s", "time_tool_s", "time_reward_s", "time_learner_s", "time_sync_s",
        "staleness_mean", "staleness_max", "staleness_hist", "stale_dropped", "step_s",
    ]  # fmt: skip
    row = first.row
    assert (row["step"], row["stage"], row["reward_mean"], row["mixed_group_fraction"]) == (
        1, "rl1", 0.5, 1.0,
    )  # fmt: skip
    # every command takes 1 tick: rollout, trace, update, push; step_s spans all four (from
    # the rollout's start to the push's end); the rollout's tick splits 2:1:1 (gen_s, tool_s,
    # reward_s of every trajectory)
    assert (row["time_gen_s"], row["time_tool_s"], row["time_reward_s"]) == (0.5, 0.25, 0.25)
    assert (row["time_learner_s"], row["time_sync_s"], row["step_s"]) == (1.0, 1.0, 4.0)
    assert first.line == progress_line(row, 3)
    assert first.line.startswith("step    1/3    rl1  | reward 0.500 | heldout      -     |")


def test_tasks_carry_seeds_ids_and_sampling_settings() -> None:
    cfg = make_config(stages=[{"name": "rl1", "steps": 1, "max_response_tokens": 64}])
    commands = run_all(cfg)
    (train,) = rollouts(commands, "train")
    assert [t.traj_id for t in train.tasks[:5]] == [
        "train/1/0/0", "train/1/0/1", "train/1/0/2", "train/1/0/3", "train/1/1/0",
    ]  # fmt: skip
    assert [t.seed for t in train.tasks] == [
        derive_seed(7, "train", 1, i, s) for i in range(2) for s in range(4)
    ]
    assert {(t.temperature, t.max_response_tokens, t.max_turns) for t in train.tasks} == {
        (cfg.rollout.temperature, 64, 0)
    }
    sft_eval, final_eval = rollouts(commands, "eval")
    assert [t.answer for t in sft_eval.tasks] == ["h0", "h1", "h2"]
    assert {(t.sample, t.temperature, t.max_response_tokens) for t in sft_eval.tasks} == {
        (0, cfg.eval_temperature, 0)
    }
    # an evaluation samples with the current step in its seeds (as the learner always did)
    assert (sft_eval.step, final_eval.step) == (0, 1)
    assert sft_eval.tasks[0].seed == derive_seed(7, "eval", 0, 0, 0)
    # every evaluation samples with the same seeds (not the step's): two evaluations of a split
    # differ by the policy alone
    assert [t.seed for t in final_eval.tasks] == [t.seed for t in sft_eval.tasks]


def test_rollout_only_skips_every_update_and_push() -> None:
    cfg = make_config(heldout_problems=0)
    controller = Controller(cfg, PROBLEMS, [], encode, rollout_only=True)
    commands = Driver(controller).run(controller.start(resume=False))
    assert [c.version for c in commands if isinstance(c, PushWeights)] == [0]
    assert not any(isinstance(c, Update) for c in commands)
    assert [r["step"] for r in rows(commands)] == [1, 2, 3]
    assert "loss" not in rows(commands)[0]
    assert rows(commands)[0]["time_learner_s"] == 0.0


def test_rollout_trace_off_sends_no_trace_step() -> None:
    assert any(isinstance(c, TraceStep) for c in run_all(make_config()))
    assert not any(isinstance(c, TraceStep) for c in run_all(make_config(rollout_trace=False)))


# --- stage boundaries -----------------------------------------------------------------------

THREE_STAGES = [
    {"name": "rl1", "steps": 2, "max_response_tokens": 100, "max_turns": 2},
    {"name": "rl2", "steps": 2, "max_response_tokens": 200, "max_turns": 3},
    {
        "name": "rl3",
        "steps": 1,
        "max_response_tokens": 300,
        "max_turns": 4,
        "filter_solved": True,
        "filter_samples": 2,
        "filter_pool": 4,
        "reset_optimizer": True,
    },
]


def test_stage_boundaries_change_budgets_and_start_stage_3_with_filter_and_reset() -> None:
    cfg = make_config(stages=THREE_STAGES, heldout_problems=0)
    controller = Controller(cfg, PROBLEMS, [], encode)
    assert [controller.stage_at(s) for s in range(1, 7)] == [0, 0, 1, 1, 2, 2]
    commands = run_all(cfg)
    train = rollouts(commands, "train")
    assert [r.step for r in train] == [1, 2, 3, 4, 5]
    assert [(r.tasks[0].max_response_tokens, r.tasks[0].max_turns) for r in train] == [
        (100, 2), (100, 2), (200, 3), (200, 3), (300, 4),
    ]  # fmt: skip
    assert [(r["step"], r["stage"]) for r in rows(commands)] == [
        (1, "rl1"), (2, "rl1"), (3, "rl2"), (4, "rl2"), (5, "rl3"),
    ]  # fmt: skip
    assert [c.state["stage"] for c in commands if isinstance(c, Checkpoint)] == [
        "rl1", "rl1", "rl2", "rl2", "rl3", "rl3",
    ]  # fmt: skip
    # stage 3 starts between step 4's row and step 5's rollout: probe, then reset
    (probe,) = rollouts(commands, "filter")
    i = commands.index(probe)
    assert isinstance(commands[i - 1], Checkpoint) and commands[i - 1].step == 4
    assert commands[i + 1 : i + 3] == [ResetOptimizer("rl3"), train[4]]
    assert sum(isinstance(c, ResetOptimizer) for c in commands) == 1
    assert probe.step == -3
    assert [(t.answer, t.sample) for t in probe.tasks] == [
        (f"a{i}", s) for i in range(4) for s in range(2)
    ]
    assert {(t.max_response_tokens, t.max_turns) for t in probe.tasks} == {(300, 4)}


# --- the stage-3 solved filter --------------------------------------------------------------


def test_unsolved_keeps_the_problems_some_sample_failed() -> None:
    tasks = rollout_tasks(PROBLEMS[:4], encode, 7, -1, "filter", 2, 1.0)
    solved = {("a0", 0), ("a0", 1), ("a1", 0), ("a3", 0), ("a3", 1)}
    results = [scored(t, float((t.answer, t.sample) in solved)) for t in reversed(tasks)]
    assert unsolved(PROBLEMS[:4], results) == ["p1", "p2"]


def solves(solved: set[str]) -> Reward:
    """Problems in `solved` are solved in every sample; the others in sample 0 only."""
    return lambda t: 1.0 if t.answer.replace("a", "p") in solved or t.sample == 0 else 0.0


def test_the_filter_drops_the_problems_solved_in_all_samples() -> None:
    stages = [{"name": "rl1", "steps": 1}, {**THREE_STAGES[2], "steps": 6}]
    cfg = make_config(stages=stages, heldout_problems=0)
    commands = run_all(cfg, reward=solves({"p0", "p3"}))
    (probe,) = rollouts(commands, "filter")
    assert {t.answer for t in probe.tasks} == {"a0", "a1", "a2", "a3"}
    after = commands[commands.index(probe) :]
    assert trained_problems(after) == {"p1", "p2"}
    finish = commands[-1]
    assert isinstance(finish, Finish)
    assert finish.summary["extra"] == {"filter_rl3": {"probed": 4, "kept": 2}}


def test_a_filter_that_would_keep_nothing_keeps_the_whole_pool() -> None:
    stages = [{"name": "rl1", "steps": 1}, {**THREE_STAGES[2], "steps": 6}]
    cfg = make_config(stages=stages, heldout_problems=0)
    commands = run_all(cfg, reward=solves({p.id for p in PROBLEMS}))
    (probe,) = rollouts(commands, "filter")
    assert len(trained_problems(commands[commands.index(probe) :])) > 4
    finish = commands[-1]
    assert isinstance(finish, Finish)
    assert finish.summary["extra"] == {"filter_rl3": {"probed": 4, "kept": 0}}


# --- evaluation and checkpoint cadence ------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "eval_every", "heldout", "evaluated", "with_accuracy"),
    [
        # every 2nd step, then the last one
        (5, 2, 3, [0, 2, 4, 5], [(0, "sft"), (2, "rl1"), (4, "rl1"), (5, "final")]),
        # the last step evaluated already: no final evaluation
        (4, 2, 3, [0, 2, 4], [(0, "sft"), (2, "rl1"), (4, "rl1")]),
        # only after SFT and at the end
        (3, 0, 3, [0, 3], [(0, "sft"), (3, "final")]),
        # no held-out set: never
        (3, 1, 0, [], []),
    ],
)
def test_evaluation_cadence(
    steps: int,
    eval_every: int,
    heldout: int,
    evaluated: list[int],
    with_accuracy: list[tuple[int, str]],
) -> None:
    cfg = make_config(
        stages=[{"name": "rl1", "steps": steps}], eval_every=eval_every, heldout_problems=heldout
    )
    commands = run_all(cfg)
    assert [r.step for r in rollouts(commands, "eval")] == evaluated
    accuracy_rows = [r for r in rows(commands) if "heldout_accuracy" in r]
    assert [(r["step"], r["stage"]) for r in accuracy_rows] == with_accuracy
    assert all("time_eval_s" in r for r in accuracy_rows if r["stage"] == "rl1")
    finish = commands[-1]
    assert isinstance(finish, Finish)
    assert finish.summary["final_accuracy"] == (1.0 if heldout else None)


@pytest.mark.parametrize(
    ("steps", "every", "saved"),
    [(5, 2, [2, 4, 5]), (4, 2, [2, 4, 4]), (3, 1, [1, 2, 3, 3]), (3, 5, [3])],
)
def test_checkpoint_cadence(steps: int, every: int, saved: list[int]) -> None:
    cfg = make_config(stages=[{"name": "rl1", "steps": steps}], checkpoint_every=every)
    commands = run_all(cfg)
    checkpoints = [c for c in commands if isinstance(c, Checkpoint)]
    assert [c.step for c in checkpoints] == saved
    assert [c.state["progress"]["step"] for c in checkpoints] == saved
    # a step's checkpoint follows its row; the last one follows the final evaluation's row
    for c in checkpoints:
        before = commands[commands.index(c) - 1]
        assert isinstance(before, WriteMetrics) and before.row["step"] == c.step
    assert isinstance(commands[-2], Checkpoint) and commands[-3].row["stage"] == "final"


# --- resume ---------------------------------------------------------------------------------

RESUME_STAGES = [
    {"name": "rl1", "steps": 2},
    {
        "name": "rl3",
        "steps": 3,
        "filter_solved": True,
        "filter_samples": 2,
        "reset_optimizer": True,
    },
]


def resumable_run() -> tuple[TrainConfig, list[Command]]:
    cfg = make_config(stages=RESUME_STAGES, eval_every=2, checkpoint_every=1)
    return cfg, run_all(cfg, reward=solves({"p0", "p5"}))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_resume_from_step_k_issues_what_an_uninterrupted_run_issues(k: int) -> None:
    cfg, reference = resumable_run()
    checkpoint = next(c for c in reference if isinstance(c, Checkpoint) and c.step == k)
    saved = pickle.loads(pickle.dumps(checkpoint.state))  # as torch.save/load would give it
    resumed = Controller(cfg, PROBLEMS, HELDOUT, encode)
    driver = Driver(resumed, reward=solves({"p0", "p5"}))
    first = resumed.start(resume=True, saved=saved)
    assert first == [OpenRun(resume_step=k), PushWeights(version=k)]
    commands = driver.run(first)
    assert commands[2] == EnterPhase("rl")  # no second evaluation of the SFT policy
    after_k = reference[reference.index(checkpoint) + 1 :]
    assert commands[3:] == after_k


def test_resume_without_a_checkpoint_starts_over() -> None:
    cfg, reference = resumable_run()
    resumed = Controller(cfg, PROBLEMS, HELDOUT, encode)
    commands = Driver(resumed, reward=solves({"p0", "p5"})).run(resumed.start(resume=True))
    assert commands[0] == OpenRun(resume_step=0)
    assert commands[1:] == reference[1:]


def test_the_checkpoint_state_is_a_snapshot() -> None:
    _, reference = resumable_run()
    states = [c.state for c in reference if isinstance(c, Checkpoint)]
    # the filter's record, made at step 3, is not in the checkpoint of step 1
    assert states[0]["progress"]["extra"] == {}
    assert states[-1]["progress"]["extra"] == {"filter_rl3": {"probed": 8, "kept": 6}}


# --- replies out of order -------------------------------------------------------------------


def test_a_reply_to_a_command_not_pending_is_refused() -> None:
    controller = Controller(make_config(), PROBLEMS, HELDOUT, encode)
    with pytest.raises(ValueError, match="awaits nothing"):
        controller.rollouts_done(0, [], 0.0, 1.0)
    controller.start(resume=False)
    with pytest.raises(ValueError, match="twice"):
        controller.start(resume=False)
    with pytest.raises(ValueError, match="awaits PushWeights\\(0\\)"):
        controller.weights_pushed(3, {}, 0.0, 1.0)
    (evaluate,) = controller.weights_pushed(0, {}, 0.0, 1.0)
    assert isinstance(evaluate, RollOut)
    with pytest.raises(ValueError, match="2 results for 3 tasks"):
        controller.rollouts_done(0, [scored(t, 1.0) for t in evaluate.tasks[:2]], 1.0, 2.0)


def test_a_step_that_trains_nothing_warns_and_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cfg = make_config(stages=[{"name": "rl1", "steps": 2}])
    controller = Controller(cfg, PROBLEMS, HELDOUT[: cfg.heldout_problems], encode)
    driver = Driver(controller, update={**UPDATE, "trained_rollouts": 0})
    finish = driver.run(controller.start(resume=False))[-1]
    assert isinstance(finish, Finish)
    assert finish.summary["extra"]["steps_not_updated"] == cfg.total_steps
    assert f"step {cfg.total_steps}: policy not updated" in caplog.text


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_an_interruption_checkpoints_the_last_step_done_as_of_its_end(k: int) -> None:
    # A stop request during step k+1's rollout: the checkpoint is step k's, exactly as an
    # uninterrupted run checkpoints it (the abandoned batch does not advance the data cursor);
    # between step k+1's update and its end the run is not interruptible.
    cfg, reference = resumable_run()
    sparse = make_config(stages=RESUME_STAGES, eval_every=2, checkpoint_every=100)
    c = Controller(sparse, PROBLEMS, HELDOUT, encode)
    driver = Driver(c, reward=solves({"p0", "p5"}))
    pending = deque(c.start(resume=False))
    seen_uninterruptible = False
    while pending:
        command = pending.popleft()
        if isinstance(command, RollOut) and command.kind == "train" and command.step == k + 1:
            break
        pending.extend(driver.reply(command))
        if isinstance(command, Update):
            assert not c.interruptible
            seen_uninterruptible = True
    assert c.interruptible and (seen_uninterruptible or k == 0)
    *saved, finish = c.interrupt("SIGINT")
    assert isinstance(finish, Finish) and c.done and not c.interruptible
    assert finish.summary["interrupted"] == "SIGINT"
    if k == 0:  # nothing trained yet: nothing to checkpoint
        assert saved == [] and finish.summary["checkpoint_step"] == -1
        return
    want = next(x for x in reference if isinstance(x, Checkpoint) and x.step == k)
    assert saved == [Checkpoint(k, want.state)]
    assert finish.summary["checkpoint_step"] == k


# --- the evaluation protocol ----------------------------------------------------------------

TEST = [Problem(f"t{i}", f"{i} - 1", f"t{i}") for i in range(4)]


def test_validation_during_training_and_test_only_after_sft_and_at_the_end() -> None:
    cfg = make_config(stages=[{"name": "rl1", "steps": 4}], eval_every=2, eval_samples=3)
    controller = Controller(cfg, PROBLEMS, HELDOUT, encode, test=TEST)
    commands = Driver(controller).run(controller.start(resume=False))
    evals = [c for c in commands if isinstance(c, RollOut) and c.kind in ("eval", "test")]
    assert [(c.kind, c.step) for c in evals] == [
        ("eval", 0), ("test", 0), ("eval", 2), ("eval", 4), ("test", 4),
    ]  # fmt: skip
    # k samples per problem, and the same seeds in every evaluation of a split
    assert [len(c.tasks) for c in evals] == [9, 12, 9, 9, 12]
    assert {t.answer for c in evals if c.kind == "test" for t in c.tasks} == {
        t.answer for t in TEST
    }
    for kind in ("eval", "test"):
        seeds = [[t.seed for t in c.tasks] for c in evals if c.kind == kind]
        assert all(s == seeds[0] for s in seeds) and len(set(seeds[0])) == len(seeds[0])
    # test problems never reach training
    trained = {t.answer for r in rollouts(commands, "train") for t in r.tasks}
    assert not trained & {t.answer for t in TEST}
    sft_row, *_, final_row = rows(commands)
    assert sft_row["stage"] == "sft" and final_row["stage"] == "final"
    for row in (sft_row, final_row):
        assert row["test_accuracy"] == pytest.approx(2 / 3)  # half_right: samples 0 and 2 of 3
        low, high = row["test_ci95"]
        assert low <= row["test_accuracy"] <= high
    finish = commands[-1]
    assert isinstance(finish, Finish)
    assert set(finish.summary["evaluations"]) == {
        "validation_sft", "test_sft", "validation_last", "validation_final", "test_final",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("eval_every", "lines"),
    [
        (2, ["after SFT", "at step 2", "after RL"]),  # the last step (3) is not on the cadence
        (3, ["after SFT", "at step 3"]),  # the last step evaluated: no final evaluation
    ],
)
def test_every_evaluation_is_one_log_line_when_it_happens(
    caplog: pytest.LogCaptureFixture, eval_every: int, lines: list[str]
) -> None:
    # issue 34 row 17: validation after RL showed only in the final summary
    caplog.set_level(logging.INFO, logger="rstar2.train")
    cfg = make_config(stages=[{"name": "rl1", "steps": 3}], eval_every=eval_every)
    run_all(cfg)
    said = [r.getMessage() for r in caplog.records if "validation accuracy" in r.getMessage()]
    assert [m.split(": ")[0] for m in said] == [f"validation accuracy {w}" for w in lines]
