"""The rollout worker actor: one inference engine and the agent loops that run on it.

Each instance owns one inference engine for a model directory: the embedded engine
(`rstar2.engine`, the default) or, with `engine_backend="vllm"`, a vLLM engine
(`rstar2.engine.vllm_backend`, imported only then: vLLM is an optional install) sized like the
embedded one (`vllm_fields`: same context length, batch and block size, a KV pool of
`kv_budget_tokens`) unless the `vllm` options say otherwise. It serves three request/reply
ports:

- ``assign`` (`RolloutTask` -> `TrajectoryResult`): roll out one trajectory with
  `run_trajectory`; many run at once as separate tasks over the one engine (continuous
  batching), and each reply is sent the moment its trajectory ends, with the engine's KV stats
  attached so the scheduler's view stays fresh; a turn that ends in a tool call is reported on
  ``turns`` (`TurnEnded`, `RoutedEngine`). All turns of a trajectory stay on this engine,
  unless ``move_turns``: then before each later turn the worker asks the scheduler on
  ``route`` (`TurnRoute` -> `TurnRouted`) and, when the answer is another engine, has that
  engine's worker generate the turn over ``peers`` (`RoutedEngine`); the agent loop, its
  state and the tool calls stay here.
- ``generate`` (`PeerGenerate` -> `PeerGenerated`): one turn for another worker's trajectory
  (a turn the scheduler moved to this engine).
- ``weights``: new policy weights, pushed by the learner between RL steps (synchronous RL: no
  trajectory is in flight) or while trajectories are in flight (`rl.max_staleness > 0`): the
  worker's weight gate (`rstar2.rollout.weight_gate`) loads them at a turn boundary and tags
  every turn with the policy version that generated it (`TrajectoryResult.policy_versions`);
  a bus push's buckets are staged until its `final` one and loaded at once. Over the bus (`WeightUpdate` -> `WeightAck`: the flat tensors, loaded with
  `update_weights`), or, with `cluster.weight_sync = "broadcast"` on vLLM engines, through the
  learner's weight group (`rstar2.weights.group_member`): `EngineReportRequest` first (answered
  once the engine is up), `WeightGroupJoin` -> `WeightGroupJoined` once, then per update
  `WeightBroadcast` (the manifest) -> `WeightAck` once the engine has received and loaded the
  tensors; these run as tasks, so the worker keeps answering while its engine receives.
  With `cluster.colocate` (vLLM engines sharing their GPUs with the learner), `EngineSleep`
  -> `EngineSleepAck` frees the engine's GPU memory before the learner's update and
  `EngineWake` -> `EngineSleepAck` takes it back before the new weights arrive
  (`SleepableEngine`; the embedded engine cannot sleep and fails the actor with a TypeError).
- ``report`` (`EngineReportRequest` -> `EngineReport`): the engine's KV stats.

Tool calls leave through the ``tools`` client port to the sandbox service instances, each to
the instance with the fewest of this worker's calls outstanding; a call with no reply in time
("transport_timeout") or a reply of the wrong kind ("bad_reply") comes back as a failed result
flagged as an infrastructure failure (`ExecResult.infra`), which marks its trajectory.

For the profiler (`rstar2.actors.handling`), the instance counts as busy while its engine
generates for any trajectory (port "generate", queue depth = the engine's waiting requests) or
loads weights (port "weights"); time a trajectory spends waiting on a tool call is not busy.

What it does not do: choose which engine serves a trajectory (the scheduler actor), or score
(the reward actor).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import BusyTrack, handling
from rstar2.actors.service import Route, Service
from rstar2.config import from_dict, require
from rstar2.engine.async_engine import open_engine
from rstar2.engine.config import EngineConfig, resolve_device
from rstar2.engine.protocol import Engine, GenerationOutput, SamplingParams, SleepableEngine
from rstar2.model.loader import load_model, load_tokenizer
from rstar2.rollout.agent_loop import run_trajectory
from rstar2.rollout.config import RolloutConfig
from rstar2.rollout.token_codec import TokenCodec
from rstar2.rollout.trajectory import Trajectory
from rstar2.rollout.turn_router import RoutedEngine, engine_report, peer_params
from rstar2.rollout.weight_gate import WeightGate
from rstar2.weights.flat_codec import unflatten_weights
from rstar2.weights.group_member import join_group, receive_broadcast
from rstar2.wire import (
    EngineLoad,
    EngineReport,
    EngineReportRequest,
    EngineSleep,
    EngineSleepAck,
    EngineWake,
    ExecRequest,
    ExecResult,
    Message,
    PeerGenerate,
    PeerGenerated,
    RolloutTask,
    TrajectoryResult,
    TurnEnded,
    TurnRoute,
    TurnRouted,
    WeightAck,
    WeightBroadcast,
    WeightGroupJoin,
    WeightGroupJoined,
    WeightUpdate,
)

log = logging.getLogger(__name__)


class GraphTools:
    """A `ToolExecutor` over the graph's sandbox services: least outstanding calls first."""

    def __init__(self, ctx: ActorContext, port_name: str = "tools", timeout_s: float = 120.0):
        self.ctx = ctx
        self.port = port_name
        self.timeout_s = timeout_s
        self.outstanding = [0] * max(ctx.peers(port_name), 1)

    def pick(self) -> int:
        return min(range(len(self.outstanding)), key=lambda i: (self.outstanding[i], i))

    async def run(self, req: ExecRequest) -> ExecResult:
        peer = self.pick()
        self.outstanding[peer] += 1
        try:
            reply = await self.ctx.request(self.port, req, peer=peer, timeout=self.timeout_s)
        except TimeoutError:
            message = "the sandbox service did not answer in time"
            return _failed(req.id, "timeout", message, infra="transport_timeout")
        finally:
            self.outstanding[peer] -= 1
        if not isinstance(reply, ExecResult):
            message = f"unexpected reply {type(reply).__name__}"
            return _failed(req.id, "killed", message, infra="bad_reply")
        return reply


