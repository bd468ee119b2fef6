"""The fidelity pipeline (calibrate on the embedded engine, predict another workload) runs end
to end on a tiny configuration. Accuracy is a benchmark (`rstar2 sim calibrate --engine`), not
a test: wall-clock timings on a shared machine are too noisy to assert on."""

from __future__ import annotations

import math

import pytest

from rstar2.engine.benchmark import tiny_random_model
from sim.cost import constant_cost
from sim.fidelity import calibration_workload, check_workload, fidelity, simulate_engine


def test_pipeline_produces_a_finite_error_and_real_preemptions() -> None:
    report = fidelity(
        tiny_random_model(),
        calibration_workload(n=8, max_tokens=16, spread_steps=10),
        check_workload(n=10, median_tokens=12, max_tokens=32),
    )
    assert len(report.calibration.steps) >= 16  # the longest request alone takes 16 steps
    assert all(p.step_s > 0 for p in report.calibration.steps)
    assert math.isfinite(report.makespan_error) and report.predicted_makespan_s > 0
    assert report.check.preemptions > 0  # the check's KV budget is tight on purpose
    assert report.predicted_preemptions > 0


def test_simulated_engine_matches_hand_count_under_constant_cost() -> None:
    work = check_workload(n=4, median_tokens=8, max_tokens=8)
    work = type(work)([16] * 4, [5, 3, 8, 1], kv_tokens=4096, max_num_seqs=256)
    makespan, preemptions = simulate_engine(work, constant_cost(0.5))
    assert (makespan, preemptions) == (8 * 0.5, 0)  # all run at once; the longest takes 8 steps


def test_simulate_engine_rejects_staggered_arrivals() -> None:
    with pytest.raises(ValueError):
        simulate_engine(calibration_workload(n=4, spread_steps=10, seed=3), constant_cost(0.1))
