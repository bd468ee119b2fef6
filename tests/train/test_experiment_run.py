"""`rstar2 experiment` end to end on the smoke config: one env, one seed, a 1-step RL arm, the
sft arm (reusing its test_sft) and the equal-compute control; a rerun skips every arm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2.cli import main

ONE_STEP = 'stages=[{"name": "rl1", "steps": 1}]'


@pytest.mark.slow
def test_experiment_runs_resumes_and_reports(
    smoke_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    argv = [
        "experiment", "--config", str(smoke_config), "--arms", "sft,sft_long,grpo",
        "--envs", "noisy", "--seeds", "3", "--fault-rate", "0.5", "--out", str(out),
        "--set", ONE_STEP, "--set", "test_problems=2", "--set", "sft.steps=2",
    ]  # fmt: skip
    assert main(argv) == 0
    first = capsys.readouterr()
    assert "noisy/grpo/seed-3: started" in first.err
    assert "noisy/sft_long/seed-3: done in" in first.err

    results = json.loads((out / "results.json").read_text())
    runs = {r["arm"]: r for r in results["runs"]}
    grpo, sft, long = runs["grpo"], runs["sft"], runs["sft_long"]
    # the RL run is noisy, seeded 3, from the shared SFT model
    cfg = json.loads((out / "noisy/grpo/seed-3/config.json").read_text())
    assert (cfg["seed"], cfg["sft"]["seed"], cfg["sandbox"]["fault_rate"]) == (3, 3, 0.5)
    assert cfg["model"]["path"] == str(out / "sft-models/seed-3/model-sft")
    assert len(grpo["curve"]) == 1 and grpo["tool_calls"] is not None
    # the sft arm is the RL run's own evaluation of the SFT policy
    summary = json.loads((out / "noisy/grpo/seed-3/summary.json").read_text())
    assert sft["test_accuracy"] == summary["evaluations"]["test_sft"]["accuracy"]
    # length and tool use come from each arm's test evaluation, SFT arms included
    assert sft["tool_calls"] == summary["evaluations"]["test_sft"]["tool_calls_mean"]
    assert grpo["response_tokens"] == summary["evaluations"]["test_final"]["response_tokens_mean"]
    assert long["response_tokens"] is not None
    # the control trained for the RL arm's wall time, then the trainer evaluated it alike
    assert long["extra"]["budget_s"] == grpo["wall_s"]
    assert (
        long["wall_s"] >= grpo["wall_s"] or long["extra"]["steps"] == long["extra"]["planned_steps"]
    )
    eval_cfg = json.loads((out / "noisy/sft_long/seed-3/eval/config.json").read_text())
    assert eval_cfg["model"]["path"] == str(out / "noisy/sft_long/seed-3/model-sft-long")
    assert (eval_cfg["seed"], eval_cfg["eval_samples"]) == (3, cfg["eval_samples"])
    assert [r["arm"] for r in results["table"]] == ["sft", "sft_long", "grpo"]
    assert "test pass@1" in first.out
    assert (out / "accuracy.png").stat().st_size > 0
    assert (out / "tool_error_ratio_correct.png").stat().st_size > 0

    assert main(argv) == 0  # every arm is finished: nothing runs again
    again = capsys.readouterr()
    assert "started" not in again.err
    assert again.err.count("done before") == 3
    assert json.loads((out / "results.json").read_text())["runs"] == results["runs"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--arms", "sft,ppo"], "argument --arms: got 'sft,ppo'"),
        (["--arms", "sft_long"], "grpo or roc beside sft_long"),
        (["--envs", "dirty"], "argument --envs"),
        (["--seeds", "0,x"], "argument --seeds"),
        (["--set", "sft.steps=0"], "config key 'sft.steps'"),
        (["--set", "test_problems=0"], "config key 'test_problems'"),
        (["--set", "nope=1"], "nope"),
    ],
)
def test_bad_input_is_one_line(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["experiment", "--out", str(tmp_path / "e"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rstar2 experiment: error: ") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "e" / "results.json").exists()


def test_bad_fault_rate_is_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["experiment", "--out", "x", "--fault-rate", "-1"])
    assert e.value.code == 2
    assert "--fault-rate" in capsys.readouterr().err
