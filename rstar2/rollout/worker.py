"""The rollout worker actor: one inference engine and the agent loops that run on it.

Each instance owns one inference engine for a model directory, embedded or vLLM, or an
instant one with no model (`rstar2.rollout.engine_backend`). It serves five request/reply
ports:

- ``assign`` (`RolloutTask` -> `TrajectoryResult`): roll out one trajectory with
  `run_trajectory`; many run at once as separate tasks over the one engine (continuous
  batching), and each reply is sent the moment its trajectory ends, with the engine's KV stats
  attached so the scheduler's view stays fresh, and the CPU seconds this worker's event loop
  ran since its first task of the step (`rstar2.rollout.loop_clock`); a turn that ends in a
  tool call is reported on ``turns`` (`TurnEnded`, `RoutedEngine`). All turns of a trajectory
  stay on this engine, unless ``move_turns``: then before each later turn the worker asks the
  scheduler on ``route`` (`TurnRoute` -> `TurnRouted`) and, when the answer is another
  engine, has that engine's worker generate the turn over ``peers`` (`RoutedEngine`); the
  agent loop, its state and the tool calls stay here.
- ``generate`` (`PeerGenerate` -> `PeerGenerated`): one turn for another worker's trajectory
  (a turn the scheduler moved to this engine).
- ``weights`` (`WeightRequest` -> `WeightReply`, `rstar2.weights.engine_loader`): new policy
  weights from the learner, between RL steps or while trajectories are in flight
  (`rl.max_staleness > 0`); the weight gate (`rstar2.rollout.weight_gate`) loads them at a
  turn boundary and tags every turn with the policy version that generated it
  (`Trajectory.policy_versions`). Over the bus (`WeightUpdate` -> `WeightAck`, buckets
  staged until their version's final one), or through the learner's weight group with
  `cluster.weight_sync = "broadcast"` on vLLM engines (`WeightGroupJoin` ->
  `WeightGroupJoined` once, then `WeightBroadcast` -> `WeightAck` per update; these run as
  tasks, so the worker keeps answering while its engine receives).
- ``control`` (`EngineSleep` / `EngineWake` -> `EngineSleepAck`): with `cluster.colocate`,
  free the engine's GPU memory for the learner's update or take it back.
- ``report`` (`EngineReportRequest` -> `EngineReport`): the engine's KV stats (the scheduler;
  the learner, to know the engine is up before the weight group forms).

Tool calls leave through the ``tools`` client port (`rstar2.rollout.graph_tools`).

For the profiler (`rstar2.actors.handling`), the instance counts as busy while its engine
generates for any trajectory (port "generate", queue depth = the engine's waiting requests) or
loads weights (port "weights"); time a trajectory spends waiting on a tool call is not busy.

What it does not do: choose which engine serves a trajectory (the scheduler actor), or score
(the reward actor).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import torch

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import BusyTrack, handling
from rstar2.actors.service import Route, Service
from rstar2.config import require
from rstar2.engine.config import EngineConfig
from rstar2.engine.protocol import Engine
from rstar2.rollout.agent_loop import run_trajectory
from rstar2.rollout.config import RolloutConfig
from rstar2.rollout.engine_backend import ENGINE_BACKENDS, open_worker_engine, sleep_or_wake
from rstar2.rollout.graph_tools import GraphTools
from rstar2.rollout.loop_clock import LoopClock
from rstar2.rollout.token_codec import TokenCodec
from rstar2.rollout.traced_engine import TracedEngine
from rstar2.rollout.turn_router import RoutedEngine, engine_report, peer_params
from rstar2.rollout.weight_gate import WeightGate
from rstar2.switch_interval import switch_interval
from rstar2.weights.engine_loader import EngineLoader
from rstar2.wire import (
    ENGINE_CONTROL,
    WEIGHT_REPLIES,
    WEIGHT_REQUESTS,
    EngineControl,
    EngineLoad,
    EngineReport,
    EngineReportRequest,
    EngineSleepAck,
    ExecRequest,
    ExecResult,
    PeerGenerate,
    PeerGenerated,
    RolloutTask,
    Trajectory,
    TrajectoryResult,
    TurnEnded,
    TurnRoute,
    TurnRouted,
)

log = logging.getLogger(__name__)


def to_result(
    task: RolloutTask,
    traj: Trajectory,
    engine: int,
    stats: EngineLoad,
    gen_s: float,
    tool_s: float,
    moved_turns: int = 0,
    loop_cpu_s: float = 0.0,
) -> TrajectoryResult:
    """The wire form of a finished trajectory: the record itself, with the task's identity,
    the engine's stats and the worker's measurements attached."""
    return TrajectoryResult(
        traj_id=task.traj_id,
        step=task.step,
        kind=task.kind,
        answer=task.answer,
        trajectory=traj,
        engine=engine,
        gen_s=gen_s,
        tool_s=tool_s,
        load=stats,
        moved_turns=moved_turns,
        prompt=task.prompt,
        loop_cpu_s=loop_cpu_s,
    )


@dataclass
class RolloutWorkerParams:
    """A rollout worker's parameters (the graph's `params` table for it)."""

    model_dir: str
    """The policy's Hugging Face model directory."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """The embedded engine's settings (also sizes a vLLM engine unless `vllm` says otherwise)."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """The agent loop's settings."""
    threads: int = 0
    """torch threads of the engine (0: torch's default)."""
    engine_backend: str = "embedded"
    """The inference engine: "embedded", "vllm" or "instant" (no model, scripted turns)."""
    vllm: dict[str, Any] = field(default_factory=dict)
    """vLLM options over the ones derived from `engine` (`vllm_fields`)."""
    move_turns: bool = False
    """Ask the scheduler where each later turn runs (`scheduler.move_turns`)."""
    switch_interval_ms: float = 5.0
    """The interpreter's thread switch interval while the embedded engine runs
    (`graph.switch_interval_ms`, `rstar2.switch_interval`); 5.0 is Python's default."""
    shared_policy: str = ""
    """The key under which the learner of this process shares its policy module
    (`cluster.share_weights`, `rstar2.weights.shared_policy`): the embedded engine computes
    with those tensors instead of loading `model_dir`'s; "" (default): it loads them."""

    def validate(self) -> None:
        require(
            self.engine_backend in ENGINE_BACKENDS,
            "engine_backend",
            self.engine_backend,
            "one of " + ", ".join(ENGINE_BACKENDS),
        )
        require(self.threads >= 0, "threads", self.threads, ">= 0")
        require(self.switch_interval_ms > 0, "switch_interval_ms", self.switch_interval_ms, "> 0")


