"""scripts/gpu_figures.py (the GPU session's one command): its plan, its workers (at toy
size), the figures it reads from a hand-made training run and benchmark results, its Markdown
(gpu_markdown.py) and a check (gpu_checks.py)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
# the script imports its sibling modules (gpu_checks, gpu_markdown), as `python3
# scripts/gpu_figures.py` finds them: its directory on the path
sys.path.insert(0, str(SCRIPTS))
gpu = importlib.import_module("gpu_figures")
checks = importlib.import_module("gpu_checks")
md = importlib.import_module("gpu_markdown")


def test_the_plan_covers_before_and_after_each_optimisation_alone_and_both_workloads() -> None:
    plan = gpu.bench_plan(smoke=False)
    names = [name for name, _, _ in plan]
    assert names[:4] == [  # the head of the list survives a deadline
        "qwen2.5-0.5b-before-plain", "qwen2.5-1.5b-before-plain",
        "qwen2.5-0.5b-plain", "qwen2.5-1.5b-plain",
    ]  # fmt: skip
    assert len(names) == len(set(names))
    assert all("--bf16" in args and "--no-push" in args for _, _, args in plan)
    by_name = {v: set(a) for v, a, _ in gpu.VARIANTS}
    assert {"--padded", "--reshard"} <= by_name["before-plain"] and "--compile" not in (
        by_name["before-plain"]
    )
    # what train runs on a GPU, profiled after its timed updates
    assert by_name["plain"] == {"--compile", "--compile-head", "--profile"}
    assert by_name["plain"] ^ by_name["no-compile-head"] == {"--compile-head", "--profile"}
    assert by_name["packed-alone"] == set()
    # each optimisation alone differs from its "before" by that optimisation only
    for alone, before, flags in (
        ("compile-alone", "before-plain", {"--compile"}),
        ("fsdp-keep-alone", "before-fsdp", {"--reshard"}),
        ("fsdp-defer-alone", "before-fsdp", {"--sync-every-micro-batch"}),
        ("fsdp-one-unit-alone", "before-fsdp", {"--shard-per-layer"}),
        ("fsdp-ac", "fsdp-ac-per-layer", {"--shard-per-layer"}),
        ("fsdp-ac-per-layer", "fsdp-ac-per-layer-sync-every", {"--sync-every-micro-batch"}),
        ("ac-every-2-alone", "before-ac", {"--checkpoint-every", "2"}),
        ("ac-selective-alone", "before-ac", {"--checkpoint-policy", "selective"}),
        ("fsdp-ac-selective", "fsdp-ac", {"--checkpoint-policy", "selective"}),
        (
            "fsdp-ac-selective-micro-batch-4k",
            "fsdp-ac-selective",
            {"--micro-batch", "2", "--profile"},
        ),
    ):
        assert by_name[alone] ^ by_name[before] == flags
    assert by_name["plain-micro-batch-16k"] == {"--compile", "--compile-head", "--micro-batch", "8"}
    assert {"--workload", "rl"} <= by_name["rl-plain"] and "--padded" not in by_name["rl-plain"]
    assert {"--workload", "rl", "--padded"} <= by_name["rl-before-plain"]
    assert {shape for _, shape, _ in gpu.bench_plan(smoke=True)} == {"tiny"}
    only = gpu.select(plan, "qwen2.5-1.5b-plain,qwen2.5-0.5b-before-plain")
    assert [n for n, _, _ in only] == ["qwen2.5-1.5b-plain", "qwen2.5-0.5b-before-plain"]
    with pytest.raises(SystemExit):
        gpu.select(plan, "qwen2.5-0.5b-nonsense")


@pytest.mark.slow
def test_the_worker_measures_entries_one_after_another(tmp_path: Path) -> None:
    """One process, several benchmarks: figures for good arguments, an error line for bad
    ones, and the worker goes on."""
    from rstar2.model.tiny import init_model
    from rstar2.model.tiny_config import shaped_config

    model = tmp_path / "tiny"
    init_model(model, shaped_config("tiny"))
    worker = gpu.BenchWorker(["--worker", str(model)], tmp_path / "log")
    small = ["--rollouts", "2", "--tokens", "64", "--steps", "1", "--no-push", "--json"]
    try:
        first = worker.measure([*small, "--workload", "rl"], timeout_s=120)
        bad = worker.measure([*small, "--head-chunk", "0"], timeout_s=120)
        second = worker.measure([*small, "--padded"], timeout_s=120)
    finally:
        worker.close()
    assert first["ok"]["packed"] is True and first["ok"]["workload"] == "rl"
    assert first["ok"]["attention"] == ["sdpa-per-sequence"] and first["ok"]["tokens_per_s"] > 0
    assert "head-chunk" in bad["error"]
    assert second["ok"]["packed"] is False
    assert second["ok"]["attention"] == []  # the first entry's kernels are not carried over


def test_the_engine_worker_measures_engine_entries_one_after_another(tmp_path: Path) -> None:
    """`bench engine` entries in one process: the figures of each (its own arguments), an
    error line for arguments that cannot run, and the worker goes on."""
    worker = gpu.BenchWorker(["--engine-worker"], tmp_path / "log")
    small = ["--requests", "4", "--max-tokens", "8", "--batch-sizes", "4", "--json"]
    try:
        first = worker.measure([*small, "--decode", "fixed", "--decode-steps", "4"], 120)
        bad = worker.measure([*small, "--decode", "dynamic", "--decode-steps", "4"], 120)
        second = worker.measure([*small, "--turns", "2"], 120)
    finally:
        worker.close()
    assert (first["ok"]["decode"], first["ok"]["decode_steps"], first["ok"]["turns"]) == (
        "fixed",
        4,
        1,
    )
    assert first["ok"]["engine_tok_s"] > 0 and first["ok"]["engine_round_steps"] > 0
    assert "--decode-steps" in bad["error"]
    assert (second["ok"]["decode"], second["ok"]["turns"]) == ("dynamic", 2)


def test_missing_modules_and_last_json() -> None:
    assert gpu.missing_modules(("json", "no_such_module_xyz")) == ["no_such_module_xyz"]
    assert gpu.last_json('log line\n{"a": 1}\n\n') == {"a": 1}
    assert gpu.last_json("not json") is None and gpu.last_json("") is None


def test_training_figures_from_a_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "model-sft").mkdir(parents=True)
    sft = {"steps": 800, "seconds": 40.0, "final_loss": 0.1, "skipped_steps": [7, 9]}
    (run / "model-sft" / "sft.json").write_text(json.dumps(sft))
    rows = [
        {"step": 0, "stage": "sft", "heldout_accuracy": 0.25, "test_accuracy": 0.2},
        {"step": 1, "stage": "rl1", "step_s": 2.0, "time_gen_s": 1.0, "gen_tokens": 300.0,
         "time_learner_s": 0.5, "reward_mean": 0.4, "skipped_updates": 1.0,
         "weights_bus_bytes": 17.0},  # no engine figures: the first step after a resume
        {"step": 2, "stage": "rl1", "step_s": 5.0, "time_eval_s": 2.0, "time_gen_s": 2.0,
         "time_tool_s": 0.7, "time_reward_s": 0.3, "gen_tokens": 600.0, "time_learner_s": 0.7, "reward_mean": 0.6, "heldout_accuracy": 0.5,
         "engine_steps": 100.0, "engine_step_s": 1.5, "engine_wait_s": 0.5,
         "engine_round_steps": 60.0, "engine_prefill_steps": 10.0, "engine_prefill_s": 0.6,
         "loop_cpu_s": 1.2, "worker_loop_cpu_s": 2.4},
        {"step": 2, "stage": "final", "test_accuracy": 0.45},
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = gpu.train_figures(run)
    assert got["sft_s"] == 40.0 and got["rl_steps"] == 2
    assert (got["sft_final_loss"], got["sft_skipped_steps"], got["skipped_updates"]) == (
        0.1,
        2,
        1.0,
    )
    assert got["weights_bus_bytes_mean"] == 17.0
    assert got["step_s_mean"] == pytest.approx(3.5)
    assert got["step_s_without_evals_mean"] == pytest.approx(2.5)
    assert got["gen_tokens_per_s"] == pytest.approx(300.0)
    # over the rollout phases' wall time: 1.0 s (generation alone), then 3.0 s
    assert got["gen_tokens_per_phase_s"] == pytest.approx(900.0 / 4.0)
    assert got["time_learner_s_mean"] == pytest.approx(0.6)
    assert got["time_tool_s_mean"] == pytest.approx(0.7)  # the one row that has it
    # engine figures from the rows that have them: 1.5 s in 100 steps of the rollout phase's
    # 3.0 s (generation 2.0, tools 0.7, reward 0.3, as the step's wall time was apportioned)
    assert got["engine_busy_share"] == pytest.approx(0.5)
    assert (got["engine_step_ms"], got["engine_host_ms"], got["engine_wait_ms"]) == (
        pytest.approx(15.0),
        pytest.approx(10.0),
        pytest.approx(5.0),
    )
    assert got["gen_tokens_per_engine_s"] == pytest.approx(400.0)
    # one RL step with engine figures: 100 engine steps, 600 tokens
    assert got["engine_steps_per_rl_step"] == 100.0
    assert got["gen_tokens_per_engine_step"] == pytest.approx(6.0)
    assert got["engine_round_share"] == pytest.approx(0.6)
    # 0.6 s of the 1.5 s in 10 prefill steps (60 ms each), 0.9 s in the other 90 (10 ms)
    assert got["engine_prefill_share"] == pytest.approx(0.4)
    assert got["engine_prefill_step_ms"] == pytest.approx(60.0)
    assert got["engine_decode_step_ms"] == pytest.approx(10.0)
    # the event loop ran 1.2 s of the rollout phase's 3.0 s
    assert got["loop_cpu_s_mean"] == pytest.approx(1.2)
    assert got["loop_cpu_share"] == pytest.approx(0.4)
    # the busiest rollout worker's loop (its own process) ran 2.4 s of them
    assert got["worker_loop_cpu_s_mean"] == pytest.approx(2.4)
    assert got["worker_loop_cpu_share"] == pytest.approx(0.8)
    assert (got["validation_sft"], got["validation_last"], got["validation_last_step"]) == (
        0.25, 0.5, 2
    )  # fmt: skip
    assert (got["test_sft"], got["test_final"]) == (0.2, 0.45)
    assert got["finished"] is False  # no summary.json: a run cut short still gives its figures
    (run / "summary.json").write_text(json.dumps({"wall_s": 99.0}))
    assert gpu.train_figures(run)["wall_s"] == 99.0


def test_a_run_whose_engine_counts_no_steps_still_has_its_loop_and_phase_figures(
    tmp_path: Path,
) -> None:
    """The instant engine (`cluster.engine_backend = "instant"`) runs no engine steps: no
    engine figures, but the event loops' and the rollout phase's."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"step": s, "stage": "rl1", "step_s": 0.5, "time_gen_s": 0.02, "time_tool_s": 0.3,
         "time_reward_s": 0.08, "gen_tokens": 7000.0, "reward_mean": 0.2, "loop_cpu_s": 0.1,
         "worker_loop_cpu_s": 0.1 * s}
        for s in (1, 2)
    ]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = gpu.train_figures(run)
    assert "engine_busy_share" not in got
    assert got["gen_tokens_per_s"] == pytest.approx(7000.0 / 0.02)
    assert got["gen_tokens_per_phase_s"] == pytest.approx(7000.0 / 0.4)
    assert (got["loop_cpu_s_mean"], got["loop_cpu_share"]) == (
        pytest.approx(0.1), pytest.approx(0.25)
    )  # fmt: skip
    assert got["worker_loop_cpu_share"] == pytest.approx(0.3 / 0.8)


