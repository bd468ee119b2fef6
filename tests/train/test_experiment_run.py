"""`rstar2 experiment` end to end on the smoke config: one env, one seed, a 1-step RL arm, the
sft arm (reusing its test_sft), the equal-compute control and the best-validation control, all
evaluated on an out-of-distribution task too; a rerun skips every arm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstar2.cli import main

ONE_STEP = 'stages=[{"name": "rl1", "steps": 1}]'


def _problems(run: Path, source: str) -> list[str]:
    rows = [json.loads(x) for x in (run / "trajectories.jsonl").read_text().splitlines()]
    return sorted({r["problem"] for r in rows if r["source"] == source and r["step"] == 0})


def _tested(run: Path) -> list[str]:
    return _problems(run, "test")


def _validated(run: Path) -> list[str]:
    return _problems(run, "validation")


@pytest.mark.slow
def test_experiment_runs_resumes_and_reports(
    smoke_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "exp"
    argv = [
        "experiment", "--config", str(smoke_config), "--arms", "sft,sft_flops,sft_best,grpo",
        "--envs", "noisy", "--seeds", "3", "--fault-rate", "0.5", "--out", str(out),
        "--set", ONE_STEP, "--set", "test_problems=2", "--set", "sft.steps=2",
        "--set", "heldout_problems=2", "--set", "ood_task.lexicon=ood",
        "--sft-best-steps", "2", "--sft-best-every", "1",
        "--sft-min-validation", "1", "--sft-attempts", "2",
    ]  # fmt: skip
    assert main(argv) == 0
    first = capsys.readouterr()
    assert "noisy/grpo/seed-3: started" in first.err
    assert "noisy/sft_flops/seed-3: done in" in first.err
    assert "noisy/sft_best/seed-3: validation after 2 more SFT steps" in first.err
    # 100% on validation is out of reach: a second SFT from another initialisation, the better
    # of the two kept (the first of equals)
    choice = json.loads((out / "sft-models/seed-3/sft-choice.json").read_text())
    assert choice["level"] == 1 and not choice["reached"] and len(choice["validations"]) == 2
    assert choice["model"] == choice["models"][choice["chosen"]]
    retry = json.loads((out / "sft-models/seed-3/retry-1/model-sft/config.json").read_text())
    first_init = out / "sft-models/seed-3/model-init/model.safetensors"
    retry_init = out / "sft-models/seed-3/retry-1/model-init/model.safetensors"
    assert retry["vocab_size"] > 0 and first_init.read_bytes() != retry_init.read_bytes()
    assert "attempt 2: validation" in first.err

    results = json.loads((out / "results.json").read_text())
    runs = {r["arm"]: r for r in results["runs"]}
    grpo, sft, flops, best = runs["grpo"], runs["sft"], runs["sft_flops"], runs["sft_best"]
    # the RL run is noisy, seeded 3, from the shared SFT model
    cfg = json.loads((out / "noisy/grpo/seed-3/config.json").read_text())
    assert (cfg["seed"], cfg["sft"]["seed"], cfg["sandbox"]["fault_rate"]) == (3, 3, 0.5)
    assert cfg["model"]["path"] == choice["model"]
    assert len(grpo["curve"]) == 1 and grpo["tool_calls"] is not None
    # the sft arm is the RL run's own evaluation of the SFT policy
    summary = json.loads((out / "noisy/grpo/seed-3/summary.json").read_text())
    assert sft["test_accuracy"] == summary["evaluations"]["test_sft"]["accuracy"]
    assert sft["tool_calls"] == summary["evaluations"]["test_sft"]["tool_calls_mean"]
    assert sft["pass_at_k"] == summary["evaluations"]["test_sft"]["pass_at_k"]
    assert grpo["pass_at_k"] == summary["evaluations"]["test_final"]["pass_at_k"]
    assert grpo["response_tokens"] == summary["evaluations"]["test_final"]["response_tokens_mean"]
    # the equal-compute control trained on the RL arm's compute in tokens, not its time
    rows = [
        json.loads(x) for x in (out / "noisy/grpo/seed-3/metrics.jsonl").read_text().splitlines()
    ]
    step = next(r for r in rows if "trained_tokens" in r)
    assert grpo["compute_tokens"] == step["trained_tokens"] + step["rollout_tokens"] / 3 > 0
    assert flops["extra"]["tokens_budget"] == grpo["compute_tokens"]
    assert flops["compute_tokens"] >= grpo["compute_tokens"]
    eval_cfg = json.loads((out / "noisy/sft_flops/seed-3/eval/config.json").read_text())
    assert eval_cfg["model"]["path"] == str(out / "noisy/sft_flops/seed-3/model-sft-flops")
    # the SFT controls are tested on the RL arm's test problems, not on the validation ones
    assert (eval_cfg["heldout_problems"], eval_cfg["evaluate_validation"]) == (2, False)
    assert _tested(out / "noisy/sft_flops/seed-3/eval") == _tested(out / "noisy/grpo/seed-3")
    assert _tested(out / "noisy/sft_best/seed-3/eval") == _tested(out / "noisy/grpo/seed-3")
    assert _tested(out / "noisy/sft_best/seed-3/val-00001") == _validated(out / "noisy/grpo/seed-3")
    assert _tested(out / "noisy/grpo/seed-3") != _validated(out / "noisy/grpo/seed-3")
    assert (eval_cfg["seed"], eval_cfg["eval_samples"]) == (3, cfg["eval_samples"])
    # the best control: the SFT model and 2 checkpoints on validation, the best one on test
    assert set(best["extra"]["validation"]) == {"0", "1", "2"}
    best_step = best["extra"]["best_step"]
    val_cfg = json.loads((out / "noisy/sft_best/seed-3/val-00001/config.json").read_text())
    assert (val_cfg["heldout_problems"], val_cfg["test_problems"]) == (0, 2)
    best_cfg = json.loads((out / "noisy/sft_best/seed-3/eval/config.json").read_text())
    want = Path(choice["model"])
    if best_step:
        want = out / f"noisy/sft_best/seed-3/model-sft-best/step-{best_step:05d}"
    assert best_cfg["model"]["path"] == str(want)
    # every arm also on the out-of-distribution task
    for r in runs.values():
        assert r["ood_accuracy"] is not None and len(r["ood_ci95"]) == 2
    ood_cfg = json.loads((out / "noisy/grpo/seed-3/ood/config.json").read_text())
    assert ood_cfg["task"]["lexicon"] == "ood"
    assert ood_cfg["model"]["path"] == str(out / "noisy/grpo/seed-3/model-rl")
    assert [r["arm"] for r in results["table"]] == ["sft", "sft_best", "sft_flops", "grpo"]
    assert {(d["arm"], d["minus"]) for d in results["differences"]} >= {("grpo", "sft_best")}
    assert "test pass@1" in first.out and "paired differences" in first.out
    assert (out / "accuracy.png").stat().st_size > 0
    assert (out / "tool_error_ratio_correct.png").stat().st_size > 0

    assert main(argv) == 0  # every arm is finished: nothing runs again
    again = capsys.readouterr()
    assert "started" not in again.err
    assert again.err.count("done before") == 4
    assert json.loads((out / "results.json").read_text())["runs"] == results["runs"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--arms", "sft,ppo"], "argument --arms: got 'sft,ppo'"),
        (["--arms", "sft_flops"], "grpo or roc beside sft_flops"),
        (["--set", "ood_task.lexicon=moon"], "config key 'ood_task.lexicon'"),
        (["--envs", "dirty"], "argument --envs"),
        (["--seeds", "0,x"], "argument --seeds"),
        (["--set", "sft.steps=0"], "config key 'sft.steps'"),
        (["--set", "test_problems=0"], "config key 'test_problems'"),
        (["--set", "nope=1"], "nope"),
        (["--sft-min-validation", "2"], "--sft-min-validation"),
        (["--sft-attempts", "0"], "--sft-attempts"),
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
