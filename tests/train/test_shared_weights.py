"""`cluster.share_weights`: the embedded engines compute with the learner's own tensors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import anyio
import pytest
import torch

from rstar2.config import ConfigError
from rstar2.learner.checkpoint import read_policy
from rstar2.metrics import read_metrics
from rstar2.train.config import load_train_config
from rstar2.weights import shared_policy
from rstar2.weights.push import PushPlan, open_push
from rstar2.wire import Message, WeightAck, WeightUpdate
from tests.profile.tool_policy import ToolPolicy
from tests.train.test_train_run import train_cmd

SHARE = "cluster.share_weights=true"


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("graph.processes=2", "graph.processes"),
        ("cluster.learner_ranks=2", "cluster.learner_ranks"),
        ("rl.max_staleness=1", "rl.max_staleness"),
        ("engine.device=cpu", "engine.device"),  # learner.device stays "auto"
        ('cluster.engine_backend="vllm"', "cluster.engine_backend"),
    ],
)
def test_sharing_is_refused_where_it_is_not_safe(setting: str, key: str) -> None:
    load_train_config(sets=[SHARE])  # the default's settings allow it
    with pytest.raises(ConfigError, match=key):
        load_train_config(sets=[SHARE, setting])


def test_an_engine_waits_for_the_learners_module_and_checks_it() -> None:
    module = torch.nn.Linear(2, 2)

    async def main() -> None:
        with pytest.raises(TimeoutError, match="graph.processes = 1"):
            await shared_policy.wait_for("nobody", timeout_s=0.1)
        async with anyio.create_task_group() as tg:
            got: list[torch.nn.Module] = []

            async def engine() -> None:
                got.append(await shared_policy.wait_for("run", timeout_s=5))

            tg.start_soon(engine)
            await anyio.sleep(0.1)
            shared_policy.publish("run", module)
        assert got == [module]

    try:
        anyio.run(main)
        with pytest.raises(RuntimeError, match="already shared"):
            shared_policy.publish("run", torch.nn.Linear(2, 2))
    finally:
        shared_policy.withdraw("run")
    shared_policy.check_shared(module, torch.device("cpu"))
    with pytest.raises(ValueError, match="same device"):
        shared_policy.check_shared(module, torch.device("cuda", 0))
    with pytest.raises(ValueError, match="float32"):
        shared_policy.check_shared(module.to(torch.bfloat16), torch.device("cpu"))


def test_a_shared_push_is_one_empty_final_update_per_engine() -> None:
    sent: list[tuple[int, Message]] = []

    async def request(peer: int, msg: Message, timeout: float | None) -> Message:
        sent.append((peer, msg))
        assert isinstance(msg, WeightUpdate)
        return WeightAck(version=msg.version, engine=peer)

    async def main() -> None:
        plan = PushPlan(layout=None, engines=2, bucket_bytes=1, atomic=False, shared=True)
        async with open_push(plan, request, request) as push:
            stats = await push.push(source=None, version=7)  # type: ignore[arg-type]
        assert stats.buckets == 0 and stats.broadcast_bytes == 0 and stats.bus_bytes > 0

    anyio.run(main)
    assert sorted(peer for peer, _ in sent) == [0, 1]
    for _, msg in sent:
        assert isinstance(msg, WeightUpdate)
        assert (msg.version, msg.names, msg.final, msg.bucket) == (7, [], True, 0)
        assert msg.flat.size == 0


@pytest.mark.slow
def test_a_run_with_shared_weights_trains_exactly_as_one_that_copies_them(
    tmp_path: Path, tool_policy: ToolPolicy
) -> None:
    """From the SFT'd tool policy (it earns reward, so every step updates the policy), three
    RL steps with the engine computing on the learner's tensors give the copied run's metrics
    and weights: the engine saw every update. Only the push's own figures differ. So does a
    shared run with the scheduler, sandbox and reward in a process of their own
    (`graph.services_process`, as `configs/gpu_20m.toml` runs): the placement changes no
    result."""
    sets = tool_policy.rl_sets(
        3, "heldout_problems=4", "checkpoint_every=3", "rollout.tool_show_time=false"
    )
    runs = {}
    logs = {}
    apart = [SHARE, "graph.services_process=true"]
    for name, extra in (("copied", []), ("shared", [SHARE]), ("apart", apart)):
        run = tmp_path / name
        argv = [x for s in [*sets, *extra] for x in ("--set", s)]
        cmd = [c for c in train_cmd() if c != "-q"]  # the log says where each actor runs
        cmd += ["--run-dir", str(run), *argv]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        logs[name] = out.stderr
        runs[name] = [r for r in read_metrics(run / "metrics.jsonl") if r.get("stage") == "rl1"]
    assert "process services" not in logs["shared"]
    assert "): scheduler.0, sandbox.0, reward.0" in logs["apart"], logs["apart"][-3000:]
    copied = runs["copied"]
    assert [r["trained_rollouts"] > 0 for r in copied] == [True] * 3, copied
    assert all(r["weights_bus_bytes"] > 100_000 for r in copied)
    # timings, arrival-dependent
    own = ("time_", "step_s", "wall_s", "weights_", "engine_", "loop_cpu_s", "worker_loop_cpu_s")
    for shared in (runs["shared"], runs["apart"]):
        assert all(r["weights_bus_bytes"] < 100 and r["weights_buckets"] == 0 for r in shared)
        for a, b in zip(shared, copied, strict=True):
            assert a.keys() == b.keys()
            for key, value in b.items():
                if key.startswith(own):
                    continue
                if isinstance(value, float):  # the tolerance of test_train_run's resume check:
                    # two identical runs differ by float noise (weights by 3e-6, the logprob
                    # mismatch's maximum 1.9e-6 against 3.6e-6), a stale engine by 0.06 in reward
                    assert a[key] == pytest.approx(value, rel=1e-3, abs=1e-5), (key, a, b)
                else:
                    assert a[key] == value, (key, a, b)
    want = read_policy(tmp_path / "copied" / "checkpoints" / "step-000003")
    for run in ("shared", "apart"):
        got = read_policy(tmp_path / run / "checkpoints" / "step-000003")
        for name, tensor in want["model"].items():
            torch.testing.assert_close(got["model"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)