class _TimedTools:
    """Adds up the wall time one trajectory spends waiting on tools, and keeps each call's."""

    def __init__(self, inner: GraphTools) -> None:
        self.inner = inner
        self.latencies: dict[str, float] = {}
        """Request id ("<traj>/t<turn>") -> wall seconds of that call (one call per turn)."""

    async def run(self, req: ExecRequest) -> ExecResult:
        start = time.perf_counter()
        try:
            return await self.inner.run(req)
        finally:
            self.latencies[req.id] = time.perf_counter() - start

    @property
    def seconds(self) -> float:
        """Wall time spent waiting on tools, all calls together."""
        return sum(self.latencies.values())

    def per_turn(self, turns: int) -> list[float]:
        """Latency of turn k's call for k < turns (0.0 where the turn ran none)."""
        by_turn: dict[int, float] = {}
        for request_id, seconds in self.latencies.items():
            _, _, turn = request_id.rpartition("/t")
            if turn.isdigit():
                by_turn[int(turn)] = seconds
        return [by_turn.get(k, 0.0) for k in range(turns)]


class _TracedEngine:
    """The engine as the agent loops see it: each generation is a turn under the weight gate
    (tagged with the policy version that generated it) and recorded as busy time."""

    def __init__(
        self, engine: Engine, busy: BusyTrack, max_model_len: int, gate: WeightGate
    ) -> None:
        self.engine = engine
        self.busy = busy
        self.max_model_len = max_model_len
        self.gate = gate

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        async with self.gate.turn() as version:
            with self.busy.unit():
                out = await self.engine.generate(request_id, prompt_ids, params)
        return dataclasses.replace(out, policy_version=version)

    async def abort(self, request_id: str) -> None:
        await self.engine.abort(request_id)

    async def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        await self.engine.update_weights(state_dict)

    def stats(self) -> EngineLoad:
        return self.engine.stats()


ENGINE_BACKENDS = ("embedded", "vllm")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def kv_bytes_per_token(model_config: dict[str, Any], dtype: str) -> int:
    """K and V of one token over all layers, from a HF `config.json` (dtype "auto": its own)."""
    if dtype == "auto":
        dtype = str(model_config.get("torch_dtype") or model_config.get("dtype") or "float32")
    if dtype not in _DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_BYTES)} or 'auto', got {dtype!r}")
    heads = model_config["num_attention_heads"]
    head_dim = model_config.get("head_dim") or model_config["hidden_size"] // heads
    kv_heads = model_config.get("num_key_value_heads") or heads
    return 2 * model_config["num_hidden_layers"] * kv_heads * head_dim * _DTYPE_BYTES[dtype]