def test_markdown_lists_failed_benchmarks_and_mfu_in_percent() -> None:
    ok = {"shape": "qwen2.5-0.5b", "variant": "fsdp", "model_params": 494_032_768,
          "tokens_per_s": 50_000.0, "mfu": 0.15, "peak_memory_mb": 20_000.0, "step_s": 0.66}  # fmt: skip
    bad = {"shape": "qwen2.5-1.5b", "variant": "plain", "error": "exit 1 (see gpu_figures.log)"}
    text = md.markdown({"environment": {"device": "NVIDIA H100", "torch": "2.11"},
                         "bench": {"a": ok, "b": bad}, "train": {"rl_steps": 3}})  # fmt: skip
    assert "| qwen2.5-0.5b | fsdp | 494.0M | 50,000 | 15.0% | 20,000 | 0.660 |" in text
    assert "failed: exit 1" in text and "| rl_steps | 3 |" in text


def test_markdown_has_a_line_per_profiled_benchmark() -> None:
    profile = {
        "ops": [{"name": "aten::mm", "calls": 96, "self_cpu_ms": 4.0, "self_device_ms": 120.5}],
        "fsdp": {"FSDP::pre_forward": {"calls": 4, "cpu_ms": 2.25, "device_ms": 0.0}},
        "cpu_ms": 300.0, "device_ms": 310.0,
    }  # fmt: skip
    b = {"shape": "qwen2.5-0.5b", "variant": "fsdp-ac", "model_params": 494_032_768,
         "tokens_per_s": 50_000.0, "mfu": 0.15, "peak_memory_mb": 20_000.0, "step_s": 0.66}  # fmt: skip
    text = md.markdown({"bench": {"qwen2.5-0.5b-fsdp-ac": {**b, "profile": profile},
                                   "qwen2.5-0.5b-plain": b}})  # fmt: skip
    assert (
        "Profile, qwen2.5-0.5b-fsdp-ac: device 310.0 ms in all; top: aten::mm 120.5 (96); "
        "FSDP2 ranges, host ms (calls): pre_forward 2.2 (4)"
    ) in text
    assert "Profile, qwen2.5-0.5b-plain" not in text
    # the GPU's busy time (op_profile.device_busy), against the profiled and an unprofiled update
    busy = {**profile, "wall_ms": 500.0, "device_busy_ms": 290.0, "device_idle_share": 0.42}
    text = md.markdown({"bench": {"y": {**b, "profile": busy}}})
    assert (
        "Profile, y: device 310.0 ms in all (busy 290.0 ms of the profiled 500.0, 44% of an "
        "unprofiled update's 0.660 s); top:"
    ) in text
    on_cpu = {**profile, "device_ms": 0.0, "fsdp": {}}
    text = md.markdown({"bench": {"x": {**b, "profile": on_cpu}}})
    assert "Profile, x: cpu 300.0 ms in all; top: aten::mm 4.0 (96)\n" in text


