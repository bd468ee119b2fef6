"""The learner as rank 0 of one weight group over every rollout engine's workers.

With `cluster.weight_sync = "broadcast"` and vLLM engines, each policy update leaves the learner
once, by broadcast, instead of once per rollout worker over the actor bus:

- layout (`GroupLayout`, pure): the learner is rank 0; rollout worker i's engine has W workers
  (`cluster.tp` on GPUs, 1 on CPU) at ranks 1 + i*W .. i*W + W, so world size = 1 + engines*W.
  Ranks depend only on the worker index, never on who arrives first;
- rendezvous (`LearnerWeightGroup.open` / `join`): the learner listens on a free port of its
  host (`WeightSender.listen`), sends each worker a `WeightGroupJoin` (host, port, world size,
  the worker's first rank) over the bus, and joins in a thread while the engines' workers join;
  each worker answers `WeightGroupJoined` once its engine is in. If anyone is missing when the
  group's timeout expires, the error names the rollout workers whose ranks never arrived;
- each update (`push` of a state dict, or `push_stream` of a manifest and an iterator the
  broadcast consumes as it goes, which a sharded learner fills bucket by bucket): every worker
  gets a `WeightBroadcast` (the manifest: names, dtypes, shapes; no tensors) and starts its
  engine's receive; the learner broadcasts the byte buckets once, from a thread (its event loop
  keeps serving), then waits for every worker's `WeightAck`.
  An update that fails leaves the group out of step: it is marked broken and later pushes raise.

The bus side is a `Request` callable (the learner actor passes `ctx.request` on its "weights"
port, and on its "report" port for the readiness check), so tests drive the same code with
their own peers.

What it does not do: decide when to push (the learner actor), load weights (the engines, through
`rstar2.weights.group_member`), or NCCL (gloo only: host memory over TCP).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import anyio
import torch

from rstar2.weights.buckets import WeightManifest, manifest_of
from rstar2.weights.gloo_group import DEFAULT_BUCKET_BYTES, WeightSender
from rstar2.wire import (
    EngineReportRequest,
    Message,
    WeightAck,
    WeightBroadcast,
    WeightGroupJoin,
    WeightGroupJoined,
    encode,
)

log = logging.getLogger(__name__)

Request = Callable[[int, Message, float | None], Awaitable[Message]]
"""(rollout worker index, message, timeout in seconds or None) -> its reply."""


ENGINE_START_TIMEOUT_S = 1800.0
"""How long the learner waits for every rollout worker to serve (its engine loading the model)
before the group opens."""


class WeightGroupError(RuntimeError):
    """The learner's weight group could not form or an update through it failed."""


@dataclass(frozen=True)
class GroupLayout:
    """Ranks of the learner's weight group (see the module docstring)."""

    engines: int
    """Rollout workers, one engine each."""
    workers_per_engine: int
    """Inference workers of each engine (tensor x pipeline parallel)."""

    def __post_init__(self) -> None:
        if self.engines < 1 or self.workers_per_engine < 1:
            raise ValueError(
                f"a weight group needs >= 1 engine of >= 1 worker, got {self.engines} engines "
                f"of {self.workers_per_engine}"
            )

    @property
    def world_size(self) -> int:
        return 1 + self.engines * self.workers_per_engine

    def first_rank(self, engine: int) -> int:
        """Group rank of engine `engine`'s first worker."""
        if not 0 <= engine < self.engines:
            raise ValueError(f"engine {engine} is outside 0 .. {self.engines - 1}")
        return 1 + engine * self.workers_per_engine

    def engine_of(self, rank: int) -> int:
        """The rollout worker whose engine holds group rank `rank` (>= 1)."""
        if not 1 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is no engine worker of a group of {self.world_size}")
        return (rank - 1) // self.workers_per_engine


def layout_for(
    engine_backend: str, weight_sync: str, engines: int, gpus: int, tp: int
) -> GroupLayout | None:
    """The train graph's group (the `cluster` settings and `graph.engines`), or None when the
    learner pushes over the bus: the embedded engine, or weight_sync "file"."""
    if engine_backend != "vllm" or weight_sync != "broadcast":
        return None
    return GroupLayout(engines, tp if gpus > 0 else 1)


def join_messages(
    layout: GroupLayout, host: str, port: int, bucket_bytes: int, timeout_s: float
) -> list[WeightGroupJoin]:
    """One `WeightGroupJoin` per rollout worker, in worker order."""
    return [
        WeightGroupJoin(
            host=host,
            port=port,
            world_size=layout.world_size,
            first_rank=layout.first_rank(i),
            workers=layout.workers_per_engine,
            bucket_bytes=bucket_bytes,
            timeout_s=timeout_s,
        )
        for i in range(layout.engines)
    ]


