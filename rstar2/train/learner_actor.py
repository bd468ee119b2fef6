"""The learner actor: the async shell of the RL controller on the live graph.

`rstar2.train.controller.Controller` decides what the run does (which problems, stages and
their solved-filter, evaluation, checkpoints, resume); this actor executes its commands
(`rstar2.train.run_commands`) and feeds each reply back as an event, until `Finish`:

- `RollOut`: send the tasks as one `RolloutBatch` on ``tasks`` (the scheduler routes them to
  rollout workers; tool calls go to the sandbox services; the reward actor scores them) and
  collect every scored trajectory from ``scored``;
- `Update`: select (RoC or GRPO), compute advantages and update the policy (`RunState.train_on`,
  in a worker thread, so the event loop keeps serving);
- `PushWeights`: push the policy to every rollout worker on ``weights`` and wait for their acks
  (on-policy: the next step samples from the updated policy): over the bus, the flat
  tensors to each worker (`WeightUpdate`), or, with `cluster.weight_sync = "broadcast"` on
  vLLM engines, once by broadcast through the learner's weight group over every engine's
  workers (`rstar2.weights.learner_group`; the bus carries only the manifest). The step's metrics
  say which: `weights_broadcast_bytes` (through the group, once) and `weights_bus_bytes`
  (over the bus, all workers together);
- `OpenRun`, `WriteMetrics`, `TraceStep`, `Checkpoint`: the run's files (`RUN/metrics.jsonl`
  and TensorBoard, `RUN/rollout_trace.jsonl` in the simulator's trace format, `checkpoints/`);
  `ResetOptimizer`; `EnterPhase`: the profiler's window.

Each reply carries the `perf_counter` stamps of its command's start and end, from which the
controller computes the step's timings.

For `rstar2 profile`: the update and the weight push are recorded as handle spans (ports
"update" and "weights", the flattening; the workers record their own loading);
`rollout_only=True` skips both (the policy stays as it is); `profile=True` adds
`result["profile"]["counters"]` to the stop result: per trajectory, its engine's KV use just
before the trajectory released its blocks (track "rollout.<engine>/engine", counter "kv_used":
the used fraction the engine reported after the release plus the trajectory's own blocks; the
KV-aware scheduler holds back work that does not fit, so the engine's own waiting queue stays
short), "kv_room": how many more sequences of its length still fitted beside it (below 1: the
KV cache could not hold a second one), and the engine's "waiting" requests, stamped when the learner received it; and
"window": the wall-clock start and end of the RL steps.

What it does not do: decide anything (the controller), generate, execute or score (other
actors), or the RL math (rstar2.rl, rstar2.learner.policy_update).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import numpy as np
import torch

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import handling
from rstar2.frames import frames_size, to_frames
from rstar2.metrics import MetricsLog
from rstar2.train.accuracy import eval_splits
from rstar2.train.config import TrainConfig
from rstar2.train.controller import Controller
from rstar2.train.rollout_inbox import RolloutInbox
from rstar2.train.rollout_trace import RolloutTrace
from rstar2.train.run_commands import (
    Checkpoint,
    Command,
    EnterPhase,
    Finish,
    OpenRun,
    PushWeights,
    ResetOptimizer,
    RollOut,
    Submit,
    TraceStep,
    Update,
    WriteMetrics,
)
from rstar2.train.run_state import RunState, load_split
from rstar2.weights.flat_codec import flatten_weights
from rstar2.weights.learner_group import LearnerWeightGroup, layout_for
from rstar2.wire import (
    EngineReport,
    EngineReportRequest,
    EngineSleep,
    EngineSleepAck,
    EngineWake,
    Message,
    RolloutBatch,
    TrajectoryResult,
    WeightAck,
    WeightBroadcast,
    WeightGroupJoin,
    WeightGroupJoined,
    WeightUpdate,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass
class LearnerParams:
    """The learner actor's parameters (the graph's `params` table for it)."""

    config: TrainConfig
    """The run's whole training config."""
    run_dir: str
    """The run directory (metrics, checkpoints, trace)."""
    model_dir: str
    """The policy to start from (the SFT'd model, or the checkpoint's on resume)."""
    resume: bool = False
    """Continue from the run directory's last checkpoint."""
    resume_from: str = ""
    """With `resume`: the checkpoint directory to continue from ("": the latest)."""
    started_at: float = 0.0
    """Wall-clock time (`time.time()`) this session of the run began (0: when the actor
    starts); with the time a resumed checkpoint recorded, the run's `wall_s`."""
    rollout_only: bool = False
    """Profiling: roll out without updating the policy."""
    profile: bool = False
    """Keep the engines' KV samples and hand them back for the profiler."""
    weight_sync_host: str = "127.0.0.1"
    """Address of this process that every engine's workers reach (the weight group)."""


