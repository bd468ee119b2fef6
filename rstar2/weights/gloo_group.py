"""A gloo process group for broadcasting weights, apart from torch.distributed's default group.

The group has one sender, rank 0 (the process holding the full state dict), and receivers at
ranks 1 .. world_size - 1 (the inference workers). It is built without
`torch.distributed.init_process_group`: vLLM's workers already own the default group, so this
one is a `ProcessGroupGloo` over its own `TCPStore` and is used through the group object only.

- `WeightSender.listen(host, world_size)` opens the rendezvous store on a free port (port 0:
  the OS picks it, so no other process can take it between choosing and binding) and returns at
  once; `port` is then sent to the receivers, and `join()` blocks until every rank has joined.
- `WeightReceiver.connect(host, port, rank, world_size)` joins from a receiver; it first marks
  its rank as arrived in the store, so a sender whose `join()` timed out can say which ranks
  never came (`missing_ranks()`).
- `send(manifest, tensors)` / `receive(manifest)` move one update: the manifest travels ahead
  by other means (an RPC argument), both ends cut the same byte buckets from it
  (`buckets.plan_buckets`) and each bucket is one gloo broadcast from rank 0.
  `receive` yields each bucket's (name, tensor) views as it lands, so a loader can consume
  bucket by bucket.
- `GroupPlace` says where one engine's workers join: the rendezvous, the group's size, their
  first rank, the bucket size and the timeout (what a learner sends each engine).
- Every operation times out after `timeout_s` (a peer that never arrives raises instead of
  hanging forever); after a failure the group is unusable and must be closed.

Gloo moves host memory over TCP (loopback on one host): tensors on a GPU are copied to the CPU
before sending. GPU-to-GPU broadcast uses NCCL instead (`rstar2.weights.vllm_broadcast`).
Interface selection is gloo's own: set GLOO_SOCKET_IFNAME where the host name does not resolve
to an address the peers can reach.

What it does not do: decide what to send, or load what arrives into a model.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from rstar2.weights.buckets import (
    Bucket,
    WeightManifest,
    pack_bucket,
    parse_dtype,
    plan_buckets,
    unpack_bucket,
)

log = logging.getLogger(__name__)

_PREFIX = "rstar2-weights"  # keys of this group in the store, apart from anyone else's
_ARRIVED = "arrived/"  # + rank: set by a receiver before it joins the gloo group
DEFAULT_BUCKET_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class GroupPlace:
    """Where an engine's workers join a weight group rooted at rank 0: ranks `first_rank ..`."""

    host: str
    port: int
    world_size: int
    first_rank: int
    bucket_bytes: int
    timeout_s: float

    def check(self, workers: int) -> None:
        """ValueError unless `workers` ranks from `first_rank` fit beside the root, at a valid
        rendezvous, with a positive bucket size and timeout."""
        if not 1 <= self.port <= 65535:
            raise ValueError(f"weight group port must be 1 .. 65535, got {self.port}")
        if not self.host:
            raise ValueError("weight group host is empty")
        last = self.first_rank + workers - 1
        if not (1 <= self.first_rank and last < self.world_size):
            raise ValueError(
                f"ranks {self.first_rank} .. {last} do not fit a weight group of "
                f"{self.world_size} with its root at rank 0"
            )
        if self.bucket_bytes < 1 or not self.timeout_s > 0:
            raise ValueError(
                f"bucket_bytes must be >= 1 and timeout_s > 0, got {self.bucket_bytes} and "
                f"{self.timeout_s}"
            )


def _check_world(rank: int, world_size: int) -> None:
    if world_size < 2:
        raise ValueError(
            f"a weight group needs a sender and a receiver, got world_size {world_size}"
        )
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a weight group of {world_size}")


