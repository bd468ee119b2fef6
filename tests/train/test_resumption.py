"""`rstar2 train --resume`: what a resumed run may change, what it refuses, a finished run, and
the metrics log it continues (no graph is started here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rstar2.cli import main
from rstar2.config import ConfigError
from rstar2.learner.checkpoint import save_checkpoint
from rstar2.metrics import MetricsLog, read_metrics
from rstar2.train.config import load_train_config
from rstar2.train.resumption import locate, resumed_config
from rstar2.train.runner import save_config


@pytest.fixture
def run(tmp_path: Path, smoke_config: Path) -> Path:
    """A run directory with its config and a checkpoint of step 2 (of 3)."""
    run = tmp_path / "run"
    save_config(load_train_config(smoke_config), run)
    save_checkpoint(run, 2, {"progress": {"step": 2}})
    return run


def test_resume_applies_what_may_change(run: Path) -> None:
    cfg = resumed_config(
        run,
        ["graph.processes=2", "cluster.learner_ranks=2", "eval_every=5", "stages.1.steps=4",
         'stages.2={"name": "rl4", "steps": 2}', "rl.max_staleness=2"],
        done_step=2,
    )  # fmt: skip
    assert (cfg.graph.processes, cfg.cluster.learner_ranks, cfg.eval_every) == (2, 2, 5)
    assert cfg.rl.max_staleness == 2  # a synchronous run may go on asynchronously
    assert [(s.name, s.steps) for s in cfg.stages] == [("rl1", 2), ("rl3", 4), ("rl4", 2)]


@pytest.mark.parametrize(
    ("item", "key"),
    [
        ("rl.algo=grpo", "--set rl.algo"),
        ("seed=3", "--set seed"),
        ("learner.lr=1", "--set learner.lr"),
        ('stages.0={"name": "x", "steps": 9}', "--set stages.0"),  # replaces a stage
    ],
)
def test_resume_refuses_what_defines_the_run(run: Path, item: str, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        resumed_config(run, [item], done_step=2)
    assert e.value.key == key


def test_resume_refuses_to_change_a_finished_stage_or_cut_done_steps(run: Path) -> None:
    with pytest.raises(ConfigError, match="stages.0.steps"):
        resumed_config(run, ["stages.0.steps=1"], done_step=3)
    data = json.loads((run / "config.json").read_text())
    data["stages"][1]["steps"] = 4  # rl3: steps 3..6, the run is at step 5
    (run / "config.json").write_text(json.dumps(data))
    assert resumed_config(run, ["stages.1.steps=3"], done_step=5).total_steps == 5
    with pytest.raises(ConfigError, match="at least the 5 steps"):
        resumed_config(run, ["stages.1.steps=2"], done_step=5)


def test_locate_takes_a_run_or_a_checkpoint(run: Path) -> None:
    assert locate(run) == (run, None)
    ck = run / "checkpoints" / "step-000002"
    assert locate(ck) == (run, ck)
    with pytest.raises(ConfigError, match="no config.json"):
        locate(run / "checkpoints")


@pytest.mark.parametrize(
    "flags", [["--algo", "grpo"], ["--seed", "1"], ["--quick"], ["--set", "rl.algo=grpo"]]
)
def test_train_resume_with_a_flag_that_defines_the_run_is_one_line_rc_2(
    run: Path, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "--resume", str(run), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "resume" in err[0], err


def test_resuming_a_finished_run_changes_nothing(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_checkpoint(run, 3, {"progress": {"step": 3}})
    (run / "metrics.jsonl").write_text('{"step": 3, "stage": "final"}\n')
    (run / "summary.json").write_text('{"wall_s": 12.5}')
    before = {p: p.read_bytes() for p in (run / "metrics.jsonl", run / "summary.json")}
    assert main(["train", "--resume", str(run)]) == 0
    assert "is finished (3 RL steps): nothing to resume" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in before} == before


def _scalars(run: Path, tag: str) -> list[int]:
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def test_a_resumed_metrics_log_keeps_each_step_once_in_jsonl_and_tensorboard(
    tmp_path: Path,
) -> None:
    log = MetricsLog(tmp_path)
    for step in (1, 2, 3):
        log.write({"step": step, "stage": "rl1", "reward_mean": step / 10})
    log.write({"step": 3, "stage": "final", "heldout_accuracy": 0.5})
    log.close()
    log = MetricsLog(tmp_path, resume_step=2)  # steps 3 and the final row are run again
    log.write({"step": 3, "stage": "rl1", "reward_mean": 0.3})
    log.close()
    assert [(r["step"], r["stage"]) for r in read_metrics(tmp_path / "metrics.jsonl")] == [
        (1, "rl1"),
        (2, "rl1"),
        (3, "rl1"),
    ]
    assert _scalars(tmp_path, "reward/mean") == [1, 2, 3]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3


def test_dry_run_json_prints_the_plan_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--quick", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["valid"] and plan["rl_steps"] == 5 and "plan" not in plan  # CPU: no GPU plan
    assert plan["processes"] == 1 and set(plan["placement"].values()) == {"main"}
    assert (
        main(["train", "--quick", "--dry-run", "--json", "--set", "graph.services_process=true"])
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["processes"] == 2 and plan["placement"]["scheduler"] == "services"
    assert (
        main(["train", "--config", "configs/paper_qwen3_14b_mi300x.toml", "--dry-run", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["plan"]["gpus"] == 64


def test_a_run_directory_that_cannot_be_written_is_one_line_rc_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # /sys refuses new entries even to root (a chmod'ed directory would not stop root)
    assert main(["train", "--quick", "--run-dir", "/sys/rstar2-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a writable directory" in err[0], err