def broadcast_message(version: int, m: WeightManifest) -> WeightBroadcast:
    """The control message of one update: its manifest, no tensors."""
    return WeightBroadcast(
        version=version,
        names=list(m.names),
        dtype_names=list(m.dtype_names),
        shapes=[list(s) for s in m.shapes],
    )


def check_joined(reply: Message, engine: int, layout: GroupLayout) -> None:
    """A worker's answer to its `WeightGroupJoin`; raises WeightGroupError if it is not."""
    want = (engine, layout.first_rank(engine), layout.workers_per_engine)
    if not (
        isinstance(reply, WeightGroupJoined)
        and (reply.engine, reply.first_rank, reply.workers) == want
    ):
        raise WeightGroupError(
            f"rollout worker {engine} answered the weight group's join with {reply!r}, expected "
            f"engine {want[0]} at first rank {want[1]} with {want[2]} worker(s)"
        )


def check_ack(reply: Message, engine: int, version: int) -> None:
    """A worker's answer to a `WeightBroadcast`; raises WeightGroupError if it is not."""
    if not (isinstance(reply, WeightAck) and (reply.engine, reply.version) == (engine, version)):
        raise WeightGroupError(
            f"rollout worker {engine} acknowledged {reply!r}, not version {version}"
        )


def join_failure(
    layout: GroupLayout, missing: list[int], errors: Mapping[str, BaseException], timeout_s: float
) -> str:
    """What went wrong while the group formed: who never arrived, then each side's error."""
    parts = []
    if missing:
        owners = sorted({layout.engine_of(r) for r in missing})
        who = ", ".join(f"rollout worker {e}" for e in owners)
        parts.append(
            f"{who} never joined the learner's weight group within {timeout_s:g}s "
            f"(missing ranks {missing} of {layout.world_size})"
        )
    parts.extend(f"{side}: {_first_line(error)}" for side, error in errors.items())
    return "weight group failed: " + ("; ".join(parts) or "unknown error")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass
class BroadcastStats:
    """Bytes of one update: broadcast once through the group vs sent over the bus."""

    broadcast_bytes: int
    bus_bytes: int
    seconds: float


