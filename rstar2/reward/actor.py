"""The reward actor: scores finished trajectories off the hot path.

Trajectories arrive on ``trajectories``; each is scored by the reward pool (math-verify in
worker processes with timeouts, see `reward_pool.py`) in its own task, so a slow verification
never holds back the others (`rstar2.actors.service.Service`), and leaves on ``scored`` with `reward`, `reward_status` and the
time it took. A truncated rollout (budget or turn limit) gets 0 without verification, as in
the paper. Tool responses are cut out of the text before extraction, so a `\boxed{}` printed
by the model's own code never counts as its answer.

A verification that timed out or failed (status "timeout" or "error": the verifier's alarm,
its hard timeout, a verifier that died twice, or one that raised on the input) scores 0 but
says nothing about the answer: the trajectory is marked `infra_failure = "reward:<status>"`
(unless its rollout already marked it) and RL does not train on it (`infra_failure.py`).

Each scoring is recorded for the profiler (`rstar2.actors.handling.BusyTrack`, port
"trajectories"): the instance counts as busy while any trajectory is being scored.

What it does not do: extract or verify itself (the pool does), or decide what to train on.
"""

from __future__ import annotations

import re
import time
from typing import ClassVar

import msgspec

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import BusyTrack
from rstar2.actors.service import Route, Service
from rstar2.finish_reason import TRUNCATED_REASONS
from rstar2.format_markers import TOOL_RESPONSE, TOOL_RESPONSE_END
from rstar2.reward.infra_failure import infra_failure_of
from rstar2.reward.reward_config import RewardConfig
from rstar2.reward.reward_pool import RewardPool, open_reward_pool
from rstar2.wire import TrajectoryResult

_TOOL_RESPONSE = re.compile(
    f"{re.escape(TOOL_RESPONSE)}.*?({re.escape(TOOL_RESPONSE_END)}|$)", re.DOTALL
)


def model_text(response: str) -> str:
    """The response without the tool responses the loop inserted."""
    return _TOOL_RESPONSE.sub("", response)


class RewardActor(Actor):
    inputs: ClassVar[dict[str, Port]] = {"trajectories": port(TrajectoryResult)}
    outputs: ClassVar[dict[str, Port]] = {"scored": port(TrajectoryResult)}
    Params = RewardConfig

    def __init__(self, cfg: RewardConfig) -> None:
        self.cfg = cfg

    async def serve(self, ctx: ActorContext) -> None:
        busy = BusyTrack(ctx, "trajectories", slots=self.cfg.workers)
        async with open_reward_pool(self.cfg) as pool:

            async def score(traj: TrajectoryResult) -> None:
                await ctx.send("scored", await self.score(pool, traj))

            await Service(ctx, {"trajectories": Route(score)}, busy=busy).serve()

    async def score(self, pool: RewardPool, done: TrajectoryResult) -> TrajectoryResult:
        """The result with its trajectory's reward and status, and the scoring time."""
        start = time.perf_counter()
        traj = done.trajectory
        if traj.finish_reason in TRUNCATED_REASONS:
            reward, status = 0.0, "truncated"
        else:
            result = await pool.score(model_text(traj.response_text), done.answer)
            reward, status = result.reward, result.status
        scored = msgspec.structs.replace(
            traj,
            reward=reward,
            reward_status=status,
            infra_failure=infra_failure_of(status, traj.infra_failure),
        )
        return msgspec.structs.replace(
            done, trajectory=scored, reward_s=time.perf_counter() - start
        )
