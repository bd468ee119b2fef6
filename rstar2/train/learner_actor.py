"""The learner actor: the async shell of the RL controller on the live graph.

`rstar2.train.controller.Controller` decides what the run does (which problems, stages and
their solved-filter, evaluation, checkpoints, resume); this actor executes its commands
(`rstar2.train.run_commands`) and feeds each reply back as an event, with the `perf_counter`
stamps of the command's start and end (the step's timings), until `Finish`:

- `RollOut`, `Submit`: send the tasks as one `RolloutBatch` on ``tasks`` (the scheduler routes
  them to rollout workers; tool calls go to the sandbox services; the reward actor scores them)
  and collect every scored trajectory from ``scored`` (`rstar2.train.rollout_reader`);
- `Update`: select (RoC or GRPO), compute advantages and update the policy (`RunState.train_on`,
  in a worker thread, so the event loop keeps serving);
- `PushWeights`: push the policy to every rollout worker and wait for their acks (on-policy:
  the next step samples from the updated policy), over the bus or the learner's weight group
  (`rstar2.weights.push`, ports ``weights`` and ``report``); with `cluster.colocate` the
  engines sleep through the update (`rstar2.train.colocation`, port ``control``);
- `OpenRun`, `WriteMetrics`, `TraceStep`, `Checkpoint`: the run's files (`RUN/metrics.jsonl`
  and TensorBoard, where an RL step's row also gets `loop_cpu_s`, measured here: the CPU
  seconds this process's event-loop thread ran while the step's training rollouts were
  collected, the Python of every actor in the process, the engines' and learner's worker
  threads apart; `RUN/rollout_trace.jsonl` in the simulator's trace format, `checkpoints/`);
  a `RollOut` or `Update` with a `Recording`: `RUN/trajectories.jsonl` (`run_files.py`);
  `ResetOptimizer`; `EnterPhase`: the profiler's window; as the RL steps begin, the process's
  heap is frozen (`rstar2.heap`: collections then skip the objects of the startup) until the
  run ends (the summary's `heap_frozen_objects`).

For `rstar2 profile`: the update and the weight push are handle spans (ports "update" and
"weights"; the workers record their own loading); `rollout_only=True` skips both (the policy
stays as it is); `profile=True` adds `result["profile"]`: "counters", the engines' KV use
(`rstar2.train.kv_samples`), and "window", the wall-clock start and end of the RL steps.

What it does not do: decide anything (the controller), generate, execute or score (other
actors), or the RL math (rstar2.rl, rstar2.learner.policy_update).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import anyio
import torch

from rstar2 import heap
from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import handling
from rstar2.train import run_commands as rc
from rstar2.train.accuracy import eval_splits
from rstar2.train.colocation import Colocation
from rstar2.train.config import TrainConfig
from rstar2.train.controller import Controller
from rstar2.train.rollout_reader import RolloutReader
from rstar2.train.run_files import RunFiles
from rstar2.train.run_state import RunState, load_split
from rstar2.weights import shared_policy
from rstar2.weights.learner_group import Request, layout_for
from rstar2.weights.push import PushPlan, WeightPush, open_push
from rstar2.wire import (
    ENGINE_CONTROL,
    WEIGHT_REPLIES,
    WEIGHT_REQUESTS,
    EngineReport,
    EngineReportRequest,
    EngineSleepAck,
    Message,
    RolloutBatch,
    TrajectoryResult,
)

log = logging.getLogger(__name__)


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
        "weights": port(WEIGHT_REQUESTS, reply=WEIGHT_REPLIES),
        "control": port(ENGINE_CONTROL, reply=EngineSleepAck),
        "report": port(EngineReportRequest, reply=EngineReport),
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
        self.push: WeightPush
        """The weight push (opened in `serve`)."""
        self.colocation: Colocation
        """The engines' sleep through each update (created in `serve`)."""
        self.files = RunFiles(self.run_dir, self.cfg.rollout_trace, self.cfg.rollout_trace_tokens)
        """The metrics log, rollout trace and trajectory log (opened by `OpenRun`)."""
        self.rl_window: list[float] = []
        """Wall-clock start and end of the RL steps (the profiler's window)."""
        self.stop_reason = ""
        """The signal that asked the graph to stop ("": none)."""
        self._abandon: anyio.CancelScope | None = None
        """The scope of the rollout in flight that a stop request may abandon."""
        self.reader: RolloutReader
        """Rollouts in flight and their scored trajectories (created in `serve`)."""
        self.heap_frozen = 0
        """The objects this run froze in the process's heap as its RL steps began
        (`rstar2.heap`; 0: not yet), thawed when the run ends."""
        self.loop_cpu: dict[int, float] = {}
        """The event-loop thread's CPU seconds while each step's training rollouts were
        collected, by step, until its metrics row is written (`loop_cpu_s`)."""

    async def serve(self, ctx: ActorContext) -> None:
        if self.cfg.graph.learner_threads > 0:
            torch.set_num_threads(self.cfg.graph.learner_threads)
        self.reader = RolloutReader(ctx, self.cfg.engine.block_size, self.profile)
        state, controller = await anyio.to_thread.run_sync(self._open)
        if self.cfg.cluster.share_weights:  # the engines of this process build on it
            shared_policy.publish(str(self.run_dir), state.model)
        summary: dict[str, Any] | None = None
        failed = True
        control = _requests(ctx, "control")
        self.colocation = Colocation(control, ctx.peers("control"), self.cfg.cluster.colocate)
        try:
            async with self._open_push(ctx) as push:
                self.push = push
                summary = await self.reader.reading(self._run(ctx, state, controller))
            failed = False
        finally:
            if self.heap_frozen:
                heap.thaw()
            shared_policy.withdraw(str(self.run_dir))
            self.files.close()
            state.close(abort=failed)  # blocking but short: a stop message, or kills
        if summary is None:
            raise RuntimeError("the RL controller ran out of commands before finishing")
        summary["wall_s"] = self._wall_s(state)
        summary["heap_frozen_objects"] = self.heap_frozen
        if self.profile:
            summary["profile"] = {"counters": self.reader.kv_samples, "window": self.rl_window}
        ctx.stop_graph("done", summary)

    async def _run(
        self, ctx: ActorContext, state: RunState, controller: Controller
    ) -> dict[str, Any] | None:
        """Execute the controller's commands until `Finish`; returns its summary."""
        pending = deque(controller.start(self.resume, state.saved))
        while pending:
            command = pending.popleft()
            if isinstance(command, rc.Finish):
                return command.summary
            if isinstance(command, rc.RollOut) and controller.interruptible:
                pending = deque(await self._interruptible(ctx, state, controller, command))
            else:
                pending.extend(await self._execute(ctx, state, controller, command))
        return None

    def request_stop(self, reason: str) -> None:
        """A signal asked the graph to stop: end the run at the next point where the policy is
        the last step done's (at once when a rollout is in flight), checkpointed."""
        self.stop_reason = reason
        if self._abandon is not None:
            self._abandon.cancel()

    async def _interruptible(
        self, ctx: ActorContext, state: RunState, controller: Controller, command: rc.RollOut
    ) -> list[rc.Command]:
        """Execute a rollout that a stop request abandons; then (or if one came before) the
        controller's interruption commands instead of its next ones."""
        if not self.stop_reason:
            with anyio.CancelScope() as scope:
                self._abandon = scope
                try:
                    return await self._execute(ctx, state, controller, command)
                finally:
                    self._abandon = None
        # what comes next is the command's to say: `train` prints how to resume, `experiment`
        # that a rerun goes on, `bench train` nothing (its run directory is a temporary one)
        log.warning(
            "%s: checkpointing step %d and stopping", self.stop_reason, controller.progress.step
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
        if not cfg.evaluate_validation:
            validation = []  # held out (the test split stays where it is), not evaluated
        controller = Controller(
            cfg, train, validation, state.prompt_ids, self.rollout_only, test=test
        )
        return state, controller

    async def _execute(
        self, ctx: ActorContext, state: RunState, controller: Controller, command: rc.Command
    ) -> list[rc.Command]:
        """Execute one command; a command with a reply returns the controller's next ones."""
        started = time.perf_counter()
        match command:
            case rc.OpenRun(resume_step=resume_step):
                self.files.open(resume_step)
            case rc.PushWeights(version=version):
                await self.colocation.before_push()
                pushed = (await self.push.push(state, version)).metrics()
                return controller.weights_pushed(version, pushed, started, time.perf_counter())
            case rc.RollOut(step=step, record=record):
                cpu = time.thread_time()
                results = await self.reader.collect(command)
                if command.kind == "train":
                    self.loop_cpu[step] = time.thread_time() - cpu
                if record is not None:
                    self.files.record(step, results, record, None)
                return controller.rollouts_done(step, results, started, time.perf_counter())
            case rc.Submit(rollout=rollout):
                await self.reader.submit(rollout)
            case rc.Update(step=step, groups=groups, record=record):
                await self.colocation.before_update()
                with handling(ctx, "update"):
                    metrics = await anyio.to_thread.run_sync(state.train_on, groups, step)
                if record is not None:
                    results = [r for g in groups for r in g]
                    self.files.record(step, results, record, state.last_trained)
                return controller.update_done(step, metrics, started, time.perf_counter())
            case rc.ResetOptimizer():
                state.reset_optimizer()
            case rc.TraceStep(step=step, results=results, max_response_tokens=budget):
                self.files.trace_step(step, results, budget)
            case rc.WriteMetrics(row=row, line=line):
                if row.get("step") in self.loop_cpu:  # the step's own row, written once
                    row = {**row, "loop_cpu_s": self.loop_cpu.pop(row["step"])}
                self.files.write_metrics(row)
                if line is not None:
                    log.info(line)
            case rc.Checkpoint(step=step, state=saved):
                saved = {**saved, "wall_s": self._wall_s(state)}
                await anyio.to_thread.run_sync(state.save, step, saved)
            case rc.EnterPhase(phase=phase):
                if phase == "rl" and not self.heap_frozen:
                    self.heap_frozen = heap.freeze()
                self.rl_window.append(time.time())
            case rc.Finish():
                raise ValueError("Finish is the shell's loop's to handle")
        return []

    def _open_push(self, ctx: ActorContext) -> AbstractAsyncContextManager[WeightPush]:
        """The weight push `cluster.weight_sync` chooses: over the bus or the weight group."""
        c, engines = self.cfg.cluster, ctx.peers("weights")
        plan = PushPlan(
            layout=layout_for(c.engine_backend, c.weight_sync, engines, c.gpus, c.tp),
            engines=engines,
            bucket_bytes=max(1, int(c.weight_bucket_mb * 2**20)),
            atomic=self.cfg.rl.max_staleness > 0,
            host=self.weight_sync_host,
            shared=c.share_weights,
        )
        weights, report = _requests(ctx, "weights"), _requests(ctx, "report")
        return open_push(plan, weights, report, partial(handling, ctx, "weights"))


def _requests(ctx: ActorContext, port_name: str) -> Request:
    """Requests to rollout worker `peer` on the client port `port_name`."""

    async def request(peer: int, msg: Message, timeout: float | None) -> Message:
        return await ctx.request(port_name, msg, peer=peer, timeout=timeout)

    return request
