"""scripts/gpu_figures.py (the GPU session's one command): its plan, and the figures it reads
from a hand-made training run and benchmark results (no subprocess runs here)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_figures.py"
spec = importlib.util.spec_from_file_location("gpu_figures", SCRIPT)
assert spec is not None and spec.loader is not None
gpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu)


def test_the_plan_covers_both_qwen_shapes_plain_fsdp_checkpointing_and_both() -> None:
    plan = gpu.bench_plan(smoke=False)
    assert [name for name, _, _ in plan] == [
        f"{shape}-{v}"
        for shape in ("qwen2.5-0.5b", "qwen2.5-1.5b")
        for v in ("plain", "fsdp", "ac", "fsdp-ac")
    ]
    assert all("--bf16" in args for _, _, args in plan)
    assert [("--fsdp" in a, "--activation-checkpointing" in a) for _, _, a in plan[:4]] == [
        (False, False), (True, False), (False, True), (True, True)
    ]  # fmt: skip
    assert {shape for _, shape, _ in gpu.bench_plan(smoke=True)} == {"tiny"}


def test_missing_modules_and_last_json() -> None:
    assert gpu.missing_modules(("json", "no_such_module_xyz")) == ["no_such_module_xyz"]
    assert gpu.last_json('log line\n{"a": 1}\n\n') == {"a": 1}
    assert gpu.last_json("not json") is None and gpu.last_json("") is None


def test_training_figures_from_a_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "model-sft").mkdir(parents=True)
    (run / "model-sft" / "sft.json").write_text(json.dumps({"steps": 800, "seconds": 40.0}))
    rows = [
        {"step": 0, "stage": "sft", "heldout_accuracy": 0.25, "test_accuracy": 0.2},
        {"step": 1, "stage": "rl1", "step_s": 2.0, "time_gen_s": 1.0, "gen_tokens": 300.0,
         "time_learner_s": 0.5, "reward_mean": 0.4},
        {"step": 2, "stage": "rl1", "step_s": 5.0, "time_eval_s": 2.0, "time_gen_s": 2.0,
         "gen_tokens": 600.0, "time_learner_s": 0.7, "reward_mean": 0.6, "heldout_accuracy": 0.5},
        {"step": 2, "stage": "final", "test_accuracy": 0.45},
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = gpu.train_figures(run)
    assert got["sft_s"] == 40.0 and got["rl_steps"] == 2
    assert got["step_s_mean"] == pytest.approx(3.5)
    assert got["step_s_without_evals_mean"] == pytest.approx(2.5)
    assert got["gen_tokens_per_s"] == pytest.approx(300.0)
    assert got["time_learner_s_mean"] == pytest.approx(0.6)
    assert (got["validation_sft"], got["validation_last"], got["validation_last_step"]) == (
        0.25, 0.5, 2
    )  # fmt: skip
    assert (got["test_sft"], got["test_final"]) == (0.2, 0.45)
    assert got["finished"] is False  # no summary.json: a run cut short still gives its figures
    (run / "summary.json").write_text(json.dumps({"wall_s": 99.0}))
    assert gpu.train_figures(run)["wall_s"] == 99.0


def test_markdown_lists_failed_benchmarks_and_mfu_in_percent() -> None:
    ok = {"shape": "qwen2.5-0.5b", "variant": "fsdp", "model_params": 494_032_768,
          "tokens_per_s": 50_000.0, "mfu": 0.15, "peak_memory_mb": 20_000.0, "step_s": 0.66}  # fmt: skip
    bad = {"shape": "qwen2.5-1.5b", "variant": "plain", "error": "exit 1 (see gpu_figures.log)"}
    text = gpu.markdown({"environment": {"device": "NVIDIA H100", "torch": "2.11"},
                         "bench": {"a": ok, "b": bad}, "train": {"rl_steps": 3}})  # fmt: skip
    assert "| qwen2.5-0.5b | fsdp | 494.0M | 50,000 | 15.0% | 20,000 | 0.660 |" in text
    assert "failed: exit 1" in text and "| rl_steps | 3 |" in text


def test_a_failed_benchmark_is_retried_with_half_the_micro_batch() -> None:
    assert gpu.smaller_micro_batch(["--micro-batch", "4", "--bf16"]) == [
        "--micro-batch",
        "2",
        "--bf16",
    ]
    assert gpu.smaller_micro_batch(["--micro-batch", "1"]) == ["--micro-batch", "1"]
    assert gpu.smaller_micro_batch(["--bf16"]) == ["--bf16"]
