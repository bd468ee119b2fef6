"""Cost model presets and calibration, workload generation and traces, the event heap, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cost import (
    GPUS,
    MODELS,
    CostModel,
    StepPoint,
    fit,
    kv_capacity_tokens,
    load_points,
    roofline,
)
from sim.events import PRIORITY_ENGINE, PRIORITY_TOOL, EventLoop
from sim.workload import WorkloadConfig, generate, load_trace


def test_qwen3_14b_kv_bytes_and_pool_match_the_reference() -> None:
    model = MODELS["qwen3-14b"]
    assert model.kv_bytes_per_token == 160 * 1024
    assert 800_000 < kv_capacity_tokens(model, GPUS["mi300x"]) < 950_000
    assert 200_000 < kv_capacity_tokens(model, GPUS["h100"]) < 280_000
    assert kv_capacity_tokens(MODELS["qwen2.5-32b"], GPUS["h100"], tp=2) > 16 * 12_800


def test_roofline_decode_time_grows_with_context_and_batch() -> None:
    cost = roofline(MODELS["qwen3-14b"], GPUS["h100"])
    assert cost.step_s(1, 1000) < cost.step_s(64, 1000) < cost.step_s(64, 500_000)
    assert roofline(MODELS["qwen3-14b"], GPUS["h100"], tp=2).step_overhead_s < cost.step_overhead_s


def test_fit_recovers_known_coefficients(tmp_path: Path) -> None:
    truth = CostModel(0.01, 2e-4, 3e-8, 5e-5)
    points = [
        StepPoint(b, c, p, truth.step_s(b, c, p))
        for b in (1, 8, 64)
        for c in (1000, 50_000, 400_000)
        for p in (0, 2000)
    ]
    path = tmp_path / "points.json"
    path.write_text(json.dumps([p.__dict__ for p in points]))
    got = fit(load_points(path))
    for name in ("step_overhead_s", "per_seq_s", "per_context_token_s", "per_prefill_token_s"):
        assert getattr(got, name) == pytest.approx(getattr(truth, name), rel=1e-6)


def test_fit_never_returns_a_negative_coefficient() -> None:
    points = [StepPoint(b, 0, 0, 0.05 - 0.001 * b) for b in range(1, 10)]
    got = fit(points)
    assert got.per_seq_s == 0.0 and got.step_overhead_s > 0


def test_cost_model_rejects_bad_coefficients() -> None:
    with pytest.raises(ValueError):
        CostModel(0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        CostModel(0.01, -1.0, 0.0, 0.0)


def test_generated_workload_is_deterministic_and_within_budget() -> None:
    cfg = WorkloadConfig(prompts=8, rollouts=4, mean_response_tokens=3000, max_response_tokens=4096)
    a, b = generate(cfg, 1), generate(cfg, 1)
    assert a == b and a != generate(cfg, 2)
    assert len(a) == 32
    for spec in a:
        assert spec.total_tokens - spec.prompt_tokens <= 4096
        assert len(spec.turns) <= cfg.max_turns
        assert spec.turns[-1].tool_tokens == 0


def test_trace_replay_and_bad_trace(tmp_path: Path) -> None:
    good = tmp_path / "t.jsonl"
    good.write_text(
        json.dumps(
            {
                "prompt_id": "p0",
                "prompt_tokens": 30,
                "turns": [
                    {"model_tokens": 5, "tool_tokens": 3, "tool_latency_s": 0.2},
                    {"model_tokens": 4},
                ],
            }
        )
        + "\n"
    )
    (spec,) = load_trace(good)
    assert spec.total_tokens == 42 and spec.max_response_tokens == 12
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt_id": "p", "turns": []}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_trace(bad)


def test_event_heap_orders_by_time_then_priority_then_insertion() -> None:
    loop = EventLoop()
    loop.schedule(1.0, PRIORITY_ENGINE, "e1")
    loop.schedule(1.0, PRIORITY_TOOL, "t1")
    loop.schedule(1.0, PRIORITY_TOOL, "t2")
    loop.schedule(0.5, PRIORITY_ENGINE, "e0")
    order = [loop.pop()[2] for _ in range(4)]  # type: ignore[index]
    assert order == ["e0", "t1", "t2", "e1"]
    with pytest.raises(ValueError):
        loop.schedule(0.1, PRIORITY_TOOL, "late")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "sim", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


KEYS = [
    "policy",
    "makespan_s",
    "lower_bound_s",
    "ratio_to_bound",
    "preemptions",
    "recomputed_tokens",
    "idle_fraction",
    "tokens_per_s",
    "events",
    "wall_s",
]


def test_cli_run_json_has_exactly_the_documented_keys() -> None:
    out = _cli("--gpus", "2", "--prompts", "2", "--rollouts", "4", "--policy", "static", "--json")
    assert out.returncode == 0, out.stderr
    assert list(json.loads(out.stdout)) == KEYS


def test_cli_compare_writes_a_list_and_three_plots(tmp_path: Path) -> None:
    out = _cli(
        "compare", "--gpus", "2", "--prompts", "2", "--rollouts", "4", "--cost", "constant",
        "--json", "--out-dir", str(tmp_path),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["policy"] for r in rows][:2] == ["static", "round_robin"] and len(rows) == 6
    assert all(list(r) == KEYS for r in rows)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "idle_per_engine.png",
        "kv_per_engine.png",
        "makespan.png",
    ]


def test_cli_bound_prints_the_terms_of_the_run_bound() -> None:
    small = ("--gpus", "2", "--prompts", "2", "--rollouts", "4", "--max-response", "400")
    parts = json.loads(_cli("bound", *small, "--json").stdout)
    run = json.loads(_cli(*small, "--policy", "static", "--json").stdout)
    assert parts["lower_bound_s"] == run["lower_bound_s"]
    assert parts["lower_bound_s"] == max(parts["path_s"], parts["work_s"])
    assert parts["work_s"] == pytest.approx(parts["fixed_s"] + parts["variable_s"], abs=2e-3)
    assert parts["spread_floor_s"] >= parts["lower_bound_s"]
    assert 0 < parts["spread_tokens"] <= 400


def test_cli_rejects_a_bad_value_with_exit_code_2() -> None:
    out = _cli("--gpus", "0", "--prompts", "1")
    assert out.returncode == 2 and "gpus" in out.stderr
    out = _cli("--gpus", "2", "--prompts", "1", "--overload-factor", "0.5")
    assert out.returncode == 2 and "argument --overload-factor" in out.stderr
