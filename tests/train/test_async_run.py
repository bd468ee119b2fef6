"""`rstar2 train` with bounded staleness on the real actor graph: later steps generate while the
learner updates, every step stays within the bound, and the decoupled loss is in use."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rstar2.metrics import read_metrics
from tests.profile.tool_policy import ToolPolicy
from tests.train.test_train_run import train_cmd


@pytest.mark.slow
def test_a_run_with_max_staleness_2_trains_within_the_bound(
    tmp_path: Path, tool_policy: ToolPolicy
) -> None:
    sets = tool_policy.rl_sets(4, "heldout_problems=0", "checkpoint_every=2", "rl.max_staleness=2")
    run = tmp_path / "run"
    cmd = [*train_cmd(), *[x for s in sets for x in ("--set", s)], "--run-dir", str(run)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r.get("stage") == "rl1"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(r["staleness_max"] <= 2 and r["stale_dropped"] == 0 for r in rows), rows
    # steps 3 and 4 were submitted before updates 1 and 2: some of their rollouts began
    # under an older policy than the learner that trained on them
    assert max(r["staleness_max"] for r in rows[2:]) >= 1
    assert all(sum(r["staleness_hist"]) == 16 for r in rows)
    trained = [r for r in rows if r["trained_rollouts"] > 0]
    assert trained and all("tis_weight_mean" in r for r in trained)  # the decoupled loss
    assert json.loads((run / "summary.json").read_text())["steps"] == 4
