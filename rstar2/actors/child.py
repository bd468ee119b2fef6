"""Entry point of a spawned graph process: wire its actors, say HELLO, run until Shutdown.

The parent (`graph.py`) spawns one process per placement name with the multiprocessing
"spawn" start method (never fork: the parent may hold threads, CUDA or zmq state). The child
receives the plan as msgpack bytes, creates its sockets, connects a DEALER to the parent's
control ROUTER (identity = process name) and sends `Hello`; it starts its actors only on
`Ready`. Afterwards it forwards `ActorFailed` / `StopGraph` / `ActorFinished` events, answers
`StatsRequest`, and exits on `Shutdown`, on SIGTERM, or when its parent disappears.

SIGINT is ignored here: Ctrl-C reaches the whole process group and the parent coordinates.
The parent starts this process with SIGINT already ignored (`start_child`), so a
Ctrl-C while it still imports, before `child_main` runs, prints no traceback either.

What it does not do: decide anything about the graph (the parent does).
"""

from __future__ import annotations

import logging
import multiprocessing.process
import os
import signal
import threading
from collections.abc import Callable

import anyio
import msgspec
import zmq

from rstar2.actors.backend import backend_options
from rstar2.actors.plan import GraphPlan
from rstar2.actors.sockets import AsyncSocket, CurveKeys, SocketFactory
from rstar2.actors.supervisor import GraphEvents, Supervisor
from rstar2.frames import from_frames, to_frames
from rstar2.log_format import setup_logging
from rstar2.wire import (
    ActorFinished,
    Hello,
    Message,
    Ready,
    Shutdown,
    StatsReply,
    StatsRequest,
    WireError,
)

log = logging.getLogger(__name__)

_PARENT_POLL_S = 0.5


def child_main(
    plan_bytes: bytes,
    process: str,
    control: str,
    backend: str,
    curve: tuple[str, str, str, str] | None,
    log_level: int,
) -> None:
    """multiprocessing target: run this process's share of the graph until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # already so when started by start_child
    setup_logging(1 if log_level <= logging.DEBUG else 0, log_level >= logging.WARNING)
    plan = msgspec.msgpack.decode(plan_bytes, type=GraphPlan)
    keys = CurveKeys(*curve) if curve else None
    anyio.run(
        _serve_child,
        plan,
        process,
        control,
        keys,
        backend=backend,
        backend_options=backend_options(backend),
    )


def start_child(proc: multiprocessing.process.BaseProcess) -> None:
    """The parent's side: start `proc` (running `child_main`) with SIGINT ignored, the one
    signal setting a new interpreter inherits. A Ctrl-C while the child still imports (before
    `child_main` ignores SIGINT itself) would otherwise end it with a KeyboardInterrupt
    traceback. SIGINT is also blocked in this thread meanwhile, and Linux keeps a blocked
    signal pending even while it is ignored, so the parent still gets its Ctrl-C once its
    handler is back, unless the kernel hands it to one of this process's other threads that
    do not block it (numpy's, torch's) during those few milliseconds: then it is lost, and a
    second Ctrl-C is needed. Off the main thread (where handlers cannot be set) `proc` just
    starts."""
    handler = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or handler is None:
        proc.start()
        return
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc.start()
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


async def _serve_child(plan: GraphPlan, process: str, control: str, keys: CurveKeys | None) -> None:
    context = zmq.Context()
    factory = SocketFactory(context, hwm=plan.hwm, curve=keys)
    ctl = factory.connect(zmq.DEALER, [control], identity=process.encode())

    def send(msg: Message) -> None:
        if not ctl.send_nowait(to_frames(msg)):
            log.warning("%s: control channel full, dropped %s", process, type(msg).__name__)

    events = GraphEvents(failure=send, stop=send, finished=lambda name: send(ActorFinished(name)))
    supervisor = Supervisor(plan, process, factory, events)
    try:
        async with anyio.create_task_group() as tg:
            # Watch parent and SIGTERM from the start: a parent that dies during the
            # handshake must not leave this process waiting for Ready forever.
            tg.start_soon(_watch_parent, tg.cancel_scope)
            tg.start_soon(_watch_sigterm, tg.cancel_scope)
            supervisor.prepare()
            send(Hello(process, [i.name for i in supervisor.instances]))
            if await _wait_ready(ctl):
                tg.start_soon(supervisor.run)
                await _serve_control(ctl, supervisor, send)
            tg.cancel_scope.cancel()
    finally:
        supervisor.close()
        context.term()


async def _wait_ready(ctl: AsyncSocket) -> bool:
    while True:
        msg = _decode(await ctl.recv())
        if isinstance(msg, Ready):
            return True
        if isinstance(msg, Shutdown):
            return False


async def _serve_control(
    ctl: AsyncSocket, supervisor: Supervisor, send: Callable[[Message], None]
) -> None:
    """Answer the parent until it says Shutdown."""
    while True:
        msg = _decode(await ctl.recv())
        if isinstance(msg, Shutdown):
            log.debug("%s: shutdown (%s)", supervisor.process, msg.reason)
            return
        if isinstance(msg, StatsRequest):
            spans = supervisor.spans() if msg.spans else []
            send(StatsReply(supervisor.process, supervisor.stats(), spans))


def _decode(frames: list[bytes]) -> Message | None:
    try:
        return from_frames(frames)
    except WireError as e:
        log.warning("malformed control message: %s", e)
        return None


async def _watch_parent(scope: anyio.CancelScope) -> None:
    parent = os.getppid()
    while os.getppid() == parent:
        await anyio.sleep(_PARENT_POLL_S)
    log.warning("parent process %d is gone: stopping", parent)
    scope.cancel()


async def _watch_sigterm(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            log.info("SIGTERM: stopping")
            scope.cancel()
            return
