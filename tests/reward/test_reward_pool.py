"""The reward pool end to end: real worker processes, both anyio backends."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from rstar2.config import ConfigError
from rstar2.reward import RewardConfig, RewardResult, open_reward_pool
from rstar2.reward.reward_pool import decide_locally, result_from_reply
from rstar2.wire import VerifyReply

pytestmark = pytest.mark.anyio

CASES = [
    # (response, reference, reward, status)
    ("<answer>\\boxed{1,000}</answer>", "1000", 1.0, "ok"),  # fast path
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0, "ok"),
    ("\\boxed{ 42 }", "42", 1.0, "ok"),
    ("\\boxed{\\dfrac{3}{4}}", "0.75", 1.0, "ok"),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0, "ok"),  # needs math-verify
    ("\\boxed{7}", "8", 0.0, "ok"),
    ("\\boxed{!!}{{", "8", 0.0, "ok"),
    ("no box at all", "8", 0.0, "no_answer"),
]


def test_decide_locally_without_workers() -> None:
    assert decide_locally("\\boxed{1,000}", "1000") == RewardResult(1.0, "1,000", "ok")
    assert decide_locally("none", "1") == RewardResult(0.0, None, "no_answer")
    assert decide_locally("\\boxed{7}", "8") == "7"  # unequal: goes to math-verify
    assert decide_locally("\\boxed{1,000}", "1000", fast_path=False) == "1,000"
    with pytest.raises(ValueError, match="empty"):
        decide_locally("\\boxed{1}", " ")
    with pytest.raises(TypeError, match="str"):
        decide_locally(None, "1")  # type: ignore[arg-type]


def test_result_from_reply_maps_statuses() -> None:
    assert result_from_reply("1", VerifyReply(1, "equal")).reward == 1.0
    assert result_from_reply("1", VerifyReply(1, "unequal")) == RewardResult(0.0, "1", "ok")
    assert result_from_reply("1", VerifyReply(1, "timeout", "t")).status == "timeout"
    assert result_from_reply("1", VerifyReply(1, "error", "boom")).message == "boom"


def test_bad_config_is_rejected() -> None:
    with pytest.raises(ConfigError, match="reward.workers"):
        RewardConfig(workers=0).validate()


@pytest.mark.slow
async def test_many_concurrent_callers_get_right_rewards(anyio_backend: str) -> None:
    results: dict[int, RewardResult] = {}
    cases = CASES * 3
    async with open_reward_pool(RewardConfig(workers=2, fast_path=False)) as pool:

        async def one(i: int) -> None:
            results[i] = await pool.score(cases[i][0], cases[i][1])

        async with anyio.create_task_group() as tg:
            for i in range(len(cases)):
                tg.start_soon(one, i)
    for i, (_, _, reward, status) in enumerate(cases):
        assert (results[i].reward, results[i].status) == (reward, status), cases[i]


@pytest.mark.slow
async def test_pathological_answer_times_out_without_blocking_others(anyio_backend: str) -> None:
    cfg = RewardConfig(workers=2, timeout_s=0.5, kill_grace_s=1.0, fast_path=False)
    async with open_reward_pool(cfg) as pool:
        slow: list[RewardResult] = []

        async def pathological() -> None:
            slow.append(await pool.score("\\boxed{9^{9^{9^{9}}}}", "1"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(pathological)
            other = await pool.score("\\boxed{0.5}", "1/2")
        assert other == RewardResult(1.0, "0.5", "ok")
        assert slow[0].reward == 0.0 and slow[0].status == "timeout"
        assert (await pool.score("\\boxed{3}", "3.0")).reward == 1.0


@pytest.mark.slow
async def test_pool_survives_a_killed_worker(anyio_backend: str) -> None:
    async with open_reward_pool(RewardConfig(workers=1, fast_path=False)) as pool:
        (pid,) = pool.worker_pids()
        os.kill(pid, signal.SIGKILL)
        result = await pool.score("\\boxed{6/2}", "3")
        assert result == RewardResult(1.0, "6/2", "ok")
        assert pool.worker_pids() and pool.worker_pids() != [pid]


@pytest.mark.slow
async def test_unresponsive_worker_is_killed_and_replaced(anyio_backend: str) -> None:
    cfg = RewardConfig(workers=1, timeout_s=0.5, kill_grace_s=0.3, fast_path=False)
    async with open_reward_pool(cfg) as pool:
        (pid,) = pool.worker_pids()
        os.kill(pid, signal.SIGSTOP)  # alive but deaf: only the parent's hard timeout helps
        stuck = await pool.score("\\boxed{4}", "4")
        assert (stuck.reward, stuck.status) == (0.0, "timeout")
        assert "no answer within" in stuck.message
        again = await pool.score("\\boxed{4}", "4")
        assert again == RewardResult(1.0, "4", "ok")
        assert pid not in pool.worker_pids()


async def test_extra_latency_holds_a_worker_per_answer(anyio_backend: str) -> None:
    cfg = RewardConfig(workers=1, extra_latency_s=0.2)
    async with open_reward_pool(cfg) as pool:
        start = anyio.current_time()
        assert await pool.score("no box at all", "8") == RewardResult(0.0, None, "no_answer")
        assert anyio.current_time() - start < 0.2  # nothing to verify: no latency
        results: list[RewardResult] = []

        async def one(response: str) -> None:
            results.append(await pool.score(response, "1000"))

        start = anyio.current_time()
        async with anyio.create_task_group() as tg:
            for response in ("\\boxed{1,000}", "\\boxed{1000}", "\\boxed{7}"):
                tg.start_soon(one, response)
        assert anyio.current_time() - start >= 3 * 0.2  # one worker: one after another
    assert sorted(r.reward for r in results) == [0.0, 1.0, 1.0]


def test_negative_extra_latency_is_rejected() -> None:
    with pytest.raises(ConfigError, match="reward.extra_latency_s"):
        RewardConfig(extra_latency_s=-1.0).validate()