class _Member:
    """One rank of the group: the store, then (after joining) the gloo group."""

    def __init__(
        self, store: dist.TCPStore, rank: int, world_size: int, timeout_s: float, bucket_bytes: int
    ) -> None:
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
        self._store: dist.TCPStore | None = store
        self._port = int(store.port)
        self.rank = rank
        self.world_size = world_size
        self.timeout = timedelta(seconds=timeout_s)
        self.bucket_bytes = bucket_bytes
        self._group: dist.ProcessGroupGloo | None = None
        self._closed = False

    @property
    def port(self) -> int:
        return self._port

    def join(self) -> None:
        """Build the gloo group; blocks until all `world_size` ranks have joined (or times out)."""
        if self._closed:
            raise RuntimeError("the weight group is closed")
        if self._group is None:
            assert self._store is not None
            prefixed = dist.PrefixStore(_PREFIX, self._store)
            self._group = dist.ProcessGroupGloo(prefixed, self.rank, self.world_size, self.timeout)
            log.debug("weight group: rank %d of %d joined", self.rank, self.world_size)

    def _broadcast(self, buf: torch.Tensor) -> None:
        if self._group is None:
            raise RuntimeError("join() the weight group before moving weights")
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        opts.timeout = self.timeout
        self._group.broadcast([buf], opts).wait()

    def _buckets(self, manifest: WeightManifest) -> list[Bucket]:
        return plan_buckets(manifest, self.bucket_bytes)

    def close(self) -> None:
        """Leave the group and drop the store; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._group is not None:
            self._group.shutdown()
            self._group = None
        self._store = None

    @property
    def closed(self) -> bool:
        return self._closed


class WeightSender(_Member):
    """Rank 0: broadcasts the tensors of each update."""

    @classmethod
    def listen(
        cls,
        host: str,
        world_size: int,
        timeout_s: float = 300.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> WeightSender:
        """Open the rendezvous store on a free port of `host`; returns without waiting."""
        _check_world(0, world_size)
        store = dist.TCPStore(
            host,
            0,
            world_size,
            is_master=True,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
        return cls(store, 0, world_size, timeout_s, bucket_bytes)

    def missing_ranks(self) -> list[int]:
        """Receiver ranks that have not reached the store (e.g. after `join()` timed out)."""
        if self._store is None:
            raise RuntimeError("the weight group is closed")
        prefixed = dist.PrefixStore(_PREFIX, self._store)
        return [r for r in range(1, self.world_size) if not prefixed.check([f"{_ARRIVED}{r}"])]

    def send(
        self, manifest: WeightManifest, tensors: Sequence[torch.Tensor] | Iterator[torch.Tensor]
    ) -> int:
        """Broadcast `tensors` (described by `manifest`, same order); returns the bytes sent.

        A sequence is checked against the manifest before anything moves. An iterator is
        consumed as the byte buckets need it (each tensor checked as it comes), so a caller
        can gather the tensors lazily and the update never has to be whole in memory: the
        sender holds one byte bucket and the tensors it is filling."""
        checked = isinstance(tensors, Sequence)
        if checked:
            if len(tensors) != len(manifest.names):
                raise ValueError(f"{len(tensors)} tensors for a manifest of {len(manifest.names)}")
            for i, t in enumerate(tensors):
                _check_tensor(manifest, i, t)
        source = iter(tensors)
        sent = 0
        for bucket in self._buckets(manifest):
            part: dict[int, torch.Tensor] = {}
            for i in bucket.indices:
                t = next(source, None)
                if t is None:
                    raise ValueError(f"{i} tensors for a manifest of {len(manifest.names)}")
                if not checked:
                    _check_tensor(manifest, i, t)
                part[i] = t
            buf = pack_bucket(bucket, part)
            del part
            self._broadcast(buf)
            sent += buf.numel()
        if next(source, None) is not None:
            raise ValueError(f"more tensors than the manifest's {len(manifest.names)}")
        return sent


def _check_tensor(manifest: WeightManifest, i: int, t: torch.Tensor) -> None:
    want = parse_dtype(manifest.dtype_names[i])
    if tuple(t.shape) != manifest.shapes[i] or t.dtype != want:
        raise ValueError(
            f"tensor {manifest.names[i]!r} is {t.dtype} {list(t.shape)}, the manifest "
            f"says {manifest.dtype_names[i]} {list(manifest.shapes[i])}"
        )


class WeightReceiver(_Member):
    """Ranks 1 ..: receive each update's tensors."""

    @classmethod
    def connect(
        cls,
        host: str,
        port: int,
        rank: int,
        world_size: int,
        timeout_s: float = 300.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> WeightReceiver:
        """Connect to the sender's store and join the group (blocks until every rank joined)."""
        _check_world(rank, world_size)
        if rank == 0:
            raise ValueError("rank 0 is the sender; receivers are ranks 1 ..")
        store = dist.TCPStore(
            host, port, world_size, is_master=False, timeout=timedelta(seconds=timeout_s)
        )
        dist.PrefixStore(_PREFIX, store).set(f"{_ARRIVED}{rank}", "1")
        member = cls(store, rank, world_size, timeout_s, bucket_bytes)
        member.join()
        return member

    def receive(self, manifest: WeightManifest) -> Iterator[list[tuple[str, torch.Tensor]]]:
        """Each bucket's (name, tensor) views as it arrives; consume the iterator fully."""
        for bucket in self._buckets(manifest):
            buf = torch.empty(bucket.nbytes, dtype=torch.uint8)
            self._broadcast(buf)
            yield unpack_bucket(bucket, manifest, buf)
