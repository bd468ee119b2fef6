"""`rstar2 train` with a sharded learner (`cluster.learner_ranks = 2`, gloo on this CPU): it
trains end to end, a checkpoint written by two ranks resumes on one, and a rank that dies stops
the run with an error naming it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rstar2.learner.checkpoint import read_policy
from rstar2.learner.rank_group import free_port
from rstar2.metrics import read_metrics
from tests.profile.tool_policy import ToolPolicy


def _cmd(tool_policy: ToolPolicy, run: Path, steps: int, *extra: str) -> list[str]:
    sets = tool_policy.rl_sets(
        steps, "heldout_problems=4", "checkpoint_every=1", "cluster.learner_ranks=2", *extra
    )
    return [
        sys.executable, "-m", "rstar2.cli", "train", "--run-dir", str(run),
        *[x for s in sets for x in ("--set", s)],
    ]  # fmt: skip


def _rl_rows(run: Path) -> list[dict]:
    return [r for r in read_metrics(run / "metrics.jsonl") if r.get("stage") == "rl1"]


@pytest.mark.slow
def test_two_learner_ranks_train_and_resume_on_one(tmp_path: Path, tool_policy: ToolPolicy) -> None:
    run = tmp_path / "run"
    # 64 KiB buckets: the ~4 MiB policy goes to the engine in many gathers and messages.
    cmd = _cmd(tool_policy, run, 2, "cluster.weight_bucket_mb=0.0625")
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    rows = _rl_rows(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["trained_rollouts"] > 0 for r in rows), rows
    assert all(r["weights_buckets"] > 3 for r in rows), rows
    # A bucket holds whole tensors: the largest ones (embeddings) exceed 64 KiB on their own.
    assert all(r["weights_bucket_max_bytes"] < 2**20 for r in rows), rows
    # Step 2 sampled from the policy step 1 trained, pushed bucket by bucket: had any bucket
    # gone missing, the engine's logprobs would differ from the learner's by far more.
    assert rows[1]["logprob_mismatch_max"] < 1e-4, rows[1]
    shards = sorted(p.name for p in (run / "checkpoints" / "step-000002" / "policy").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # both ranks wrote

    # The same run with rank 1 started by torchrun (as on another host) and meeting rank 0 at
    # cluster.learner_rendezvous: it trains to the same weights.
    before = read_policy(run / "checkpoints" / "step-000002")["model"]
    met = tmp_path / "met"
    rendezvous = f"tcp://127.0.0.1:{free_port()}"
    trainer = subprocess.Popen(
        _cmd(tool_policy, met, 2, "cluster.weight_bucket_mb=0.0625",
             f"cluster.learner_rendezvous={rendezvous}"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    follower = subprocess.run(
        [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "1",
         "-m", "rstar2.cli", "learner-rank", "--rendezvous", rendezvous, "--device", "cpu"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    _, err = trainer.communicate(timeout=600)
    assert trainer.returncode == 0, err[-3000:]
    assert follower.returncode == 0, follower.stderr[-6000:]
    assert "learner: 2 ranks met at" in err
    shards = sorted(p.name for p in (met / "checkpoints" / "step-000002" / "policy").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    got = read_policy(met / "checkpoints" / "step-000002")["model"]
    assert got.keys() == before.keys()
    # (to 1e-4: torchrun sets its own thread count, so sums round apart, and Adam turns the
    # rounding of the packed rows' larger sums into up to ~2e-5 after two steps; a rank that
    # trained on other rollouts moves weights by the order of lr = 1e-3)
    for name, tensor in before.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=1e-4, msg=name)

    # Resume the finished two-rank run on one rank with one more step.
    subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "train", "--resume", str(run),
         "--set", "cluster.learner_ranks=1", "--set", "stages.0.steps=3"],
        check=True,
        capture_output=True,
        timeout=600,
    )  # fmt: skip
    assert json.loads((run / "config.json").read_text())["cluster"]["learner_ranks"] == 1
    assert [r["step"] for r in _rl_rows(run)] == [1, 2, 3]
    after = read_policy(run / "checkpoints" / "step-000003")
    assert after["model"].keys() == before.keys()
    assert sorted(p.name for p in (run / "checkpoints" / "step-000003" / "policy").iterdir()) == [
        ".metadata",
        "__0_0.distcp",
    ]


@pytest.mark.slow
def test_a_learner_rank_that_dies_stops_the_run_naming_it(
    tmp_path: Path, tool_policy: ToolPolicy
) -> None:
    proc = subprocess.Popen(
        _cmd(tool_policy, tmp_path / "run", 20),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    log: list[str] = []
    try:
        assert proc.stderr is not None
        pid = None
        for line in proc.stderr:
            log.append(line)
            found = re.search(r"learner rank 1/2 started \(pid (\d+)\)", line)
            pid = int(found.group(1)) if found else pid
            if pid is not None and "step    1/20" in line:
                os.kill(pid, signal.SIGKILL)
                killed = time.monotonic()
                break
        else:
            pytest.fail("the run ended before its first step:\n" + "".join(log[-20:]))
        log.extend(proc.stderr)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - killed < 60  # stopped, not hung until a collective timeout
    assert code != 0
    assert "learner rank 1 was killed by signal 9" in "".join(log[-10:]), "".join(log[-10:])