class LearnerActor(Actor):
    inputs: ClassVar[dict[str, Port]] = {"scored": port(TrajectoryResult)}
    outputs: ClassVar[dict[str, Port]] = {
        "tasks": port(RolloutBatch),
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
    }

    Params = LearnerParams
    drains = True

    def __init__(self, params: LearnerParams) -> None:
        self.cfg = params.config
        self.run_dir = Path(params.run_dir)
        self.model_dir = Path(params.model_dir)
        self.resume = params.resume
        self.resume_from = Path(params.resume_from) if params.resume_from else None
        self.started_at = params.started_at or time.time()
        self.rollout_only = params.rollout_only
        self.profile = params.profile
        self.weight_sync_host = params.weight_sync_host
        """Address of this process that every engine's workers reach (the weight group)."""
        self.group: LearnerWeightGroup | None = None
        self.trace: RolloutTrace | None = None
        self.kv_samples: list[list[Any]] = []
        """[track, name, time, value] rows for the profiler (kept only when `profile`)."""
        self.metrics: MetricsLog | None = None
        self.engines_asleep = False
        """Colocation: the engines were put to sleep for the update and not yet woken."""
        self.rl_window: list[float] = []
        """Wall-clock start and end of the RL steps (the profiler's window)."""
        self.stop_reason = ""
        """The signal that asked the graph to stop ("": none)."""
        self._abandon: anyio.CancelScope | None = None
        """The scope of the rollout in flight that a stop request may abandon."""
        self.inbox = RolloutInbox()
        """Rollouts submitted (also ahead of their step, `rl.max_staleness`) and their
        trajectories received so far (by `_receive`, all the time)."""
        self._arrival: anyio.Event
        """Set when a trajectory has been filed (then replaced); created in `serve`."""

    async def serve(self, ctx: ActorContext) -> None:
        if self.cfg.graph.learner_threads > 0:
            torch.set_num_threads(self.cfg.graph.learner_threads)
        self._arrival = anyio.Event()
        state, controller = await anyio.to_thread.run_sync(self._open)
        summary: dict[str, Any] | None = None
        failed = True
        try:
            await self._open_group(ctx)
            summary = await self._receiving(ctx, self._run(ctx, state, controller))
            failed = False
        finally:
            if self.metrics is not None:
                self.metrics.close()
            if self.trace is not None:
                self.trace.close()
            if self.group is not None:
                self.group.close()
            state.close(abort=failed)  # blocking but short: a stop message, or kills
        if summary is None:
            raise RuntimeError("the RL controller ran out of commands before finishing")
        summary["wall_s"] = self._wall_s(state)
        if self.profile:
            summary["profile"] = {"counters": self.kv_samples, "window": self.rl_window}
        ctx.stop_graph("done", summary)

    async def _run(
        self, ctx: ActorContext, state: RunState, controller: Controller
    ) -> dict[str, Any] | None:
        """Execute the controller's commands until `Finish`; returns its summary."""
        pending = deque(controller.start(self.resume, state.saved))
        while pending:
            command = pending.popleft()
            if isinstance(command, Finish):
                return command.summary
            if isinstance(command, RollOut) and controller.interruptible:
                pending = deque(await self._interruptible(ctx, state, controller, command))
            else:
                pending.extend(await self._execute(ctx, state, controller, command))
        return None

    async def _receiving(self, ctx: ActorContext, run: Awaitable[_T]) -> _T:
        """Await `run` while a task reads every scored trajectory into the inbox as it comes.
        The learner must keep reading while it updates and pushes: with rollouts submitted
        ahead (`rl.max_staleness`), trajectories arrive meanwhile, and unread they would fill
        the bus up to the rollout workers, whose weight acks would then wait behind them.
        `run`'s own exception comes out as it is (not in an exception group)."""
        outcome: list[_T] = []
        error: list[BaseException] = []

        async def main(scope: anyio.CancelScope) -> None:
            try:
                outcome.append(await run)
            except BaseException as e:  # re-raised below, outside the task group
                error.append(e)
            finally:
                scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(self._receive, ctx)
            tg.start_soon(main, tg.cancel_scope)
        if error:
            raise error[0]
        return outcome[0]

    async def _receive(self, ctx: ActorContext) -> None:
        """File every scored trajectory with its rollout (`RolloutInbox`), for good."""
        while True:
            msg = (await ctx.recv()).msg
            if not isinstance(msg, TrajectoryResult) or not self.inbox.deliver(msg):
                log.warning("ignoring a stray message %r", getattr(msg, "traj_id", msg))
                continue
            if self.profile:
                self._sample_kv(msg)
            self._arrival.set()
            self._arrival = anyio.Event()

    def request_stop(self, reason: str) -> None:
        """A signal asked the graph to stop: end the run at the next point where the policy is
        the last step done's (at once when a rollout is in flight), checkpointed."""
        self.stop_reason = reason
        if self._abandon is not None:
            self._abandon.cancel()

    async def _interruptible(
        self, ctx: ActorContext, state: RunState, controller: Controller, command: RollOut
    ) -> list[Command]:
        """Execute a rollout that a stop request abandons; then (or if one came before) the
        controller's interruption commands instead of its next ones."""
        if not self.stop_reason:
            with anyio.CancelScope() as scope:
                self._abandon = scope
                try:
                    return await self._execute(ctx, state, controller, command)
                finally:
                    self._abandon = None
        log.warning(
            "%s: checkpointing step %d and stopping (resume with `rstar2 train --resume %s`)",
            self.stop_reason,
            controller.progress.step,
            self.run_dir,
        )
        return controller.interrupt(self.stop_reason)

    def _wall_s(self, state: RunState) -> float:
        """The run's wall time so far: this session's and that of the sessions before it."""
        return state.wall_before + time.time() - self.started_at

    def _open(self) -> tuple[RunState, Controller]:
        """The policy and optimizer (restored when resuming) and a controller over the run's
        problems (started later, from the checkpoint's state)."""
        cfg = self.cfg
        state = RunState.open(cfg, self.run_dir, self.model_dir, self.resume, self.resume_from)
        train = load_split(cfg, "train")
        validation, test = eval_splits(cfg, train)
        controller = Controller(
            cfg, train, validation, state.prompt_ids, self.rollout_only, test=test
        )
        return state, controller

    async def _execute(
        self, ctx: ActorContext, state: RunState, controller: Controller, command: Command
    ) -> list[Command]:
        """Execute one command; a command with a reply returns the controller's next ones."""
        started = time.perf_counter()
        match command:
            case OpenRun(resume_step=resume_step):
                self.metrics = MetricsLog(self.run_dir, resume_step=resume_step)
                if self.cfg.rollout_trace:
                    self.trace = RolloutTrace(
                        self.run_dir, resume_step, tokens=self.cfg.rollout_trace_tokens
                    )
            case PushWeights(version=version):
                if self.engines_asleep:
                    await self._set_engines_asleep(ctx, False)
                pushed = await self._push_weights(ctx, state, version)
                return controller.weights_pushed(version, pushed, started, time.perf_counter())
            case RollOut(step=step):
                results = await self._roll_out(ctx, command)
                return controller.rollouts_done(step, results, started, time.perf_counter())
            case Submit(rollout=rollout):
                await self._submit(ctx, rollout)
            case Update(step=step, results=results):
                if self.cfg.cluster.colocate:
                    await self._set_engines_asleep(ctx, True)
                with handling(ctx, "update"):
                    metrics = await anyio.to_thread.run_sync(state.train_on, results, step)
                return controller.update_done(step, metrics, started, time.perf_counter())
            case ResetOptimizer():
                state.reset_optimizer()
            case TraceStep(step=step, results=results, max_response_tokens=budget):
                if self.trace is not None:
                    self.trace.write(step, results, budget)
            case WriteMetrics(row=row, line=line):
                if self.metrics is None:
                    raise RuntimeError("a metrics row before OpenRun")
                self.metrics.write(row)
                if line is not None:
                    log.info(line)
            case Checkpoint(step=step, state=saved):
                saved = {**saved, "wall_s": self._wall_s(state)}
                await anyio.to_thread.run_sync(state.save, step, saved)
            case EnterPhase():
                self.rl_window.append(time.time())
            case Finish():
                raise ValueError("Finish is the shell's loop's to handle")
        return []

    async def _submit(self, ctx: ActorContext, rollout: RollOut) -> None:
        """Send a rollout's tasks; its trajectories are collected as they are read."""
        self.inbox.expect((rollout.kind, rollout.step), rollout.tasks)
        await ctx.send("tasks", RolloutBatch(step=rollout.step, tasks=rollout.tasks))

    async def _roll_out(self, ctx: ActorContext, rollout: RollOut) -> list[TrajectoryResult]:
        """A rollout's scored trajectories (submitted now unless it was submitted ahead);
        trajectories of other rollouts in flight read meanwhile are kept for them."""
        key = (rollout.kind, rollout.step)
        if not self.inbox.expects(key):
            await self._submit(ctx, rollout)
        while not self.inbox.complete(key):
            await self._arrival.wait()  # `_receive` files them
        return self.inbox.take(key)

    def _sample_kv(self, msg: TrajectoryResult) -> None:
        load = msg.load
        if msg.engine < 0 or load is None or load.kv_capacity_tokens <= 0:
            return
        track, t = f"rollout.{msg.engine}/engine", time.time()
        block = self.cfg.engine.block_size
        own = -(-len(msg.token_ids) // block) * block
        used = min(
            1.0, (load.kv_capacity_tokens - load.kv_free_tokens + own) / load.kv_capacity_tokens
        )
        room = (load.kv_free_tokens - own) / own if own else 0.0
        self.kv_samples.append([track, "kv_used", t, used])
        self.kv_samples.append([track, "kv_room", t, max(0.0, room)])
        self.kv_samples.append([track, "waiting", t, float(load.waiting)])

    async def _open_group(self, ctx: ActorContext) -> None:
        """With a learner-rooted weight group configured: open it and bring every engine in."""
        c = self.cfg.cluster
        layout = layout_for(c.engine_backend, c.weight_sync, ctx.peers("weights"), c.gpus, c.tp)
        if layout is None:
            return

        async def request(peer: int, msg: Message, timeout: float | None) -> Message:
            return await ctx.request("weights", msg, peer=peer, timeout=timeout)

        self.group = LearnerWeightGroup.open(self.weight_sync_host, layout, request)
        await self.group.join()

    async def _push_weights(
        self, ctx: ActorContext, state: RunState, version: int
    ) -> dict[str, float]:
        """Push the policy to every engine; returns the byte counts of the push."""
        bucket_bytes = max(1, int(self.cfg.cluster.weight_bucket_mb * 2**20))
        if self.group is not None:
            with handling(ctx, "weights"):
                # gathered a bucket at a time as the broadcast (in its thread) needs them
                tensors = (t for b in state.weight_buckets(bucket_bytes) for t in b.values())
                stats = await self.group.push_stream(state.weight_manifest(), tensors, version)
            log.info(
                "weights v%d: %.1f MiB broadcast once through the learner's group to %d "
                "engine(s), %d B of manifests over the bus, %.3fs",
                version,
                stats.broadcast_bytes / 2**20,
                self.group.layout.engines,
                stats.bus_bytes,
                stats.seconds,
            )
            return {
                "weights_broadcast_bytes": float(stats.broadcast_bytes),
                "weights_bus_bytes": float(stats.bus_bytes),
                "weights_buckets": 1.0,
                "weights_bucket_max_bytes": float(stats.broadcast_bytes),
            }
        peers = ctx.peers("weights")
        buckets = state.weight_buckets(bucket_bytes)
        # synchronous: every bucket loads as it comes (the engines are idle); asynchronous
        # RL: the engines keep generating, so they stage the buckets and load the version at
        # once on an empty `final` update after the last (no lookahead: one bucket in memory)
        atomic = self.cfg.rl.max_staleness > 0
        acked = lambda ack: isinstance(ack, WeightAck) and ack.version == version  # noqa: E731
        wanted = f"a WeightAck of version {version}"
        sent = largest = parts = 0
        while True:
            with handling(ctx, "weights"):  # the gather and the flattening
                bucket = await anyio.to_thread.run_sync(next, buckets, None)
                if bucket is None:
                    break
                names, shapes, flat = flatten_weights(bucket)
            largest = max(largest, sum(t.numel() * t.element_size() for t in bucket.values()))
            del bucket  # gathered tensors: only the flat copy is needed while it is sent
            update = WeightUpdate(
                version=version, names=names, shapes=shapes, flat=flat.numpy(), final=not atomic
            )
            await self._ask_every_engine(ctx, update, acked, wanted)
            sent += frames_size(to_frames(update)) * peers
            parts += 1
        if atomic:
            done = WeightUpdate(version, [], [], np.zeros(0, dtype=np.float32), final=True)
            await self._ask_every_engine(ctx, done, acked, wanted)
            sent += frames_size(to_frames(done)) * peers
        return {
            "weights_broadcast_bytes": 0.0,
            "weights_bus_bytes": float(sent),
            "weights_buckets": float(parts),
            "weights_bucket_max_bytes": float(largest),
        }

    async def _set_engines_asleep(self, ctx: ActorContext, asleep: bool) -> None:
        """Colocation (`cluster.colocate`): put every engine to sleep before the update (vLLM
        sleep mode frees the GPUs it shares with the learner) or wake them before the push."""
        msg: Message = EngineSleep() if asleep else EngineWake()
        start = time.perf_counter()

        await self._ask_every_engine(
            ctx,
            msg,
            lambda ack: isinstance(ack, EngineSleepAck) and ack.sleeping == asleep,
            f"an EngineSleepAck with sleeping={asleep}",
        )
        self.engines_asleep = asleep
        log.info(
            "engines %s in %.3fs", "asleep" if asleep else "awake", time.perf_counter() - start
        )

    async def _ask_every_engine(
        self,
        ctx: ActorContext,
        msg: Message,
        accepted: Callable[[Message], bool],
        wanted: str,
    ) -> None:
        """Send `msg` to every rollout worker on ``weights`` at once; each must answer with a
        reply `accepted` takes (else RuntimeError naming the engine and what was `wanted`)."""

        async def one(peer: int) -> None:
            ack = await ctx.request("weights", msg, peer=peer, timeout=300.0)
            if not accepted(ack):
                raise RuntimeError(f"engine {peer} answered {ack!r}, not {wanted}")

        async with anyio.create_task_group() as tg:
            for peer in range(ctx.peers("weights")):
                tg.start_soon(one, peer)
