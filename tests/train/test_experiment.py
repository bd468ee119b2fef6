"""The experiment's plan and arithmetic (`rstar2.train.experiment`) on hand-made inputs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rstar2.config import ConfigError
from rstar2.train.experiment import (
    ArmResult,
    ArmRun,
    best_checkpoint,
    format_differences,
    format_table,
    paired_differences,
    parse_names,
    plan_runs,
    rl_compute_tokens,
    run_overrides,
    seed_interval,
    sft_choice,
    sft_retry_overrides,
    summarize,
    training_figures,
)


def test_plan_runs_rl_first_seed_by_seed() -> None:
    runs = plan_runs(["sft_best", "sft_flops", "sft", "roc"], ["noisy", "clean"], [1, 0])
    per = ["roc", "sft", "sft_flops", "sft_best"]
    assert [r.name for r in runs] == [
        f"{env}/{arm}/seed-{seed}" for seed in (1, 0) for env in ("noisy", "clean") for arm in per
    ]
    assert runs[0].directory(Path("/o")) == Path("/o/noisy/roc/seed-1")


def test_plan_runs_refuses_a_control_without_rl_and_repeated_seeds() -> None:
    with pytest.raises(ConfigError, match="grpo or roc beside sft_flops"):
        plan_runs(["sft", "sft_flops"], ["clean"], [0])
    assert plan_runs(["sft_best"], ["clean"], [0])  # needs no RL arm
    with pytest.raises(ConfigError, match="distinct seeds"):
        plan_runs(["grpo"], ["clean"], [0, 0])


def test_parse_names_keeps_order_drops_repeats_refuses_unknown() -> None:
    assert parse_names("roc, sft,roc", ("sft", "roc"), "--arms") == ["roc", "sft"]
    with pytest.raises(ConfigError, match="--arms: got 'sft,ppo'"):
        parse_names("sft,ppo", ("sft", "roc"), "--arms")
    with pytest.raises(ConfigError):
        parse_names(" , ", ("sft",), "--arms")


def test_run_overrides_set_the_seed_everywhere_and_the_noise_only_when_noisy() -> None:
    assert run_overrides(ArmRun("noisy", "grpo", 2), 0.25) == [
        "seed=2", "sft.seed=2", "model.tiny.seed=2", "sandbox.fault_rate=0.25",
    ]  # fmt: skip
    assert run_overrides(ArmRun("clean", "grpo", 2), 0.25)[-1] == "sandbox.fault_rate=0.0"


def test_seed_interval_is_a_t_interval() -> None:
    mean, sd, low, high = seed_interval([0.2, 0.4, 0.6])
    assert mean == pytest.approx(0.4) and sd == pytest.approx(0.2)
    half = 4.303 * 0.2 / math.sqrt(3)  # t(0.975, 2 df) = 4.303
    assert (low, high) == (pytest.approx(0.4 - half), pytest.approx(0.4 + half))
    assert seed_interval([0.3]) == (0.3, None, 0.3, 0.3)
    many = seed_interval([0.0, 1.0] * 10)  # 19 df: beyond the table, the normal's 1.96
    assert many[3] - many[0] == pytest.approx(1.96 * many[1] / math.sqrt(20))


def result(env: str, arm: str, seed: int, acc: float, **kw: object) -> ArmResult:
    return ArmResult(env, arm, seed, acc, [acc - 0.1, acc + 0.1], 10.0 * (seed + 1), **kw)  # type: ignore[arg-type]


def test_summarize_over_seeds_and_one_seed_over_problems() -> None:
    rows = summarize(
        [
            result("noisy", "sft", 0, 0.3),
            result("clean", "roc", 1, 0.5, response_tokens=50.0, tool_error_ratio_correct=0.1),
            result("clean", "roc", 0, 0.4, response_tokens=40.0, tool_error_ratio_correct=0.3),
            result("clean", "grpo", 0, 0.45),
            result("clean", "grpo", 1, 0.55),
        ]
    )
    assert [(r.env, r.arm) for r in rows] == [("clean", "grpo"), ("clean", "roc"), ("noisy", "sft")]
    roc = rows[1]
    assert roc.seeds == [0, 1] and roc.ci_over == "seeds"
    assert roc.accuracy == pytest.approx(0.45)
    assert roc.sd == pytest.approx(math.sqrt(0.005))  # sd(0.4, 0.5), ddof 1
    assert roc.ci95 == [0.0, 1.0]  # 12.706 * 0.0707 / 1.414 = 0.635 each side, clipped
    assert roc.wall_s == 15.0 and roc.response_tokens == 45.0
    assert roc.tool_error_ratio_correct == pytest.approx(0.2) and roc.tool_calls is None
    sft = rows[2]
    assert (sft.sd, sft.ci_over, sft.ci95) == (None, "problems", [pytest.approx(0.2), 0.4])


def test_training_figures_average_the_step_rows_only() -> None:
    rows = [
        {"step": 0, "stage": "sft", "test_accuracy": 0.2},
        {"step": 1, "response_tokens_mean": 10.0, "tool_calls_mean": 1.0,
         "tool_error_ratio_correct": 0.5},
        {"step": 2, "response_tokens_mean": 20.0, "tool_calls_mean": 2.0,
         "tool_error_ratio_correct": 0.0},
        {"step": 2, "stage": "final", "test_accuracy": 0.4},
    ]  # fmt: skip
    assert training_figures(rows) == {
        "response_tokens": 15.0,
        "tool_calls": 1.5,
        "tool_error_ratio_correct": 0.25,
        "curve": [[1.0, 0.5], [2.0, 0.0]],
    }
    assert training_figures(rows[:1])["tool_error_ratio_correct"] is None


def test_format_table_rows() -> None:
    rows = summarize(
        [
            result("clean", "grpo", 0, 0.4, response_tokens=50.0, tool_calls=1.25,
                   tool_error_ratio_correct=0.125, pass_at_k=0.5),
            result("clean", "grpo", 1, 0.6, response_tokens=60.0, tool_calls=1.25,
                   tool_error_ratio_correct=0.125, pass_at_k=0.7),
            result("clean", "sft", 0, 0.25),
        ]
    )  # fmt: skip
    lines = format_table(rows).splitlines()
    assert lines[1].split() == ["clean", "sft", "1", "25.0", "15.0-", "35.0", "problems", "-",
                                "10s", "-", "-", "-", "-"]  # fmt: skip
    # sd 14.1 points; t(0.975, 1) = 12.706: 50.0 +- 127.1 points, clipped to 0-100
    assert lines[2].split() == ["clean", "grpo", "2", "50.0", "+-", "14.1", "0.0-100.0",
                                "seeds", "60.0", "15s", "55.0", "1.25", "0.125", "-"]  # fmt: skip


def test_rl_compute_counts_trained_tokens_and_a_third_of_rollout_tokens() -> None:
    rows = [
        {"step": 0, "stage": "sft", "heldout_accuracy": 0.1},
        {"step": 1, "trained_tokens": 300.0, "rollout_tokens": 900.0},
        {"step": 2, "trained_tokens": 100.0, "rollout_tokens": 30.0},
    ]
    assert rl_compute_tokens(rows) == pytest.approx(300 + 300 + 100 + 10)


def test_paired_differences_are_seed_by_seed_t_intervals() -> None:
    results = [
        result("clean", "roc", 0, 0.50), result("clean", "roc", 1, 0.60),
        result("clean", "roc", 2, 0.70),
        result("clean", "sft_best", 0, 0.30), result("clean", "sft_best", 1, 0.45),
        result("clean", "sft_best", 2, 0.40),
        result("clean", "grpo", 0, 0.5),  # one common seed with roc
    ]  # fmt: skip
    for r in results:
        r.ood_accuracy = r.test_accuracy / 2 if r.arm == "roc" or r.seed < 2 else None
    diffs = paired_differences(results, [("roc", "sft_best"), ("roc", "grpo"), ("roc", "sft")])
    (test,) = [d for d in diffs if d.minus == "sft_best" and d.measure == "test"]
    mean, _, low, high = seed_interval([0.2, 0.15, 0.3])
    assert test.seeds == [0, 1, 2] and test.mean == pytest.approx(mean)
    assert test.ci95 == pytest.approx([low, high]) and low > 0
    # the ood difference needs every common seed to have both ood figures: seed 2 lacks one
    assert not [d for d in diffs if d.minus == "sft_best" and d.measure == "ood"]
    (one,) = [d for d in diffs if d.minus == "grpo" and d.measure == "test"]
    assert one.seeds == [0] and one.mean == pytest.approx(0.0) and one.ci95 == [0.0, 0.0]
    assert not [d for d in diffs if d.minus == "sft"]  # no common seed
    assert "roc - sft_best (test, 3 seeds): +21.7 points" in format_differences(diffs)


def test_the_best_checkpoint_is_the_best_validation_and_the_earliest_of_equals() -> None:
    assert best_checkpoint({0: 0.2, 100: 0.35, 200: 0.3}) == 100
    assert best_checkpoint({0: 0.3, 100: 0.3, 200: 0.1}) == 0
    assert best_checkpoint({200: 0.5, 100: 0.5}) == 100
    with pytest.raises(ValueError):
        best_checkpoint({})


def test_an_sft_attempt_is_kept_at_the_level_else_retried_then_the_best_of_them() -> None:
    assert sft_choice([0.2], 0.05, 3) == 0  # reached at once
    assert sft_choice([0.01], 0.05, 3) is None  # below: another attempt
    assert sft_choice([0.01, 0.05], 0.05, 3) == 1  # the level itself counts as reached
    assert sft_choice([0.01, 0.03, 0.02], 0.05, 3) == 1  # none reached: the best
    assert sft_choice([0.02, 0.01, 0.02], 0.05, 3) == 0  # the earliest of equals
    assert sft_choice([0.0], 0.05, 1) == 0  # one attempt allowed: no retry
    with pytest.raises(ValueError):
        sft_choice([], 0.05, 3)


def test_an_sft_retry_changes_the_initialisation_only() -> None:
    assert sft_retry_overrides(2, 0) == []
    assert sft_retry_overrides(2, 1) == ["model.tiny.seed=1002"]
    assert sft_retry_overrides(2, 2) == ["model.tiny.seed=2002"]
