"""`rstar2 bench engine` end to end on a very small workload (smoke test of the real command)."""

from __future__ import annotations

import json

import pytest

from rstar2.cli import main
from rstar2.engine.benchmark import make_workload


def test_bench_engine_json_reports_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "engine", "--requests", "6", "--max-tokens", "8", "--batch-sizes", "2,6"]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["engine_tok_s"] > 0 and result["hf_generate_tok_s"] > 0
    # the ratio is printed to 2 decimals: off by up to 0.005, more than 1% below a ratio of 0.5
    assert result["ratio"] == pytest.approx(
        result["engine_tok_s"] / result["hf_generate_tok_s"], abs=0.006
    )
    assert [r["batch_size"] for r in result["hf_sweep"]] == [2, 6]
    assert result["output_tokens"] == sum(make_workload(6, 1024, 8).output_lengths)
    # the median run's steps: at least the longest request's tokens, wall = host + wait
    assert result["engine_steps"] >= max(make_workload(6, 1024, 8).output_lengths)
    assert result["engine_round_steps"] == 0  # one step at a time by default
    # all 6 prompts arrive at once: prefilled in the first step
    assert result["engine_prefill_steps"] == 1 and result["engine_prefill_step_ms"] > 0
    assert result["engine_step_ms"] == pytest.approx(
        result["engine_host_ms"] + result["engine_wait_ms"], abs=0.002
    )


def test_bench_engine_runs_conversations_of_several_turns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "engine", "--requests", "4", "--max-tokens", "8", "--batch-sizes", "4"]
    assert main([*argv, "--turns", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["turns"] == 3
    assert result["output_tokens"] == make_workload(4, 1024, 8, turns=3).total_tokens
    assert result["engine_tok_s"] > 0 and result["hf_generate_tok_s"] > 0
    # later turns arrive as earlier ones end: more than the first step prefills
    assert result["engine_prefill_steps"] > 1
    # 20 turns (outputs of median 64 tokens, tool responses of 8-48) overflow 1,024 positions
    assert main([*argv, "--turns", "20", "--max-tokens", "300"]) == 2
    assert "max_model_len" in capsys.readouterr().err


def test_bench_engine_runs_rounds_of_decode_steps(capsys: pytest.CaptureFixture[str]) -> None:
    """`--decode-steps 4` on the fixed path runs rounds (most decode steps inside them); on
    the dynamic path, where rounds cannot run, it is refused before any work."""
    argv = ["bench", "engine", "--requests", "6", "--max-tokens", "8", "--batch-sizes", "6"]
    assert main([*argv, "--decode", "fixed", "--decode-steps", "4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["decode"], result["decode_steps"]) == ("fixed", 4)
    assert result["engine_tok_s"] > 0 and result["engine_steps"] >= 8
    assert 0 < result["engine_round_steps"] <= result["engine_steps"]
    assert main([*argv, "--decode", "dynamic", "--decode-steps", "4"]) == 2
    assert "argument --decode-steps" in capsys.readouterr().err


def test_bench_engine_runs_prefills_on_fixed_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    """`--prefill-graphs 64` on the fixed path runs the conversations' prompts and later turns
    through fixed-shape prefills (shapes made, no dynamic forward needed for them); on the
    dynamic path it is refused before any work."""
    argv = ["bench", "engine", "--requests", "6", "--max-tokens", "8", "--batch-sizes", "6"]
    argv += ["--turns", "2", "--decode", "fixed"]
    assert main([*argv, "--prefill-graphs", "64", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["prefill_graph_tokens"] == 64 and result["prefill_graphs"]["shapes"] >= 2
    assert result["engine_tok_s"] > 0 and result["engine_prefill_steps"] >= 2
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["prefill_graph_tokens"] == 0 and result["prefill_graphs"] is None
    assert main([*argv[:-2], "--decode", "dynamic", "--prefill-graphs", "64"]) == 2
    assert "argument --prefill-graphs" in capsys.readouterr().err


def test_workload_lengths_are_heavy_tailed_and_capped() -> None:
    work = make_workload(256, 1024, 512)
    lengths = sorted(work.output_lengths)
    assert lengths[0] >= 4 and lengths[-1] <= 512
    assert lengths[-1] > 4 * lengths[128]  # the longest is far above the median
    assert all(16 <= len(p) <= 64 for p in work.prompts)