def test_markdown_names_entries_whose_layers_did_not_compile_cleanly() -> None:
    b = {"shape": "tiny", "variant": "v", "model_params": 1e6, "tokens_per_s": 1.0, "mfu": None,
         "peak_memory_mb": 1.0, "step_s": 1.0}  # fmt: skip
    text = md.markdown({"bench": {
        "clean": {**b, "compiled": {"graphs": 26, "graph_breaks": {}}},
        "eager": {**b, "compiled": {"graphs": 0, "graph_breaks": {"Data dependent operator": 1}}},
        "uncompiled": {**b, "compiled": None},
        "replayed": {**b, "compiled": {"graphs": 26, "graph_breaks": {}, "cudagraph_skips": 0}},
        "unreplayed": {**b, "compiled": {"graphs": 26, "graph_breaks": {}, "cudagraph_skips": 2}},
    }})  # fmt: skip
    assert "Compile, eager: 0 graphs; graph breaks: Data dependent operator (1)\n" in text
    # reduce-overhead's graphs that ran without CUDA graphs are named too
    assert "Compile, unreplayed: 26 graphs; graph breaks: none; 2 ran without CUDA graphs" in text
    assert "Compile, replayed" not in text
    assert "Compile, clean" not in text and "Compile, uncompiled" not in text


