"""The learner actor: drives RL steps through the graph and applies GRPO-RoC updates.

One RL step, all on the live actor graph:

1. sample `prompts_per_step` problems from the data cursor and send their
   `prompts_per_step x rollouts_per_prompt` trajectories as one `RolloutBatch` on ``tasks``
   (the scheduler routes them to rollout workers; tool calls go to the sandbox services; the
   reward actor scores them);
2. collect every scored trajectory of the step from ``scored``;
3. select (RoC or GRPO), compute advantages and update the policy (in a worker thread, so the
   event loop keeps serving);
4. push the new weights to every rollout worker on ``weights`` and wait for their acks
   (on-policy: the next step samples from the updated policy): over the bus, the flat
   tensors to each worker (`WeightUpdate`), or, with `cluster.weight_sync = "broadcast"` on
   vLLM engines, once by broadcast through the learner's weight group over every engine's
   workers (`rstar2.weights.learner_group`; the bus carries only the manifest). The step's metrics
   say which: `weights_broadcast_bytes` (through the group, once) and `weights_bus_bytes`
   (over the bus, all workers together);
5. evaluate held-out accuracy when due, write the metrics row and a progress line, and
   checkpoint when due. The step's trajectories also go to `RUN/rollout_trace.jsonl`
   (`rstar2/train/rollout_trace.py`: the simulator's trace format) unless `rollout_trace`
   is off.

Stage boundaries follow `cfg.stages`: a stage may first filter the problem pool (drop problems
the current policy solves `filter_samples` times out of `filter_samples`) and reset the
optimizer. When all stages are done the actor evaluates once more, checkpoints, and stops the
graph with a summary.

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

What it does not do: generate, execute or score (other actors), or the RL math (rstar2.rl,
rstar2.learner.policy_update).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, ClassVar

import anyio
import torch

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import handling
from rstar2.config import from_dict
from rstar2.metrics import MetricsLog
from rstar2.train.config import TrainConfig
from rstar2.train.rollout_trace import RolloutTrace
from rstar2.train.run_state import RunState, group_results
from rstar2.train.step_metrics import accuracy, rollout_metrics, stage_split
from rstar2.weights.flat_codec import flatten_weights
from rstar2.weights.learner_group import LearnerWeightGroup, layout_for
from rstar2.wire import (
    EngineReport,
    EngineReportRequest,
    Message,
    RolloutBatch,
    RolloutTask,
    TrajectoryResult,
    WeightAck,
    WeightBroadcast,
    WeightGroupJoin,
    WeightGroupJoined,
    WeightUpdate,
    frames_size,
    to_frames,
)

log = logging.getLogger(__name__)


def progress_line(row: dict[str, Any], total: int) -> str:
    """One fixed-width line per step."""
    acc = row.get("heldout_accuracy")
    acc_text = f"{acc:5.3f}" if isinstance(acc, float) else "  -  "
    return (
        f"step {row['step']:4d}/{total:<4d} {row['stage']:<4s} | reward {row['reward_mean']:5.3f}"
        f" | heldout {acc_text} | len {row['response_tokens_mean']:6.1f}"
        f" | tools {row['tool_calls_mean']:4.2f} | err+ {row['tool_error_ratio_correct']:5.3f}"
        f" | mixed {row['mixed_group_fraction']:4.2f} | clip {row.get('clip_fraction', 0.0):5.3f}"
        f" | {row['step_s']:5.1f}s (gen {row['time_gen_s']:4.1f} tool {row['time_tool_s']:4.1f}"
        f" rew {row['time_reward_s']:4.1f} learn {row['time_learner_s']:4.1f}"
        f" sync {row['time_sync_s']:4.1f})"
    )


class LearnerActor(Actor):
    inputs: ClassVar[dict[str, Port]] = {"scored": port(TrajectoryResult)}
    outputs: ClassVar[dict[str, Port]] = {
        "tasks": port(RolloutBatch),
        "weights": port(
            (WeightUpdate, WeightGroupJoin, WeightBroadcast, EngineReportRequest),
            reply=(WeightAck, WeightGroupJoined, EngineReport),
        ),
    }

    def __init__(
        self,
        config: dict[str, Any],
        run_dir: str,
        model_dir: str,
        resume: bool = False,
        rollout_only: bool = False,
        profile: bool = False,
        weight_sync_host: str = "127.0.0.1",
    ) -> None:
        self.cfg = from_dict(TrainConfig, config)
        self.run_dir = Path(run_dir)
        self.model_dir = Path(model_dir)
        self.resume = resume
        self.rollout_only = rollout_only
        self.profile = profile
        self.weight_sync_host = weight_sync_host
        """Address of this process that every engine's workers reach (the weight group)."""
        self.group: LearnerWeightGroup | None = None
        self.trace: RolloutTrace | None = None
        self.kv_samples: list[list[Any]] = []
        """[track, name, time, value] rows for the profiler (kept only when `profile`)."""

    async def serve(self, ctx: ActorContext) -> None:
        if self.cfg.graph.learner_threads > 0:
            torch.set_num_threads(self.cfg.graph.learner_threads)
        state = await anyio.to_thread.run_sync(
            RunState.open, self.cfg, self.run_dir, self.model_dir, self.resume
        )
        resume_step = state.progress.step if self.resume else None
        metrics = MetricsLog(self.run_dir, resume_step=resume_step)
        self.trace = RolloutTrace(self.run_dir, resume_step) if self.cfg.rollout_trace else None
        try:
            await self._open_group(ctx)
            await self._push_weights(ctx, state)
            if state.progress.sft_accuracy is None and self.cfg.heldout_problems:
                acc, _ = await self._evaluate(ctx, state)
                state.progress.sft_accuracy = state.progress.last_accuracy = acc
                metrics.write({"step": 0, "stage": "sft", "heldout_accuracy": acc})
                log.info("held-out accuracy after SFT: %.3f", acc)
            rl_start = time.time()
            while state.progress.step < self.cfg.total_steps:
                row = await self._rl_step(ctx, state)
                metrics.write(row)
                log.info(progress_line(row, self.cfg.total_steps))
                if row["step"] % self.cfg.checkpoint_every == 0:
                    await anyio.to_thread.run_sync(state.save)
            rl_window = [rl_start, time.time()]
            summary = await self._finish(ctx, state, metrics)
        finally:
            metrics.close()
            if self.trace is not None:
                self.trace.close()
            if self.group is not None:
                self.group.close()
        if self.profile:
            summary["profile"] = {"counters": self.kv_samples, "window": rl_window}
        ctx.stop_graph("done", summary)

    async def _rl_step(self, ctx: ActorContext, state: RunState) -> dict[str, Any]:
        cfg = self.cfg
        step = state.progress.step + 1
        stage_index = state.stage_at(step)
        stage = cfg.stages[stage_index]
        if state.progress.stage_started < stage_index:
            await self._start_stage(ctx, state, stage_index)
        start = time.perf_counter()
        problems = state.stream.next_batch(cfg.prompts_per_step)
        tasks = state.rollout_tasks(
            problems,
            step,
            "train",
            cfg.rollouts_per_prompt,
            cfg.rollout.temperature,
            stage.max_response_tokens,
            stage.max_turns,
        )
        results = await self._roll_out(ctx, tasks, step)
        rollout_s = time.perf_counter() - start
        if self.trace is not None:
            self.trace.write(step, results, stage.max_response_tokens)
        update, learner_s, sync_s = await self._update(ctx, state, results, step)
        row: dict[str, Any] = {"step": step, "stage": stage.name}
        row.update(rollout_metrics(results))
        row.update(update)
        row.update(stage_split(results, rollout_s))
        row.update(time_learner_s=learner_s, time_sync_s=sync_s)
        if cfg.eval_every and step % cfg.eval_every == 0 and cfg.heldout_problems:
            acc, eval_s = await self._evaluate(ctx, state)
            state.progress.last_accuracy = acc
            row.update(heldout_accuracy=acc, time_eval_s=eval_s)
        row["step_s"] = time.perf_counter() - start
        return row

    async def _update(
        self, ctx: ActorContext, state: RunState, results: list[TrajectoryResult], step: int
    ) -> tuple[dict[str, float], float, float]:
        """Update the policy on the step's results and push it: (metrics with the push's byte
        counts, learner_s, sync_s)."""
        if self.rollout_only:
            state.progress.step = step
            return {}, 0.0, 0.0
        t0 = time.perf_counter()
        with handling(ctx, "update"):
            update = await anyio.to_thread.run_sync(state.train_on, results, step)
        learner_s = time.perf_counter() - t0
        state.progress.step = step
        t0 = time.perf_counter()
        update.update(await self._push_weights(ctx, state))
        return update, learner_s, time.perf_counter() - t0

    async def _start_stage(self, ctx: ActorContext, state: RunState, index: int) -> None:
        stage = self.cfg.stages[index]
        log.info("stage %s: %d steps", stage.name, stage.steps)
        if stage.filter_solved:
            await self._filter_solved(ctx, state, index)
        if stage.reset_optimizer:
            state.reset_optimizer()
            log.info("stage %s: optimizer state reset", stage.name)
        state.progress.stage_started = index

    async def _filter_solved(self, ctx: ActorContext, state: RunState, index: int) -> None:
        """Stage 3's hard subset: drop pool problems the policy solves every time."""
        stage = self.cfg.stages[index]
        pool = [state.stream.all[i] for i in state.stream.pool]
        if stage.filter_pool:
            pool = pool[: stage.filter_pool]
        tasks = state.rollout_tasks(
            pool,
            -1 - index,
            "filter",
            stage.filter_samples,
            self.cfg.rollout.temperature,
            stage.max_response_tokens,
            stage.max_turns,
        )
        results = await self._roll_out(ctx, tasks, -1 - index)
        keep = []
        for problem, group in zip(pool, group_results(results), strict=True):
            if not all(r.reward > 0 for r in group):
                keep.append(problem.id)
        log.info(
            "stage %s: kept %d of %d probed problems (dropped those solved %d/%d)",
            stage.name,
            len(keep),
            len(pool),
            stage.filter_samples,
            stage.filter_samples,
        )
        if keep:
            state.stream.restrict(keep)
        state.progress.extra[f"filter_{stage.name}"] = {"probed": len(pool), "kept": len(keep)}

    async def _evaluate(self, ctx: ActorContext, state: RunState) -> tuple[float, float]:
        start = time.perf_counter()
        step = state.progress.step
        tasks = state.rollout_tasks(state.heldout, step, "eval", 1, self.cfg.eval_temperature)
        results = await self._roll_out(ctx, tasks, step)
        return accuracy(results), time.perf_counter() - start

    async def _roll_out(
        self, ctx: ActorContext, tasks: list[RolloutTask], step: int
    ) -> list[TrajectoryResult]:
        kind = tasks[0].kind if tasks else "train"
        await ctx.send("tasks", RolloutBatch(step=step, tasks=tasks))
        wanted = {t.traj_id for t in tasks}
        results: list[TrajectoryResult] = []
        while wanted:
            incoming = await ctx.recv()
            msg = incoming.msg
            assert isinstance(msg, TrajectoryResult)
            if msg.traj_id not in wanted or msg.kind != kind:
                log.warning("ignoring a stray trajectory %s", msg.traj_id)
                continue
            wanted.discard(msg.traj_id)
            results.append(msg)
            if self.profile:
                self._sample_kv(msg)
        return results

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

    async def _push_weights(self, ctx: ActorContext, state: RunState) -> dict[str, float]:
        """Push the policy to every engine; returns the byte counts of the push."""
        version = state.progress.step
        if self.group is not None:
            with handling(ctx, "weights"):
                stats = await self.group.push(state.model.state_dict(), version)
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
            }
        with handling(ctx, "weights"):
            names, shapes, flat = await anyio.to_thread.run_sync(flatten_weights, state.model)
        update = WeightUpdate(version=version, names=names, shapes=shapes, flat=flat.numpy())
        peers = ctx.peers("weights")
        async with anyio.create_task_group() as tg:
            for peer in range(peers):
                tg.start_soon(self._push_one, ctx, update, peer)
        return {
            "weights_broadcast_bytes": 0.0,
            "weights_bus_bytes": float(frames_size(to_frames(update)) * peers),
        }

    async def _push_one(self, ctx: ActorContext, update: WeightUpdate, peer: int) -> None:
        ack = await ctx.request("weights", update, peer=peer, timeout=300.0)
        if not (isinstance(ack, WeightAck) and ack.version == update.version):
            raise RuntimeError(f"engine {peer} acknowledged {ack!r}, not version {update.version}")

    async def _finish(
        self, ctx: ActorContext, state: RunState, metrics: MetricsLog
    ) -> dict[str, Any]:
        last = state.progress.last_accuracy
        evaluated_now = self.cfg.eval_every and state.progress.step % self.cfg.eval_every == 0
        if self.cfg.heldout_problems and not evaluated_now:
            last, _ = await self._evaluate(ctx, state)
            metrics.write({"step": state.progress.step, "stage": "final", "heldout_accuracy": last})
        state.progress.last_accuracy = last
        await anyio.to_thread.run_sync(state.save)
        return {
            "steps": state.progress.step,
            "sft_accuracy": state.progress.sft_accuracy,
            "final_accuracy": last,
            "extra": state.progress.extra,
        }
