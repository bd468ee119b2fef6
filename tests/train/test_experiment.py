"""The experiment's plan and arithmetic (`rstar2.train.experiment`) on hand-made inputs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rstar2.config import ConfigError
from rstar2.train.experiment import (
    ArmResult,
    ArmRun,
    format_table,
    parse_names,
    plan_runs,
    run_overrides,
    seed_interval,
    summarize,
    training_figures,
)


def test_plan_runs_rl_first_seed_by_seed() -> None:
    runs = plan_runs(["sft_long", "sft", "roc"], ["noisy", "clean"], [1, 0])
    assert [r.name for r in runs] == [
        "noisy/roc/seed-1", "noisy/sft/seed-1", "noisy/sft_long/seed-1",
        "clean/roc/seed-1", "clean/sft/seed-1", "clean/sft_long/seed-1",
        "noisy/roc/seed-0", "noisy/sft/seed-0", "noisy/sft_long/seed-0",
        "clean/roc/seed-0", "clean/sft/seed-0", "clean/sft_long/seed-0",
    ]  # fmt: skip
    assert runs[0].directory(Path("/o")) == Path("/o/noisy/roc/seed-1")


def test_plan_runs_refuses_a_control_without_rl_and_repeated_seeds() -> None:
    with pytest.raises(ConfigError, match="grpo or roc beside sft_long"):
        plan_runs(["sft", "sft_long"], ["clean"], [0])
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
                   tool_error_ratio_correct=0.125),
            result("clean", "grpo", 1, 0.6, response_tokens=60.0, tool_calls=1.25,
                   tool_error_ratio_correct=0.125),
            result("clean", "sft", 0, 0.25),
        ]
    )  # fmt: skip
    lines = format_table(rows).splitlines()
    assert lines[1].split() == ["clean", "sft", "1", "25.0", "15.0-", "35.0", "problems", "10s",
                                "-", "-", "-"]  # fmt: skip
    # sd 14.1 points; t(0.975, 1) = 12.706: 50.0 +- 127.1 points, clipped to 0-100
    assert lines[2].split() == ["clean", "grpo", "2", "50.0", "+-", "14.1", "0.0-100.0",
                                "seeds", "15s", "55.0", "1.25", "0.125"]  # fmt: skip
