"""`rstar2 train` end to end on the real actor graph, and resume after SIGKILL."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from rstar2.learner.checkpoint import read_policy
from rstar2.metrics import read_metrics
from rstar2.model.loader import load_model
from tests.profile.tool_policy import ToolPolicy
from tests.train.conftest import SMOKE_TOML

TIMING = ("time_", "step_s", "wall_s", "engine_", "loop_cpu_s", "worker_loop_cpu_s")
"""Metrics that measure time, or depend on it: `engine_steps` counts the steps the requests'
arrival times made, and a resumed run's first step has no engine baseline."""
REPO = Path(__file__).resolve().parents[2]


def train_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "rstar2.cli", "-q", "train", *args]


def deterministic(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)} for r in rows]


def _kill_when(cmd: list[str], ready: Callable[[], bool]) -> None:
    """Start `cmd`, SIGKILL its whole process group as soon as `ready()` holds."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if ready():
                break
            if proc.poll() is not None:
                pytest.fail("the run ended before it could be killed")
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The smoke config run once, uninterrupted: (run directory, stdout). The interrupted and
    resumed runs below must end with its metrics (checkpoint frequency and the trace's token
    lists change no metric)."""
    tmp = tmp_path_factory.mktemp("reference")
    config = tmp / "smoke.toml"
    config.write_text(SMOKE_TOML)
    run = tmp / "run"
    out = subprocess.run(
        train_cmd("--config", str(config), "--run-dir", str(run), "--json",
                  "--set", "rollout_trace_tokens=true"),
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return run, out.stdout


@pytest.mark.slow
def test_train_writes_metrics_plot_and_checkpoints(reference: tuple[Path, str]) -> None:
    run, stdout = reference
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["steps"] == 3
    assert summary["heap_frozen_objects"] > 10_000  # the startup's heap, frozen for RL
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows if r["stage"] in ("rl1", "rl3")] == [1, 2, 3]
    assert [r["stage"] for r in rows if r["step"] in (2, 3) and "reward_mean" in r] == [
        "rl1",
        "rl3",
    ]
    assert summary["extra"]["filter_rl3"]["probed"] == 4
    for key in ("reward_mean", "response_tokens_mean", "tool_error_ratio_correct", "clip_fraction"):
        assert key in rows[1]
    # the event loop's CPU while each step's rollouts were collected: only RL rows, within
    # the step's wall time (one thread's CPU cannot exceed it)
    for r in rows:
        assert ("loop_cpu_s" in r) == (r["stage"] in ("rl1", "rl3") and "step_s" in r), r
        # the rollout worker's loop: here the same thread, from its first task to its last
        # result, within the learner's window (from sending the tasks to the last result)
        assert ("worker_loop_cpu_s" in r) == ("loop_cpu_s" in r), r
        if "loop_cpu_s" in r:
            assert 0.0 < r["loop_cpu_s"] <= r["step_s"]
            assert 0.0 < r["worker_loop_cpu_s"] <= r["loop_cpu_s"], r
    assert rows[0]["stage"] == "sft" and "heldout_accuracy" in rows[0]
    assert (run / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (run / "checkpoints" / "LATEST").read_text().strip() == "step-000003"
    assert any((run / "tensorboard").iterdir())
    # every RL step's trajectories, replayable by the simulator
    trace = [json.loads(line) for line in (run / "rollout_trace.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in trace}) == [1, 2, 3]
    for r in trace:  # rollout_trace_tokens: the tokens `rstar2 analyze` reads
        used = sum(t["model_tokens"] + t["tool_tokens"] for t in r["turns"])
        assert len(r["token_ids"]) == len(r["loss_mask"]) == r["prompt_tokens"] + used
        assert sum(r["loss_mask"]) == sum(t["model_tokens"] for t in r["turns"])
    sim = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "-q", "sim", "--trace", str(run / "rollout_trace.jsonl"),
         "--trace-step", "2", "--gpus", "1", "--json", "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr[-3000:]
    replayed = json.loads(sim.stdout)
    step2 = [r for r in trace if r["step"] == 2]
    generated = sum(t["model_tokens"] for r in step2 for t in r["turns"])
    assert replayed["tokens_per_s"] * replayed["makespan_s"] == pytest.approx(generated, rel=1e-3)
    # the trajectory log (rstar2 view): step 1's rollouts and every evaluation's, with text
    logged = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert {(r["source"], r["step"]) for r in logged} >= {("train", 1), ("validation", 0)}
    assert all(r["problem"] and isinstance(r["conversation"], list) for r in logged)


@pytest.mark.slow
def test_resume_after_sigkill_matches_uninterrupted(
    tmp_path: Path, smoke_config: Path, reference: tuple[Path, str]
) -> None:
    ref = reference[0]
    run = tmp_path / "run"
    _kill_when(
        train_cmd("--config", str(smoke_config), "--run-dir", str(run)),
        lambda: any(r.get("step") == 2 for r in read_metrics(run / "metrics.jsonl")),
    )
    assert (run / "checkpoints" / "LATEST").is_file()
    subprocess.run(train_cmd("--resume", str(run)), check=True, capture_output=True, timeout=600)
    assert deterministic(read_metrics(run / "metrics.jsonl")) == deterministic(
        read_metrics(ref / "metrics.jsonl")
    )
    # the rollout trace keeps no line of a step run twice
    steps = [json.loads(line)["step"] for line in (run / "rollout_trace.jsonl").open()]
    ref_steps = [json.loads(line)["step"] for line in (ref / "rollout_trace.jsonl").open()]
    assert steps == ref_steps
    logged = [json.loads(line)["traj_id"] for line in (run / "trajectories.jsonl").open()]
    assert logged == [json.loads(line)["traj_id"] for line in (ref / "trajectories.jsonl").open()]


def _tensors(state: object, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor of a (nested) state dict, by its path."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    if isinstance(state, dict):
        out: dict[str, torch.Tensor] = {}
        for k, v in state.items():
            out.update(_tensors(v, f"{prefix}/{k}"))
        return out
    if isinstance(state, list | tuple):
        out = {}
        for i, v in enumerate(state):
            out.update(_tensors(v, f"{prefix}/{i}"))
        return out
    return {}


@pytest.mark.slow
def test_resume_restores_the_policy_and_optimizer_of_a_run_that_trains(
    tmp_path: Path, tool_policy: ToolPolicy
) -> None:
    # The smoke run above never earns reward, so it trains nothing and cannot tell a restored
    # policy from a fresh one. This run starts from the SFT'd tool policy, which does: the
    # reference must update the policy at every step, and the resumed run must end with the
    # reference's weights and optimizer state (compared directly, not through metrics).
    sets = tool_policy.rl_sets(
        3, "heldout_problems=4", "checkpoint_every=1", "keep_checkpoints=4",
        "rollout.tool_show_time=false",
    )  # fmt: skip
    cmd = [*train_cmd(), *[x for s in sets for x in ("--set", s)]]
    ref, run = tmp_path / "ref", tmp_path / "run"
    subprocess.run([*cmd, "--run-dir", str(ref)], check=True, capture_output=True, timeout=600)
    rows = [r for r in read_metrics(ref / "metrics.jsonl") if r.get("stage") == "rl1"]
    assert [r["trained_rollouts"] > 0 for r in rows] == [True, True, True], rows

    latest = run / "checkpoints" / "LATEST"
    _kill_when(
        [*cmd, "--run-dir", str(run)],
        lambda: latest.is_file() and latest.read_text().strip() == "step-000001",
    )
    assert not (run / "checkpoints" / "step-000003").exists()  # killed mid-run
    # the summary's wall time counts the killed session too (as its checkpoint recorded it,
    # made large here to tell it apart), not just the resumed one
    state_file = run / "checkpoints" / "step-000001" / "state.pt"
    state = torch.load(state_file, weights_only=False)
    state["wall_s"] = 1000.0
    torch.save(state, state_file)
    started = time.monotonic()
    subprocess.run(train_cmd("--resume", str(run)), check=True, capture_output=True, timeout=600)
    session = time.monotonic() - started
    wall = json.loads((run / "summary.json").read_text())["wall_s"]
    assert 1000.0 < wall < 1000.0 + session
    _assert_same_policy_and_metrics(ref, run)
    # resume from an earlier checkpoint directory: step 3 is run again, to the same result
    subprocess.run(
        train_cmd("--resume", str(run / "checkpoints" / "step-000002")),
        check=True,
        capture_output=True,
        timeout=600,
    )
    _assert_same_policy_and_metrics(ref, run)
    # resuming the finished run changes nothing
    before = (run / "summary.json").read_bytes(), (run / "metrics.jsonl").read_bytes()
    out = subprocess.run(train_cmd("--resume", str(run)), capture_output=True, text=True)
    assert out.returncode == 0 and "nothing to resume" in out.stdout, out.stderr[-2000:]
    assert ((run / "summary.json").read_bytes(), (run / "metrics.jsonl").read_bytes()) == before


def _assert_same_policy_and_metrics(ref: Path, run: Path) -> None:
    want = read_policy(ref / "checkpoints" / "step-000003")
    got = read_policy(run / "checkpoints" / "step-000003")
    for part in ("model", "optim"):
        w, g = _tensors(want[part]), _tensors(got[part])
        assert w.keys() == g.keys() and w, part
        for key in w:
            torch.testing.assert_close(g[key], w[key], rtol=1e-4, atol=1e-5, msg=f"{part}{key}")
    mine, theirs = (deterministic(read_metrics(d / "metrics.jsonl")) for d in (run, ref))
    assert [sorted(r) for r in mine] == [sorted(r) for r in theirs]
    for a, b in zip(mine, theirs, strict=True):
        for key, value in b.items():
            if isinstance(value, float):
                assert a[key] == pytest.approx(value, rel=1e-3, abs=1e-5), (key, a, b)
            else:
                assert a[key] == value, (key, a, b)


@pytest.mark.slow
def test_train_over_two_processes(tmp_path: Path, smoke_config: Path) -> None:
    # each rollout worker in a process of its own: tests/train/test_worker_processes.py
    run = tmp_path / "run"
    cmd = [c for c in train_cmd() if c != "-q"]  # the log says where each actor runs
    out = subprocess.run(
        [
            *cmd,
            "--config",
            str(smoke_config),
            "--run-dir",
            str(run),
            "--processes",
            "2",
            "--set",
            "sft.steps=0",
            "--set",
            'stages=[{"name": "rl1", "steps": 1}]',
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl") if "reward_mean" in r] == [1]
    started = re.findall(r"process (\S+) \(pid \d+\): (.*)", out.stderr)
    assert started == [("engines", "rollout.0, sandbox.0, reward.0")], out.stderr[-3000:]


def readme_first_five_minutes() -> list[list[str]]:
    """The `rstar2` commands of the README's "First five minutes" block, as argv lists."""
    text = (REPO / "README.md").read_text()
    block = text.split("## First five minutes", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [
        shlex.split(line, comments=True)
        for line in block.splitlines()
        if line.startswith("rstar2 ")
    ]


@pytest.mark.slow
def test_the_readmes_first_five_minutes_work_verbatim(tmp_path: Path) -> None:
    # `--quick` is the smoke run a new user tries first: it must show the loop working (some
    # step earns reward and updates the policy), say when a step did not update, and leave
    # the RL policy where `eval`/`chat --model RUN` find it; the bundled problems file works.
    commands = readme_first_five_minutes()
    assert [c[1] for c in commands] == ["train", "eval", "chat", "view"]
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    outs = []
    for argv in commands[:3]:
        out = subprocess.run(
            [sys.executable, "-m", "rstar2.cli", *argv[1:]],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )  # fmt: skip
        assert out.returncode == 0, (argv, out.stderr[-3000:])
        outs.append(out)
    run = tmp_path / commands[0][commands[0].index("--run-dir") + 1]
    rows = [r for r in read_metrics(run / "metrics.jsonl") if r.get("stage") == "rl1"]
    trained = [r["trained_rollouts"] for r in rows]
    assert any(n > 0 for n in trained), trained
    summary = json.loads((run / "summary.json").read_text())
    assert summary["extra"].get("steps_not_updated", 0) == sum(n == 0 for n in trained)
    if summary["extra"].get("steps_not_updated"):
        assert "policy not updated" in outs[0].stderr
    assert (tmp_path / summary["model"]).resolve() == (run / "model-rl").resolve()
    latest = run / "checkpoints" / (run / "checkpoints" / "LATEST").read_text().strip()
    want = read_policy(latest)["model"]
    got = load_model(run / "model-rl")[0].state_dict()
    for name, tensor in got.items():
        torch.testing.assert_close(tensor, want[name], msg=name)
    assert "pass@1" in outs[1].stdout and "final answer" in outs[2].stdout
    assert "Warning" not in outs[0].stderr  # nothing alarming in a clean run
    _view_serves_the_run(commands[3], tmp_path, run)


def _view_serves_the_run(argv: list[str], cwd: Path, run: Path) -> None:
    """The README's `rstar2 view RUN` (on a free port): it lists the run's recorded steps and
    evaluations, and one Ctrl-C stops it with exit code 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rstar2.cli", *argv[1:], "--port", str(port)],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline, sources = time.monotonic() + 60, None
        while sources is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/sources", timeout=5) as r:
                    sources = json.loads(r.read())
            except OSError:
                time.sleep(0.5)
        assert sources is not None, proc.communicate(timeout=10)
        assert (cwd / sources[0]["path"]).resolve() == run.resolve()
        assert {s["source"] for s in sources[0]["sets"]} >= {"train", "validation"}
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_rl_checkpoints_and_the_resumed_run_matches(
    tmp_path: Path, smoke_config: Path, signum: signal.Signals, reference: tuple[Path, str]
) -> None:
    # No periodic checkpoint (checkpoint_every > steps): the one to resume from is written on
    # the requested stop, at the last step done; the resumed run is the uninterrupted one.
    sparse = tmp_path / "sparse.toml"
    sparse.write_text(
        smoke_config.read_text().replace("checkpoint_every = 1", "checkpoint_every = 9")
    )
    ref = reference[0]
    run = tmp_path / "run"
    proc = subprocess.Popen(
        train_cmd("--config", str(sparse), "--run-dir", str(run)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while not any(
        r.get("step") == 1 and "reward_mean" in r for r in read_metrics(run / "metrics.jsonl")
    ):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended first"
        time.sleep(0.02)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert f"resume with `rstar2 train --resume {run}`" in err.strip().splitlines()[-1]
    assert "Traceback" not in err
    ck = (run / "checkpoints" / "LATEST").read_text().strip()
    assert ck in ("step-000001", "step-000002")  # the step done when the stop was honoured
    subprocess.run(train_cmd("--resume", str(run)), check=True, capture_output=True, timeout=600)
    assert deterministic(read_metrics(run / "metrics.jsonl")) == deterministic(
        read_metrics(ref / "metrics.jsonl")
    )