def test_a_failed_benchmark_is_retried_with_half_the_micro_batch() -> None:
    assert gpu.smaller_micro_batch(["--micro-batch", "4", "--bf16"]) == [
        "--micro-batch",
        "2",
        "--bf16",
    ]
    assert gpu.smaller_micro_batch(["--micro-batch", "1"]) == ["--micro-batch", "1"]
    assert gpu.smaller_micro_batch(["--bf16"]) == ["--bf16"]
    # a variant's own --micro-batch after the batch's: the one argparse takes is halved
    assert gpu.smaller_micro_batch(["--micro-batch", "4", "--micro-batch", "8"]) == [
        "--micro-batch", "4", "--micro-batch", "4"
    ]  # fmt: skip


def test_the_engine_plan_measures_each_shape_then_the_paths_before() -> None:
    plan = gpu.engine_plan(smoke=False)
    names = [name for name, _ in plan]
    fixed = ["25m-fixed", "tiny-fixed", "qwen2.5-0.5b-fixed", "qwen2.5-1.5b-fixed"]
    assert [n for n in names if n.endswith("-fixed")] == fixed
    assert names.index("qwen2.5-1.5b-fixed") < min(names.index(n) for n in names if "dyn" in n)
    for shape in ("tiny", "25m", "qwen2.5-0.5b"):  # each beside its rounds of 8
        assert names[names.index(f"{shape}-fixed") + 1] == f"{shape}-fixed-rounds-8"
    for name, args in plan:
        want = "dynamic" if "dynamic" in name else "fixed"
        assert args[args.index("--decode") + 1] == want
        assert ("--no-cuda-graphs" in args) == name.endswith("no-graphs")
        assert ("bfloat16" in args) == name.startswith("qwen")
        rounds = args[args.index("--decode-steps") + 1] if "--decode-steps" in args else "1"
        assert rounds == ("8" if "rounds-8" in name else "1")
        turns = args[args.index("--turns") + 1] if "--turns" in args else "1"
        assert turns == ("4" if "turns-4" in name else "1")
        graphed = args[args.index("--prefill-graphs") + 1] if "--prefill-graphs" in args else "0"
        assert graphed == ("64" if name.endswith("prefill-64") else "0")
    for shape in ("tiny", "25m"):  # multi-turn, each beside the same with prefill graphs
        turns = f"{shape}-fixed-rounds-8-turns-4"
        assert names[names.index(turns) + 1] == f"{turns}-prefill-64"
    smoke = gpu.engine_plan(smoke=True)
    assert smoke and all(name.startswith("tiny") and "8" in args for name, args in smoke)