class RolloutWorker(Actor):
    """An engine plus its agent loops (see the module docstring)."""

    inputs: ClassVar[dict[str, Port]] = {
        "assign": port(RolloutTask, reply=TrajectoryResult),
        "weights": port(WEIGHT_REQUESTS, reply=WEIGHT_REPLIES),
        "control": port(ENGINE_CONTROL, reply=EngineSleepAck),
        "report": port(EngineReportRequest, reply=EngineReport),
        "generate": port(PeerGenerate, reply=PeerGenerated),
    }
    outputs: ClassVar[dict[str, Port]] = {
        "tools": port(ExecRequest, reply=ExecResult),
        "route": port(TurnRoute, reply=TurnRouted),
        "peers": port(PeerGenerate, reply=PeerGenerated),
        "turns": port(TurnEnded),
    }

    Params = RolloutWorkerParams

    def __init__(self, params: RolloutWorkerParams) -> None:
        self.model_dir = params.model_dir
        self.engine_cfg = params.engine
        self.rollout_cfg = params.rollout
        self.threads = params.threads
        self.engine_backend = params.engine_backend
        self.vllm_options = dict(params.vllm)
        self.move_turns = params.move_turns
        self.shared_policy = params.shared_policy
        self.switch_interval_s = params.switch_interval_ms / 1e3
        self.gate: WeightGate
        """Turns and weight loads (created in `serve`, on the event loop)."""
        self.loop_clock = LoopClock()
        """The event loop's CPU time per step of rollouts (each result's `loop_cpu_s`)."""

    async def serve(self, ctx: ActorContext) -> None:
        if self.threads > 0:
            torch.set_num_threads(self.threads)
        tools = GraphTools(ctx, timeout_s=self.rollout_cfg.tool_wait_s + 60.0)
        self.gate = WeightGate()
        opened = open_worker_engine(
            self.engine_backend,
            self.model_dir,
            self.engine_cfg,
            self.vllm_options,
            self.index,
            shared=self.shared_policy,
        )
        with ExitStack() as interval:
            if self.engine_backend == "embedded":  # its thread shares this process's lock
                interval.enter_context(switch_interval(self.switch_interval_s))
            async with opened as (engine, codec, max_model_len):
                await self._serve_engine(ctx, engine, codec, tools, max_model_len)

    async def _serve_engine(
        self,
        ctx: ActorContext,
        engine: Engine,
        codec: TokenCodec,
        tools: GraphTools,
        max_model_len: int,
    ) -> None:
        busy = BusyTrack(ctx, "generate", waiting=lambda: engine.stats().waiting)
        traced = TracedEngine(engine, busy, max_model_len, self.gate)
        weights = EngineLoader(engine, self.index, self.gate, partial(handling, ctx, "weights"))

        async def assign(task: RolloutTask) -> TrajectoryResult:
            return await self._rollout(ctx, traced, codec, tools, task)

        async def generate(msg: PeerGenerate) -> PeerGenerated:
            out = await traced.generate(msg.request_id, list(msg.prompt_ids), peer_params(msg))
            return PeerGenerated(
                out.request_id, out.token_ids, out.logprobs, out.finish_reason, out.policy_version
            )

        async def control(msg: EngineControl) -> EngineSleepAck:
            return await sleep_or_wake(engine, msg, self.index, self.engine_backend)

        async def report(msg: EngineReportRequest) -> EngineReport:
            return engine_report(self.index, engine.stats())

        # Rollouts and peer turns record their busy time around the engine (`TracedEngine`).
        routes = {
            "assign": Route(assign, busy=False),
            "generate": Route(generate, busy=False),
            "weights": Route(weights.handle, concurrent=weights.concurrent, busy=False),
            "control": Route(control, concurrent=False),
            "report": Route(report, concurrent=False),
        }
        await Service(ctx, routes, busy=busy).serve()

    async def _rollout(
        self,
        ctx: ActorContext,
        engine: TracedEngine,
        codec: TokenCodec,
        tools: GraphTools,
        task: RolloutTask,
    ) -> TrajectoryResult:
        cfg = self._task_config(task)
        start = time.perf_counter()
        window = (task.step, task.kind)
        self.loop_clock.open(window)
        route = self.move_turns and ctx.peers("peers") > 1
        routed = RoutedEngine(ctx, engine, self.index, task, route)
        traj = await run_trajectory(
            routed,
            tools,
            codec,
            list(task.prompt_ids),
            cfg,
            prompt_id=task.prompt_id,
            sample=task.sample,
            seed=task.seed,
            context_limit=engine.max_model_len,
            on_tool_turn=routed.turn_ended,
        )
        wall = time.perf_counter() - start
        tool_s = sum(traj.tool_latencies)
        return to_result(
            task,
            traj,
            self.index,
            engine.stats(),
            wall - tool_s,
            tool_s,
            routed.moved_turns,
            self.loop_clock.since(window),
        )

    def _task_config(self, task: RolloutTask) -> RolloutConfig:
        return dataclasses.replace(
            self.rollout_cfg,
            max_response_tokens=task.max_response_tokens or self.rollout_cfg.max_response_tokens,
            max_turns=task.max_turns or self.rollout_cfg.max_turns,
            temperature=task.temperature,
        )
