"""Infrastructure failures end to end: injected into the agent loop (a dead sandbox, a
transport that never answers) and the reward actor (a verification that timed out), they are
flagged on the result's `Trajectory`, masked out of the training batch and counted in the step
metrics."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from rstar2.reward.actor import RewardActor
from rstar2.reward.reward_config import RewardConfig
from rstar2.rl.resampling import build_training_batch
from rstar2.rl.rl_config import RLConfig
from rstar2.rollout.agent_loop import run_trajectory
from rstar2.rollout.config import RolloutConfig
from rstar2.rollout.worker import to_result
from rstar2.train.step_metrics import rollout_metrics
from rstar2.wire import (
    EngineLoad,
    ExecRequest,
    ExecResult,
    RewardResult,
    RolloutTask,
    TrajectoryResult,
)
from tests.rl.records import ScriptedRandom
from tests.rollout.fakes import CharTokenizer, FakeExecutor, ScriptedEngine

TOK = CharTokenizer()
PROMPT = TOK.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
CALL = '<tool_call>{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(42)", "input": ""}}</tool_call>'
RIGHT = "<answer>\\boxed{42}</answer><|im_end|>"
WRONG = "<answer>\\boxed{7}</answer><|im_end|>"


class FakePool:
    """The reward pool's `score`: the answer 42 is right, 7 wrong, 13 makes the verifier time
    out (an overloaded verifier)."""

    async def score(self, response: str, reference: str) -> RewardResult:
        await anyio.lowlevel.checkpoint()
        if "boxed{13}" in response:
            return RewardResult(0.0, "13", "timeout", "no answer within 12s")
        right = "boxed{42}" in response
        return RewardResult(float(right), "42" if right else "7", "ok")


def sandbox(req: ExecRequest) -> ExecResult:
    """Sample 1's sandbox died under its call; every other call runs."""
    if req.id.startswith("p/1/"):
        return ExecResult(id=req.id, status="killed", stderr="zygote exited", infra="sandbox_died")
    return ExecResult(id=req.id, status="ok", stdout="42\n")


async def rollout(
    sample: int, scripts: list[str], ex: FakeExecutor, **cfg: float
) -> TrajectoryResult:
    engine = ScriptedEngine(TOK, {f"p/{sample}": scripts})
    rc = RolloutConfig(tool_show_time=False, **cfg)  # type: ignore[arg-type]
    traj = await run_trajectory(
        engine, ex, TOK, PROMPT, rc, prompt_id="p", sample=sample, seed=sample
    )
    task = RolloutTask(f"p/{sample}", "p", sample, 1, PROMPT, "42", seed=sample)
    load = EngineLoad(kv_capacity_tokens=1, kv_free_tokens=1, running=0, waiting=0)
    result = to_result(task, traj, 0, load, 0.0, 0.0)
    return await RewardActor(RewardConfig()).score(FakePool(), result)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_injected_failures_are_flagged_masked_and_counted() -> None:
    ex = FakeExecutor(sandbox)
    silent = FakeExecutor()
    silent.gate = anyio.Event()  # a transport that never answers
    results = [
        await rollout(0, [CALL, RIGHT], ex),  # clean, right
        await rollout(1, [CALL, RIGHT], ex),  # right, but its sandbox died: "tool:sandbox_died"
        await rollout(2, [CALL, WRONG], silent, tool_timeout_s=0.01, tool_wait_s=0.05),
        await rollout(3, [WRONG], ex),  # clean, wrong
        await rollout(4, ["<answer>\\boxed{13}</answer><|im_end|>"], ex),  # verifier timed out
        await rollout(5, [CALL, WRONG], ex),  # clean, wrong
    ]
    trajs = [r.trajectory for r in results]
    flags = [t.infra_failure for t in trajs]
    assert flags == ["", "tool:sandbox_died", "tool:tool_wait", "", "reward:timeout", ""]
    assert [t.reward for t in trajs] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    # the wire form keeps the flag
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(results[1]), type=type(results[1]))
    assert decoded.trajectory.infra_failure == "tool:sandbox_died"

    batch = build_training_batch([trajs], RLConfig(algo="grpo"), ScriptedRandom([]))
    assert [r.sample for r in batch.rollouts] == [0, 3, 5]  # masked out of the loss
    s = (1 / 3) ** 0.5 + 1e-6  # advantages over rewards [1, 0, 0] only
    assert batch.advantages == pytest.approx([(2 / 3) / s, (-1 / 3) / s, (-1 / 3) / s])
    assert batch.counts()["infra_masked"] == 3

    metrics = rollout_metrics(results)
    assert metrics["infra_failed"] == 3.0
    assert metrics["reward_mean"] == pytest.approx(1 / 3)