def test_markdown_has_the_engine_table_and_check() -> None:
    results = {
        "engine_check": {"device": "cuda", "tiny_float32": {"graphs_equal_hf_generate": 12}},
        "engine": {
            "tiny-fixed": {
                "decode": "fixed",
                "params": 1_050_752,
                "engine_tok_s": 32559.1,
                "hf_generate_tok_s": 20615.1,
                "hf_best_batch_size": 256,
                "ratio": 1.58,
                "decode_graphs": {"graphs": 9},
            },  # fmt: skip
            "tiny-fixed-rounds-8": {
                "decode": "fixed",
                "decode_steps": 8,
                "params": 1_050_752,
                "engine_tok_s": 61000.0,
                "hf_generate_tok_s": 20615.1,
                "hf_best_batch_size": 256,
                "ratio": 2.96,
                "decode_graphs": {"graphs": 9},
                "prefill_graphs": {"shapes": 2, "graphs": 1, "capture_failures": 1},
            },  # fmt: skip
            "qwen2.5-1.5b-fixed": {"error": "skipped: past the 140 s deadline"},
        },
        "engine_host_split": {
            "tiny": {
                "rows_per_step": 76.9,
                "step_ms": 1.9,
                "steps": 300,
                "prefill_steps": 12,
                "ms_per_step": {"wait": 1.2, "fill": 0.2},
            },
            "25m": {"error": "timed out"},
        },
    }
    text = md.markdown(results)
    assert (
        "Engine host split, tiny (76.9 rows, 1.900 ms a step, 12 of 300 steps prefilled): "
        "wait 1.200, fill 0.200 ms" in text
    )
    assert "Engine host split, 25m: failed: timed out" in text
    assert "graphs_equal_hf_generate" in text
    assert "| tiny-fixed | fixed | 1.1M | 32,559 | 20,615 (256) | 1.58 | {'graphs': 9} |" in text
    assert (
        "| 2.96 | {'graphs': 9}; prefills {'shapes': 2, 'graphs': 1, 'capture_failures': 1} |"
    ) in text
    assert "| tiny-fixed-rounds-8 | fixed, rounds of 8 | 1.1M | 61,000 |" in text
    assert "| qwen2.5-1.5b-fixed | failed: skipped: past the 140 s deadline |" in text


def test_the_host_split_runs_as_the_engine_part_calls_it(tmp_path: Path) -> None:
    """The host splits run in the engine worker, between `bench engine` entries: each gives
    its parts, and an entry after them still measures."""
    commands = gpu.host_split_commands("cpu", smoke=True)
    assert [gpu.split_name(c) for c in commands] == [
        "tiny", "tiny-rounds-8", "tiny-rounds-8-turns-4", "tiny-rounds-8-turns-4-prefill-64"
    ]  # fmt: skip
    full = gpu.host_split_commands("cuda", smoke=False)
    assert [gpu.split_name(c) for c in full] == [
        "tiny", "tiny-rounds-8", "25m", "25m-rounds-8", "25m-rounds-8-turns-4",
        "25m-rounds-8-turns-4-prefill-64",
    ]  # fmt: skip
    assert all(c[0] == "host-split" and c[c.index("--device") + 1] == "cuda" for c in full)
    worker = gpu.BenchWorker(["--engine-worker"], tmp_path / "log")
    try:
        got, rounds, turns, graphed = (worker.measure(c, 120)["ok"] for c in commands)
        bad = worker.measure(["host-split", "--requests", "0"], 120)
        entry = worker.measure(["--requests", "4", "--max-tokens", "8", "--batch-sizes", "4"], 120)
    finally:
        worker.close()
    assert got.get("decode") == "fixed" and got["ms_per_step"]["fill"] >= 0, got
    assert got["decode_steps"] == 1
    assert rounds["decode_steps"] == 8 and rounds["ms_per_step"]["round"] >= 0, rounds
    assert turns["turns"] == 4 and turns["prefill_steps"] > 0, turns
    assert turns["prefill_graph_tokens"] == 0 and "forward" in turns["ms_per_step"]
    assert turns["aten_ops_per_prefill_step"]["dynamic"] > 100
    assert graphed["prefill_graph_tokens"] == 64 and graphed["ms_per_step"]["prefill"] > 0
    assert graphed["aten_ops_per_prefill_step"]["fixed_fill"] <= 8
    assert "--requests must be >= 1" in bad["error"]
    assert entry["ok"]["engine_tok_s"] > 0


def test_the_prefill_groups_check_compares_a_mixed_step_with_the_models_forward() -> None:
    from rstar2.engine.benchmark import random_model

    got = checks.prefill_groups_check(random_model("tiny", 0), "cpu")
    assert got["logit_max_abs_diff"] < 1e-4
    assert got["fixed_prefill_logprob_max_abs_diff"] < 1e-4
    assert got["fixed_prefill"]["shapes"] == 1  # no graphs on the CPU
    # every kind of attention call the engine makes was seen, with torch's chosen kernel
    backends = got["sdpa_backends"]
    assert set(backends) == {"decode", "fresh_prefill", "continuation", "fixed_prefill"}
    assert all(names and "unknown" not in " ".join(names) for names in backends.values())


def test_a_worker_that_timed_out_starts_again_for_the_next_measurement(tmp_path: Path) -> None:
    """A timeout closes the worker's process; the next measurement starts another, no caller
    has to replace the worker."""
    worker = gpu.BenchWorker(["--engine-worker"], tmp_path / "log")
    small = ["--requests", "4", "--max-tokens", "8", "--batch-sizes", "4", "--json"]
    try:
        assert not worker.alive  # nothing started before the first measurement
        late = worker.measure(small, 0.01)
        assert late["error"].startswith("timed out") and not worker.alive
        again = worker.measure(small, 120)
    finally:
        worker.close()
    assert again["ok"]["engine_tok_s"] > 0


