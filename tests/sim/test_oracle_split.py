"""The oracle reference split (scripts/sim_oracle_split.py): where it puts long trajectories,
and that the run it simulates respects the bounds."""

from __future__ import annotations

import json

import pytest

from sim.bound import sticky_bound
from sim.cost import CostModel
from sim.workload import TrajectorySpec, Turn
from tests.script_module import load_script

oracle = load_script("sim_oracle_split")


def traj(i: int, tokens: int) -> TrajectorySpec:
    return TrajectorySpec(f"t{i}", f"p{i}", 4, tokens, (Turn(tokens),))


def test_long_trajectories_share_the_long_engines_and_the_rest_balance() -> None:
    workload = [traj(0, 50), traj(1, 48), traj(2, 10), traj(3, 10), traj(4, 10), traj(5, 10)]
    cost = CostModel(1.0, 0.1, 0.0, 0.0)  # 1 s per step + 0.1 s per sequence in it
    engine_of, predicted = oracle.oracle_split(workload, cost, 3, 1024, 1, 40)
    assert engine_of["t0"] == engine_of["t1"] == 0  # both long ones on the one long engine
    assert [engine_of[f"t{i}"] for i in range(2, 6)] == [1, 2, 1, 2]  # short ones balance
    # engine 0: 50 steps + 98 sequence-steps x 0.1 s; engines 1 and 2: 10 + 20 x 0.1
    assert predicted == pytest.approx(59.8)
    assert sticky_bound(workload, cost, [0, 0, 1, 2, 1, 2], 3, 1024, 256) == pytest.approx(59.8)


def test_script_simulates_a_small_step_at_or_above_the_lower_bound(capsys) -> None:
    args = ["--gpus", "2", "--prompts", "2", "--rollouts", "4", "--long-engines", "1"]
    assert oracle.main([*args, "--threshold", "3000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["runs"]
    assert row["makespan_s"] >= out["lower_bound_s"]
    assert row["makespan_s"] == pytest.approx(row["predicted_s"], rel=0.1)


def test_script_needs_a_split_or_a_sweep() -> None:
    with pytest.raises(SystemExit):
        oracle.main(["--gpus", "2", "--prompts", "2", "--rollouts", "4"])
