"""The simulator's length predictor starts from the step before the one it plays, never from
that step itself (no oracle): an independent draw of the workload, or a trace's earlier step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sim.config import SimConfig, build, predictor, scenario_workload
from sim.workload import WorkloadConfig, generate, mean_response_tokens, previous_step


def test_a_generated_step_starts_from_an_independent_draw_not_from_itself() -> None:
    cfg = SimConfig(gpus=2, seed=4, workload=WorkloadConfig(prompts=3, rollouts=4))
    wl = scenario_workload(cfg)
    played, before = generate(wl, 4), previous_step(wl, 4)
    assert before is not None and before != played and len(before) == len(played)
    p = predictor(cfg, wl)
    assert p.count == len(before) and p.mean == mean_response_tokens(before)
    assert p.mean != mean_response_tokens(played)
    cfg.warm_predictor = False
    assert predictor(cfg, wl).mean is None
    assert build(cfg).core.predictor.mean is None


def _record(step: int, prompt: int, tokens: int) -> str:
    turns = [{"model_tokens": tokens, "tool_tokens": 0, "tool_latency_s": 0.0}]
    return json.dumps({"step": step, "prompt_id": "p", "prompt_tokens": prompt, "turns": turns})


def test_a_trace_step_starts_from_the_trace_step_before_it(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join([_record(1, 5, 10), _record(1, 5, 30), _record(2, 5, 500)]))
    wl = WorkloadConfig(trace=str(trace))
    before = previous_step(wl, 0)
    assert before is not None and mean_response_tokens(before) == 20
    assert previous_step(WorkloadConfig(trace=str(trace), trace_step=1), 0) is None


def test_cli_cold_predictor_changes_a_kv_aware_run_that_needs_a_prediction() -> None:
    # 2 engines of 8K tokens, 16 trajectories with a 4K budget: 'max' reservations (the cold
    # start) admit one per engine at a time, the warm prediction admits several.
    args = ["--gpus", "2", "--kv-tokens", "8192", "--prompts", "2", "--rollouts", "8",
            "--max-response", "4000", "--mean-response", "500", "--policy", "kv_aware", "--json"]  # fmt: skip

    def makespan(*extra: str) -> float:
        out = subprocess.run(
            [sys.executable, "-m", "rstar2.cli", "sim", *args, *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["makespan_s"]

    assert makespan("--cold-predictor") > makespan()