def test_a_timed_out_workers_end_of_output_does_not_reach_the_next_worker(tmp_path: Path) -> None:
    """The killed process's reader may read its end of output only after the next process
    started (it did under load: the next measurement then took it for its own worker's death
    and waited on a live process for ever). Here it always does."""

    class LateReader(gpu.BenchWorker):
        first: object = None

        def _read(self, proc, lines) -> None:  # type: ignore[no-untyped-def]
            if LateReader.first is None:
                LateReader.first = proc
            while proc is LateReader.first and self.proc in (proc, None):
                time.sleep(0.01)  # until the next process has started
            super()._read(proc, lines)

    worker = LateReader(["--engine-worker"], tmp_path / "log")
    small = ["--requests", "4", "--max-tokens", "8", "--batch-sizes", "4", "--json"]
    try:
        assert worker.measure(small, 0.01)["error"].startswith("timed out")
        again = worker.measure(small, 120)
    finally:
        worker.close()
    assert again["ok"]["engine_tok_s"] > 0, again


def test_the_wide_run_starts_from_the_sft_model_with_four_times_the_rollouts(
    tmp_path: Path,
) -> None:
    from rstar2.train.config import load_train_config

    sft = tmp_path / "run" / "model-sft"
    base = load_train_config("configs/gpu_20m.toml")
    sets = gpu.wide_settings(sft, 8, base)
    assert f"model.path={sft}" in sets and "sft.steps=0" in sets and "eval_every=0" in sets
    cfg = load_train_config("configs/gpu_20m.toml", sets=sets)
    assert cfg.prompts_per_step == 4 * base.prompts_per_step == 64
    assert cfg.engine.max_num_seqs == 4 * base.engine.max_num_seqs == 512
    assert cfg.engine.kv_budget_tokens == 4 * base.engine.kv_budget_tokens
    assert cfg.sandbox.concurrency == 2 * base.sandbox.concurrency == 16
    assert [s.steps for s in cfg.stages] == [8] and cfg.heldout_problems == 0
    base = load_train_config(None, quick=True)
    cfg = load_train_config(None, quick=True, sets=gpu.wide_settings(sft, 2, base))
    assert cfg.prompts_per_step == 4 * base.prompts_per_step
    assert cfg.engine.max_num_seqs == 4 * base.engine.max_num_seqs
    assert cfg.sandbox.concurrency == 2 * base.sandbox.concurrency


def test_the_engine_part_starts_nothing_past_its_deadline_but_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a command cut off by the device budget brings back only what it wrote: past --deadline
    # the engine part measures neither host splits nor entries, and says so for each
    measured: list[list[str]] = []

    class Worker:
        def __init__(self, mode: list[str], log: Path) -> None: ...

        def measure(self, args: list[str], timeout_s: float) -> dict:
            measured.append(args)
            return {"error": "not measured: a stand-in worker"}

        def close(self) -> None: ...

    monkeypatch.setattr(gpu, "BenchWorker", Worker)
    monkeypatch.setattr(gpu, "run_check", lambda command, timeout_s: {"greedy_equal": True})
    monkeypatch.setattr(gpu, "missing_modules", lambda: [])
    out = tmp_path / "out"
    argv = ["--out", str(out), "--work", str(tmp_path / "w"), "--part", "engine", "--smoke"]
    assert gpu.main([*argv, "--deadline", "1e-9"]) == 0
    got = json.loads((out / "gpu_figures.json").read_text())
    assert measured == [] and got["engine_check"] == {"greedy_equal": True}
    skipped = [*got["engine_host_split"].values(), *got["engine"].values()]
    assert len(skipped) == len(gpu.host_split_commands("cpu", True)) + len(gpu.engine_plan(True))
    assert all(f["error"].startswith("skipped: past the") for f in skipped)
    assert gpu.main([*argv, "--deadline", "0"]) == 0  # no deadline: every one measured
    assert len(measured) == len(skipped)


