"""`rstar2 bench learner`: figures from a real update on 1 and 2 ranks, bad flags refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from rstar2.cli import main
from rstar2.learner import logprob_head
from rstar2.learner.workload import fixed_batch as synthetic_batch
from rstar2.model.loader import load_model

KEYS = {"model_params", "ranks", "device", "tokens_per_s", "step_s", "peak_memory_mb", "mfu"}


def _bench(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "-q", "bench", "learner", "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_bench_learner_reports_every_figure(ranks: int) -> None:
    got = _bench("--ranks", str(ranks), "--rollouts", "4", "--tokens", "16", "--steps", "1")
    assert KEYS <= got.keys()
    assert got["ranks"] == ranks and got["device"] == "cpu" and got["mfu"] is None
    assert got["model_params"] > 900_000  # the tiny default (~1.0M)
    assert got["tokens_per_s"] == pytest.approx(4 * 16 / got["step_s"])
    assert got["peak_memory_mb"] > 50


def test_fsdp_on_one_rank_runs_the_sharded_path(capsys: pytest.CaptureFixture[str]) -> None:
    """`--fsdp` with one rank (a single GPU's only way to run FSDP2 and NCCL): the policy is
    sharded in a one-rank group (here with activation checkpointing and bf16 as well, as
    scripts/gpu_figures.py runs it); without it, the plain model."""
    small = ["--rollouts", "2", "--tokens", "16", "--steps", "1", "--micro-batch", "2", "--json"]
    got = []
    for extra in (
        ["--fsdp", "--activation-checkpointing", "--bf16"],
        ["--activation-checkpointing"],
    ):
        assert main(["-q", "bench", "learner", *small, *extra]) == 0
        got.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert got[0]["fsdp"] is True and got[0]["activation_checkpointing"] and got[0]["bf16"]
    # one rank keeps the gathered parameters from forward to backward (nothing to free for)
    assert got[0]["reshard_after_forward"] is False and got[1]["reshard_after_forward"] is None
    assert got[0]["time_split_s"]["backward"] > 0 and got[0]["packed"] is True
    assert got[1]["fsdp"] is False and got[1]["activation_checkpointing"] is True
    assert not dist.is_initialized()  # the one-rank group is left at the end


def test_a_model_directory_is_benchmarked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--model DIR` (how scripts/gpu_figures.py benchmarks the Qwen shapes): the figures are
    of that model, not the built-in default."""
    config = tmp_path / "model.toml"
    config.write_text("[model.tiny]\nhidden_size = 32\nnum_layers = 1\nintermediate_size = 64\n")
    model_dir = tmp_path / "model"
    assert main(["-q", "init-model", str(model_dir), "--config", str(config)]) == 0
    capsys.readouterr()
    model, _ = load_model(model_dir)
    small = ["--rollouts", "2", "--tokens", "16", "--steps", "1", "--json"]
    assert main(["-q", "bench", "learner", "--model", str(model_dir), *small]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["model_params"] == sum(p.numel() for p in model.parameters()) < 900_000


def test_the_batch_is_fixed_and_masks_its_prompt() -> None:
    a, b = synthetic_batch(100, 3, 16), synthetic_batch(100, 3, 16)
    assert [r.token_ids for r in a.rollouts] == [r.token_ids for r in b.rollouts]
    assert a.rollouts[0].loss_mask == [0] * 4 + [1] * 12
    assert a.advantages == [-1.0, 1.0, -1.0]


@pytest.mark.parametrize(
    "flag, value", [("--ranks", "0"), ("--steps", "0"), ("--tokens", "4"), ("--bucket-mb", "0")]
)
def test_bad_counts_are_refused_naming_the_flag(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "learner", flag, value]) == 2
    assert flag in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, value", [("--checkpoint-every", "2"), ("--checkpoint-policy", "selective")]
)
def test_checkpointing_settings_without_checkpointing_are_refused(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """They would change nothing: a benchmark labelled with them would measure the plain
    model."""
    assert main(["bench", "learner", flag, value]) == 2
    err = capsys.readouterr().err
    assert flag in err and "without --activation-checkpointing" in err


def test_a_compile_mode_without_compile_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "learner", "--compile-mode", "reduce-overhead"]) == 2
    err = capsys.readouterr().err
    assert "--compile-mode" in err and "without --compile" in err


@pytest.mark.slow
@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
    reason="torch.compile on the CPU needs a C++ compiler",
)
def test_compile_head_is_passed_through_and_reported(capsys: pytest.CaptureFixture[str]) -> None:
    """`--compile-head` runs the update with the head's element-wise work compiled (inductor
    on the CPU here) and says so in the JSON, as `--compile` does; off by default."""
    small = ["--rollouts", "2", "--tokens", "16", "--steps", "1", "--no-push", "--json"]
    got = []
    logprob_head._compiled.cache_clear()
    for extra in (["--compile-head"], []):
        assert main(["-q", "bench", "learner", *small, *extra]) == 0
        got.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
        if extra:  # both element-wise functions went through torch.compile
            assert logprob_head._compiled.cache_info().currsize == 2
    assert got[0]["compile_head"] is True and got[0]["packed"] is True
    assert got[0]["time_split_s"]["head_backward"] > 0
    assert got[1]["compile_head"] is False and got[1]["compile"] is False
    # what torch.compile built: the two functions' graphs, without a break; nothing unasked
    assert got[0]["compiled"]["graphs"] == 2 and got[0]["compiled"]["graph_breaks"] == {}
    assert got[1]["compiled"] is None


def test_profile_counts_fsdp2_units_and_names_the_top_operations(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--profile`: one more update under torch.profiler. FSDP2's hooks run once per unit and
    micro-batch: the tiny default's 4 layers and the root per-layer (`--shard-per-layer`), the
    root alone by default on one rank; without FSDP2 there are none, and without `--profile`
    no profile."""
    small = ["--rollouts", "2", "--tokens", "16", "--steps", "1", "--micro-batch", "1", "--json"]
    got = {}
    for name, extra in (
        ("per-layer", ["--fsdp", "--shard-per-layer", "--profile"]),
        ("one-unit", ["--fsdp", "--profile"]),
        ("plain", ["--profile"]),
        ("unprofiled", []),
    ):
        assert main(["-q", "bench", "learner", *small, *extra]) == 0
        got[name] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["per-layer"]["shard_per_layer"] is True
    assert got["one-unit"]["shard_per_layer"] is False and got["plain"]["shard_per_layer"] is None
    micro_batches = 2
    assert got["per-layer"]["profile"]["fsdp"]["FSDP::pre_forward"]["calls"] == 5 * micro_batches
    assert got["one-unit"]["profile"]["fsdp"]["FSDP::pre_forward"]["calls"] == micro_batches
    assert got["plain"]["profile"]["fsdp"] == {}
    ops = got["plain"]["profile"]["ops"]
    assert 0 < len(ops) <= 15 and not any(op["name"].startswith("FSDP::") for op in ops)
    assert any("mm" in op["name"] for op in ops)  # the matmuls are among the top
    cpu = [op["self_cpu_ms"] for op in ops]
    assert cpu == sorted(cpu, reverse=True) and got["plain"]["profile"]["cpu_ms"] >= sum(cpu)
    assert got["unprofiled"]["profile"] is None