class LearnerWeightGroup:
    """Rank 0 of the group (build it with `open`, then `join`)."""

    def __init__(
        self,
        sender: WeightSender,
        layout: GroupLayout,
        host: str,
        request: Request,
        ready: Request | None = None,
    ) -> None:
        self._sender = sender
        self.layout = layout
        self.host = host
        self._request = request
        self._ready = ready or request
        self._timeout_s = sender.timeout.total_seconds()
        self._joined = False
        self._broken: BaseException | None = None

    @classmethod
    def open(
        cls,
        host: str,
        layout: GroupLayout,
        request: Request,
        timeout_s: float = 300.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        ready: Request | None = None,
    ) -> LearnerWeightGroup:
        """Listen on a free port of `host` (an address every engine's workers can reach).
        `request` carries the group's messages, `ready` the `EngineReportRequest` that `join`
        sends first (the rollout workers' "report" port; None: `request`)."""
        sender = WeightSender.listen(host, layout.world_size, timeout_s, bucket_bytes)
        return cls(sender, layout, host, request, ready)

    @property
    def port(self) -> int:
        return self._sender.port

    async def join(self) -> float:
        """Bring every engine's workers in; returns the seconds it took.

        First every worker must be serving (an `EngineReportRequest` answered: its engine is
        up, which can take minutes), so that all ranks then join within seconds of each other
        and the group's `timeout_s` only has to cover the rendezvous itself."""
        start = time.perf_counter()
        ready, errors = await self._ask_all(
            [EngineReportRequest()] * self.layout.engines, ENGINE_START_TIMEOUT_S, via=self._ready
        )
        if errors:
            raise WeightGroupError(
                "weight group: rollout workers not serving before the group opened: "
                + "; ".join(f"{side}: {_first_line(e)}" for side, e in errors.items())
            )
        messages = join_messages(
            self.layout, self.host, self.port, self._sender.bucket_bytes, self._timeout_s
        )
        replies, errors = await self._ask_all(messages, self._timeout_s + 30.0, self._sender.join)
        if errors:
            missing = self._sender.missing_ranks()
            self._broken = WeightGroupError(
                join_failure(self.layout, missing, errors, self._timeout_s)
            )
            raise self._broken
        for engine in range(self.layout.engines):
            check_joined(replies[engine], engine, self.layout)
        self._joined = True
        seconds = time.perf_counter() - start
        log.info(
            "weight group up: learner rank 0 of %d at %s:%d, %d engine(s) x %d worker(s), %.2fs",
            self.layout.world_size,
            self.host,
            self.port,
            self.layout.engines,
            self.layout.workers_per_engine,
            seconds,
        )
        return seconds

    async def _ask_all(
        self,
        messages: Sequence[Message],
        timeout_s: float | None,
        blocking: Callable[[], object] | None = None,
        via: Request | None = None,
    ) -> tuple[dict[int, Message], dict[str, BaseException]]:
        """Send `messages[i]` to worker i through `via` (None: the group's `request`) and
        collect the answers while `blocking` (this side of a collective) runs in a thread. Each
        answer may take `timeout_s` (None: no limit of its own), and at most `self._timeout_s`
        more once `blocking` is done: the other side of a collective has nothing left to wait
        for then. Errors come back by side ("rollout worker i", "learner"), never raised; a
        failed `blocking` stops the waiting."""
        request = via or self._request
        replies: dict[int, Message] = {}
        errors: dict[str, BaseException] = {}
        answered = anyio.Event()

        async def ask(engine: int) -> None:
            try:
                replies[engine] = await request(engine, messages[engine], timeout_s)
            except TimeoutError:
                errors[f"rollout worker {engine}"] = TimeoutError(
                    f"no answer to {type(messages[engine]).__name__} within {timeout_s:g}s"
                )
            except RuntimeError as e:  # the worker failed on it (RemoteError)
                errors[f"rollout worker {engine}"] = e
            if len(replies) + len(errors) >= len(messages):
                answered.set()

        async with anyio.create_task_group() as tg:
            for engine in range(len(messages)):
                tg.start_soon(ask, engine)
            try:
                if blocking is not None:
                    await anyio.to_thread.run_sync(blocking)
                    with anyio.fail_after(self._timeout_s):
                        await answered.wait()
            except TimeoutError:
                for engine in set(range(len(messages))) - set(replies):
                    errors.setdefault(
                        f"rollout worker {engine}",
                        TimeoutError(f"no answer within {self._timeout_s:g}s of the collective"),
                    )
                tg.cancel_scope.cancel()
            except RuntimeError as e:  # a collective failed or timed out
                errors["learner"] = e
                tg.cancel_scope.cancel()
        return replies, errors

    async def push(self, state_dict: Mapping[str, torch.Tensor], version: int) -> BroadcastStats:
        """Send the manifest to every worker, broadcast the tensors once, wait for every ack.
        The state dict is checked whole before anything moves."""
        manifest = manifest_of(state_dict)  # bad input is refused before anything moves
        return await self.push_stream(manifest, list(state_dict.values()), version)

    async def push_stream(
        self,
        manifest: WeightManifest,
        tensors: Sequence[torch.Tensor] | Iterator[torch.Tensor],
        version: int,
    ) -> BroadcastStats:
        """`push` of the tensors `manifest` describes, from an iterator the broadcast consumes
        (in a thread) as its byte buckets need them: a sharded learner gathers its policy
        bucket by bucket into it, so the whole model is never in memory on rank 0. A tensor
        that does not match the manifest fails the update midway (the group is then broken)."""
        if not self._joined:
            raise WeightGroupError("join() the weight group before pushing weights")
        if self._broken is not None:
            raise WeightGroupError("the weight group broke earlier") from self._broken
        start = time.perf_counter()
        msg = broadcast_message(version, manifest)
        try:
            sent = await self._broadcast(msg, manifest, tensors)
        except BaseException as e:
            self._broken = e
            raise
        return BroadcastStats(
            broadcast_bytes=sent,
            bus_bytes=len(encode(msg)) * self.layout.engines,
            seconds=time.perf_counter() - start,
        )

    async def _broadcast(
        self,
        msg: WeightBroadcast,
        manifest: WeightManifest,
        tensors: Sequence[torch.Tensor] | Iterator[torch.Tensor],
    ) -> int:
        sent: list[int] = []

        def send() -> None:
            sent.append(self._sender.send(manifest, tensors))

        # Each worker answers once its engine has loaded what was broadcast: the wait is
        # bounded by the collectives' timeouts, then one more for the loading (`_ask_all`).
        replies, errors = await self._ask_all([msg] * self.layout.engines, None, send)
        if errors:
            raise WeightGroupError(
                f"update {msg.version} failed: "
                + "; ".join(f"{side}: {_first_line(e)}" for side, e in errors.items())
            )
        for engine in range(self.layout.engines):
            check_ack(replies[engine], engine, msg.version)
        return sent[0]

    def close(self) -> None:
        """Leave the group (the engines' workers leave when their engines close)."""
        self._sender.close()