def test_the_packed_check_takes_the_updates_attention_path_and_reports_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--check-packed` decides varlen as the update does (`packing.check_varlen`, before the
    forward: on a GPU the varlen kernel is the path to check) and reports the kernel it took;
    on this CPU one SDPA call per sequence. The packed log-probs agree with the padded
    full-logits reference within bf16's precision."""
    from rstar2.learner import packing

    asked = []
    check_varlen = packing.check_varlen

    def recording(model, device, dtype):  # type: ignore[no-untyped-def]
        asked.append((device.type, dtype))
        return check_varlen(model, device, dtype)

    monkeypatch.setattr(packing, "check_varlen", recording)
    monkeypatch.setattr(packing, "attention_paths", set())
    got = checks.packed_check("cpu")
    assert asked == [("cpu", torch.bfloat16)]
    assert got["attention"] == ["sdpa-per-sequence"]
    assert got["logprob_max_abs_diff"] < 0.05 and got["grad_relative_diff"] < 0.05


def test_variant_runs_start_from_the_sft_model_with_their_own_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rstar2.train.config import load_train_config

    ran: list[tuple[str, list[str]]] = []

    def fake_run(run_dir: Path, args: list[str], timeout: float, log: Path, settings: list[str]):
        ran.append((run_dir.name, args))
        return {"exit": 0, "rl_steps": 3, "gen_tokens_per_s": 1234.5, "set": settings}

    monkeypatch.setattr(gpu, "training_run", fake_run)
    monkeypatch.setattr(gpu, "missing_modules", lambda: [])
    out, work = tmp_path / "out", tmp_path / "w"
    argv = ["--out", str(out), "--work", str(work), "--part", "variants", "--variant-steps", "3"]
    variants = ["--variant", "as-is:", "--variant", "python-5ms:graph.switch_interval_ms=5"]
    assert gpu.main([*argv, *variants]) == 0  # no SFT model yet: each variant says so
    got = json.loads((out / "gpu_figures.json").read_text())["train_variants"]
    assert ran == [] and all("run --part train first" in v["error"] for v in got.values())
    sft = work / "run" / "model-sft"
    sft.mkdir(parents=True)
    (sft / "config.json").write_text("{}")
    assert gpu.main([*argv, *variants, "--train-set", "engine.decode_steps=1"]) == 0
    assert [name for name, _ in ran] == ["variant-as-is", "variant-python-5ms"]
    sets = [a for _, args in ran for a in args[args.index("--config") :] if a != "--set"]
    assert sets[:3] == ["--config", "configs/gpu_20m.toml", "engine.decode_steps=1"]
    (_, five), (_, as_is) = ran[1], ran[0]
    assert five[-1] == "graph.switch_interval_ms=5" and as_is[-1].startswith("stages=")
    cfg = load_train_config("configs/gpu_20m.toml", sets=[a for a in five[3:] if a != "--set"])
    assert (cfg.graph.switch_interval_ms, cfg.sft.steps, [s.steps for s in cfg.stages]) == (
        5.0,
        0,
        [3],
    )
    assert cfg.model.path == str(sft) and cfg.prompts_per_step == 16  # the run's own batch
    got = json.loads((out / "gpu_figures.json").read_text())["train_variants"]
    assert got["python-5ms"]["variant"] == ["graph.switch_interval_ms=5"]
    table = (out / "gpu_figures.md").read_text()
    assert "| python-5ms | graph.switch_interval_ms=5 | 0 | 3 | 1234 |" in table
    assert "| as-is | (as configured) | 0 |" in table
    twice = ["--variant", "a:", "--variant", "a:graph.switch_interval_ms=1"]
    for bad in (["--variant", "no-colon"], ["--variant", "x:novalue"], ["--variant", "../x:"],
                twice, []):  # fmt: skip
        with pytest.raises(SystemExit):
            gpu.main([*argv, *bad])


def test_each_invocation_and_how_it_ended_is_on_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device returns only the end of a command's output, so a part that dies must leave
    its reason in the results (an H200 run's `--part variants` left nothing at all)."""

    def dying_run(run_dir: Path, args: list[str], timeout: float, log: Path, settings: list[str]):
        raise RuntimeError("the training run broke")

    monkeypatch.setattr(gpu, "training_run", dying_run)
    monkeypatch.setattr(gpu, "missing_modules", lambda: [])
    out, work = tmp_path / "out", tmp_path / "w"
    (work / "run" / "model-sft").mkdir(parents=True)
    (work / "run" / "model-sft" / "config.json").write_text("{}")
    argv = ["--out", str(out), "--work", str(work), "--part", "variants", "--variant", "a:"]
    with pytest.raises(RuntimeError):
        gpu.main(argv)
    monkeypatch.setattr(gpu, "missing_modules", lambda: ["zmq"])
    assert gpu.main(argv) == 2
    monkeypatch.setattr(gpu, "missing_modules", lambda: [])
    monkeypatch.setattr(gpu, "training_run", lambda *a: {"exit": 0})
    assert gpu.main(argv) == 0
    got = json.loads((out / "gpu_figures.json").read_text())["invocations"]
    assert [run["argv"] for run in got] == [argv] * 3
    assert got[0]["error"] == "RuntimeError: the training run broke" and "exit" not in got[0]
    assert got[1]["error"] == "missing Python modules: zmq" and got[2] == {"argv": argv, "exit": 0}
    table = (out / "gpu_figures.md").read_text()
    assert f"Invocation `{' '.join(argv)}`: RuntimeError: the training run broke" in table
    assert table.count("Invocation `") == 2