def vllm_fields(
    model_dir: str, engine: EngineConfig, model_config: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """`VLLMConfig` fields of a worker's vLLM engine: the embedded engine's limits (context
    length, batch, block size, a KV pool of `kv_budget_tokens` in float32 unless `options` name
    a dtype), then `options` on top (e.g. `kv_cache_memory_bytes = 0` to size the pool by
    `gpu_memory_utilization` instead)."""
    dtype = str(options.get("dtype", "float32"))
    fields: dict[str, Any] = {
        "model": model_dir,
        "dtype": dtype,
        "max_model_len": engine.max_model_len,
        "max_num_seqs": engine.max_num_seqs,
        "block_size": engine.block_size,
        "kv_cache_memory_bytes": engine.num_blocks
        * engine.block_size
        * kv_bytes_per_token(model_config, dtype),
    }
    return {**fields, **options}


def _failed(request_id: str, status: str, message: str, *, infra: str) -> ExecResult:
    return ExecResult(
        id=request_id,
        status=status,
        stdout="",
        stderr=message,
        exit_code=-1,
        wall_s=0.0,
        truncated=False,
        infra=infra,
    )


def to_result(
    task: RolloutTask,
    traj: Trajectory,
    engine: int,
    stats: EngineLoad,
    gen_s: float,
    tool_s: float,
    tool_latencies: list[float] | None = None,
    moved_turns: int = 0,
) -> TrajectoryResult:
    """The wire form of a finished trajectory, with the engine's stats attached."""
    return TrajectoryResult(
        traj_id=task.traj_id,
        prompt_id=task.prompt_id,
        sample=task.sample,
        step=task.step,
        kind=task.kind,
        answer=task.answer,
        token_ids=traj.token_ids,
        loss_mask=traj.loss_mask,
        logprobs=traj.logprobs,
        prompt_len=traj.prompt_len,
        response_text=traj.response_text,
        turns=traj.turns,
        tool_calls=traj.tool_calls,
        tool_errors=traj.tool_errors,
        tool_timeouts=traj.tool_timeouts,
        answer_tags=traj.answer_tags,
        finish_reason=traj.finish_reason,
        engine=engine,
        gen_s=gen_s,
        tool_s=tool_s,
        load=stats,
        tool_latencies=tool_latencies or [],
        moved_turns=moved_turns,
        infra_failure=traj.infra_failure,
        policy_versions=traj.policy_versions,
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
    """The inference engine: "embedded" or "vllm"."""
    vllm: dict[str, Any] = field(default_factory=dict)
    """vLLM options over the ones derived from `engine` (`vllm_fields`)."""
    move_turns: bool = False
    """Ask the scheduler where each later turn runs (`scheduler.move_turns`)."""

    def validate(self) -> None:
        require(
            self.engine_backend in ENGINE_BACKENDS,
            "engine_backend",
            self.engine_backend,
            "one of " + ", ".join(ENGINE_BACKENDS),
        )
        require(self.threads >= 0, "threads", self.threads, ">= 0")


class RolloutWorker(Actor):
    """An engine plus its agent loops (see the module docstring)."""

    inputs: ClassVar[dict[str, Port]] = {
        "assign": port(RolloutTask, reply=TrajectoryResult),
        "weights": port(
            (
                WeightUpdate,
                WeightGroupJoin,
                WeightBroadcast,
                EngineReportRequest,
                EngineSleep,
                EngineWake,
            ),
            reply=(WeightAck, WeightGroupJoined, EngineReport, EngineSleepAck),
        ),
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
        self.gate: WeightGate
        """Turns and weight loads (created in `serve`, on the event loop)."""
        self._staged: dict[str, torch.Tensor] = {}
        """Buckets of `_staged_version` received before its final one."""
        self._staged_version = -1

    @asynccontextmanager
    async def _open_engine(self) -> AsyncIterator[tuple[Engine, TokenCodec, int]]:
        """The configured backend's engine, the token codec and the engine's context limit."""
        if self.engine_backend == "embedded":
            model, tokenizer = load_model(self.model_dir)
            device = resolve_device(self.engine_cfg.device, self.index)
            async with open_engine(model, self.engine_cfg, device=device) as embedded:
                yield embedded, TokenCodec(tokenizer), embedded.core.max_model_len
            return
        # vLLM is optional (its own virtual environment): imported only when chosen.
        from rstar2.engine.vllm_backend import open_vllm_engine
        from rstar2.engine.vllm_config import VLLMConfig

        model_config = json.loads((Path(self.model_dir) / "config.json").read_text())
        fields = vllm_fields(self.model_dir, self.engine_cfg, model_config, self.vllm_options)
        codec = TokenCodec(load_tokenizer(self.model_dir))
        async with open_vllm_engine(from_dict(VLLMConfig, fields, "vllm")) as engine:
            yield engine, codec, engine.max_model_len

    async def serve(self, ctx: ActorContext) -> None:
        if self.threads > 0:
            torch.set_num_threads(self.threads)
        tools = GraphTools(ctx, timeout_s=self.rollout_cfg.tool_wait_s + 60.0)
        self.gate = WeightGate()
        async with self._open_engine() as (engine, codec, max_model_len):
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
        traced = _TracedEngine(engine, busy, max_model_len, self.gate)

        async def assign(task: RolloutTask) -> TrajectoryResult:
            return await self._rollout(ctx, traced, codec, tools, task)

        async def generate(msg: PeerGenerate) -> PeerGenerated:
            out = await traced.generate(msg.request_id, list(msg.prompt_ids), peer_params(msg))
            return PeerGenerated(
                out.request_id, out.token_ids, out.logprobs, out.finish_reason, out.policy_version
            )

        async def weights(msg: Message) -> Message:
            return await self._weights(ctx, engine, msg)

        # Rollouts and peer turns record their busy time around the engine (`_TracedEngine`).
        routes = {
            "assign": Route(assign, busy=False),
            "generate": Route(generate, busy=False),
            "weights": Route(weights, concurrent=_through_the_group, busy=False),
            "report": Route(weights, concurrent=False),  # answers EngineReportRequest
        }
        await Service(ctx, routes, busy=busy).serve()

    async def _rollout(
        self,
        ctx: ActorContext,
        engine: _TracedEngine,
        codec: TokenCodec,
        tools: GraphTools,
        task: RolloutTask,
    ) -> TrajectoryResult:
        cfg = self._task_config(task)
        timed = _TimedTools(tools)
        start = time.perf_counter()
        route = self.move_turns and ctx.peers("peers") > 1
        routed = RoutedEngine(ctx, engine, self.index, task, route)
        traj = await run_trajectory(
            routed or engine,
            timed,
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
        tool_s = timed.seconds
        return to_result(
            task,
            traj,
            self.index,
            engine.stats(),
            wall - tool_s,
            tool_s,
            timed.per_turn(traj.turns),
            routed.moved_turns,
        )

    def _task_config(self, task: RolloutTask) -> RolloutConfig:
        return dataclasses.replace(
            self.rollout_cfg,
            max_response_tokens=task.max_response_tokens or self.rollout_cfg.max_response_tokens,
            max_turns=task.max_turns or self.rollout_cfg.max_turns,
            temperature=task.temperature,
        )

    async def _weights(self, ctx: ActorContext, engine: Engine, msg: Message) -> Message:
        """The "weights" port: an update over the bus, the learner's weight group (join it, or
        receive one update through it), sleep or wake (`cluster.colocate`), or a report once
        the engine is up (also the whole of the "report" port)."""
        if isinstance(msg, WeightUpdate):
            start = time.perf_counter()
            # host tensors: the engine copies them onto its device (`load_state_dict`, vLLM)
            flat = torch.from_numpy(msg.flat.copy())
            staged = self._staged if self._staged_version == msg.version else {}
            staged.update(unflatten_weights(msg.names, msg.shapes, flat))
            self._staged, self._staged_version = {}, -1
            if msg.final:
                await self.gate.update(msg.version, lambda: engine.update_weights(staged))
            else:  # held until the version's last bucket: no turn sees half an update
                self._staged, self._staged_version = staged, msg.version
            load_s = time.perf_counter() - start
            return WeightAck(version=msg.version, engine=self.index, load_s=load_s)
        if isinstance(msg, EngineReportRequest):
            return engine_report(self.index, engine.stats())
        if isinstance(msg, EngineSleep | EngineWake):
            return await self.sleep_or_wake(engine, msg)
        with handling(ctx, "weights"):  # a concurrent unit: its own span
            if isinstance(msg, WeightGroupJoin):
                return await join_group(engine, msg, self.index)
            assert isinstance(msg, WeightBroadcast)
            acks: list[WeightAck] = []

            async def load() -> None:
                acks.append(await receive_broadcast(engine, msg, self.index))

            await self.gate.update(msg.version, load)
            return acks[0]

    async def sleep_or_wake(self, engine: Engine, msg: EngineSleep | EngineWake) -> EngineSleepAck:
        """Free the engine's GPU memory for the learner's update, or take it back."""
        if not isinstance(engine, SleepableEngine):
            raise TypeError(
                f"the {self.engine_backend} engine cannot sleep: cluster.colocate needs "
                'cluster.engine_backend = "vllm"'
            )
        start = time.perf_counter()
        if isinstance(msg, EngineSleep):
            await engine.sleep(msg.level)
        else:
            await engine.wake_up()
        seconds = time.perf_counter() - start
        return EngineSleepAck(engine=self.index, sleeping=engine.sleeping, seconds=seconds)


def _through_the_group(msg: Message) -> bool:
    """Weight-group messages wait on a collective with the other engines: each in its own task,
    so the worker keeps answering meanwhile; everything else on "weights" is handled inline."""
    return isinstance(msg, WeightGroupJoin | WeightBroadcast)