def test_the_next_gpu_runs_commands_parse_and_their_variants_are_valid_settings() -> None:
    """The commands docs/production.md plans for the next GPU session parse as the script
    takes them, and each variant's settings over `configs/gpu_20m.toml`, as `--part variants`
    runs them, are a valid training config: a typo there would cost a GPU session's minutes."""
    from rstar2.train.config import load_train_config

    repo = SCRIPTS.parent
    text = (repo / "docs" / "production.md").read_text()
    plan = text.split("**The next run, in 15 minutes of device time**", 1)[1]
    block = plan.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", "")  # as the shell
    install = "rm -rf /tmp/site; python3 -m pip install -q --no-index --no-deps --no-compile "
    install += "--target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1; "
    shown = " ".join(text.split("# there, carrying .whl", 1)[1].replace("\\\n", "").split())
    assert shown.split(" python3 scripts/gpu_figures.py")[0].endswith(install.strip())
    device_commands = block.strip().split("\n")
    assert len(device_commands) == 2  # each, with the wheels' install, fits the device's run
    assert all(len(install + c) <= 2000 for c in device_commands), [len(c) for c in device_commands]
    for c in device_commands:  # and each is one valid shell command line
        check = subprocess.run(["bash", "-n", "-c", install + c], capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    commands = [
        re.split(r"&&|;|\n(?=python3 )", c, maxsplit=1)[0]
        for c in block.split("python3 scripts/gpu_figures.py")[1:]
    ]
    assert len(commands) == 4
    only: list[str] = []
    for command in commands:  # every flag is the script's (a number for shell arithmetic)
        argv = re.sub(r"\$\(\([^)]*\)\)", "100", command).replace("$OUT", "out").split()
        args = gpu.arg_parser().parse_args(argv)
        if args.only:  # benchmarks of the plan, by name
            names = {name for name, _, _ in gpu.bench_plan(smoke=False)}
            assert set(args.only.split(",")) <= names, set(args.only.split(",")) - names
            only += args.only.split(",")
    assert len(only) == len(set(only))  # no learner entry measured twice
    assert gpu.arg_parser().parse_args(commands[2].replace("$OUT", "out").split()).wide_steps
    for cost in re.findall(r"scripts/sandbox_call_cost\.py ([^>]*)>", block):
        importlib.import_module("sandbox_call_cost").arg_parser().parse_args(cost.split())
    variants = [gpu.parse_variant(v) for v in re.findall(r"--variant (\S+)", block)]
    assert [name for name, _ in variants] == [
        "instant",
        "instant-sandboxes-2",
        "worker-procs-2",
        "as-configured",
    ]
    for _, settings in variants:
        cfg = load_train_config(
            repo / "configs" / "gpu_20m.toml",
            sets=[*gpu.rl_only_settings(Path("sft"), 4), *settings],
        )
        assert cfg.total_steps == 4


def test_the_variants_part_runs_the_wide_run_first_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the next GPU run's second command takes the wide run from the first command's SFT
    # model: with `--part variants --wide-steps N` the wide run goes before the variants;
    # without `--wide-steps` that part runs none (after a training run, 8 steps by default)
    ran: list[tuple[str, list[str]]] = []

    def fake_run(run_dir: Path, args: list[str], timeout: float, log: Path, settings: list[str]):
        ran.append((run_dir.name, args))
        return {"exit": 0, "rl_steps": 2, "set": settings}

    monkeypatch.setattr(gpu, "training_run", fake_run)
    monkeypatch.setattr(gpu, "missing_modules", lambda: [])
    out, work = tmp_path / "out", tmp_path / "w"
    argv = ["--out", str(out), "--work", str(work), "--part", "variants", "--smoke"]
    assert gpu.main([*argv, "--wide-steps", "2"]) == 0  # no SFT model yet: it says so
    got = json.loads((out / "gpu_figures.json").read_text())
    assert ran == [] and "run --part train first" in got["train_wide"]["error"]
    sft = work / "run" / "model-sft"
    sft.mkdir(parents=True)
    (sft / "config.json").write_text("{}")
    assert gpu.main([*argv, "--wide-steps", "2", "--variant", "as-is:"]) == 0
    assert [name for name, _ in ran] == ["wide", "variant-as-is"]
    wide = [a for a in ran[0][1] if a != "--set"]
    assert f"model.path={sft}" in wide and any('"steps": 2' in a for a in wide)
    ran.clear()
    assert gpu.main([*argv, "--variant", "as-is:"]) == 0
    assert [name for name, _ in ran] == ["variant-as-is"]
    for bad in ([], ["--wide-steps", "0"], ["--wide-steps", "-1", "--variant", "a:"]):
        with pytest.raises(SystemExit):
            gpu.main([*argv, *bad])
