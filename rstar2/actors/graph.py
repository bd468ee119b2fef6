"""Build and run an actor graph from its config: one process, or several local processes.

`open_graph(cfg)` is the one API (and `rstar2 launch` the one command) for every placement:
- all actors in process "main": everything runs in this process, wired by inproc://;
- other process names: each is a child started with the "spawn" method, wired by ipc://
  (sockets in a private temp dir) and tcp:// for actors placed on other hosts; each child says
  `Hello` on the control socket within `handshake_timeout_s`, and all actors start together
  once every child has (the parent answers `Ready`).

The graph ends when an actor calls `stop_graph()`, when every actor's `serve()` has returned,
when an actor fails past its restart budget (or a child process dies), or on `stop()` /
SIGINT / SIGTERM. A first signal is first handed to the actors of this process that drain
(`Actor.drains`, `request_stop`: the trainer's learner checkpoints), which stop the graph
themselves; it is stopped anyway after `drain_timeout_s` or on a second signal. Then children get `Shutdown`, `shutdown_timeout_s` to exit, SIGTERM, then
SIGKILL; sockets close with linger 0 and the temp dir (ipc socket files) is removed. In-flight
messages are dropped (abort, not drain): actors that must flush do so before `stop_graph()`.

One node of a multi-host graph: `open_graph(cfg, host=H)` runs only the instances placed on
host H (`GraphPlan.on_host`) and joins the other nodes over the control link of `nodes.py`:
actors start once every node is up, events go to node 0, and node 0 stops every node.

The ipc dir is `<tmp>/rstar2-graph-<name>-<pid>-<random>` with an `owner.json` (see
`graph_dirs.py`); a graph sweeps the folders of killed runs (owner pid gone) when it starts.
A stats ROUTER at `<ipc dir>/stats.sock` answers `StatsRequest` with one `StatsReply` per
process; `stats_endpoints()` lists running graphs for `rstar2 top`.

The handle it yields, `RunningGraph`, with the graph's events and stats, is in
`running_graph.py`; this module starts, watches and stops the processes around it.

What it does not do: start processes on other hosts (run `rstar2 launch --node-rank K` there).
"""

from __future__ import annotations

import logging
import multiprocessing
import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import msgspec
import sniffio
import zmq

from rstar2.actors.backend import backend_options
from rstar2.actors.child import child_main, start_child
from rstar2.actors.graph_config import MAIN_PROCESS, GraphConfig
from rstar2.actors.graph_dirs import TMP_PREFIX as TMP_PREFIX  # re-exported
from rstar2.actors.graph_dirs import make_graph_dir, running_graphs, sweep_stale_dirs
from rstar2.actors.nodes import NodeLink, NodeLinkError, node_role
from rstar2.actors.plan import build_plan
from rstar2.actors.running_graph import (
    GraphResult,
    GraphStartError,
    RunningGraph,
    decode_control,
    send_control,
)
from rstar2.actors.sockets import AsyncSocket, SocketFactory
from rstar2.frames import from_frames, to_frames
from rstar2.wire import (
    ActorFailed,
    Hello,
    Ready,
    Shutdown,
    StatsRequest,
    WireError,
)

log = logging.getLogger(__name__)

_MONITOR_S = 0.2


# --- starting and stopping -----------------------------------------------------------------


def _spawn(graph: RunningGraph, control_ep: str, backend: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    plan_bytes = msgspec.msgpack.encode(graph.plan)
    keys = graph.cfg.curve.keys()
    curve = (
        (keys.server_public, keys.server_secret, keys.client_public, keys.client_secret)
        if keys
        else None
    )
    level = logging.getLogger("rstar2").getEffectiveLevel()
    for name in graph.plan.processes():
        if name == MAIN_PROCESS:
            continue
        proc = ctx.Process(
            target=child_main,
            args=(plan_bytes, name, control_ep, backend, curve, level),
            name=f"rstar2-{graph.plan.name}-{name}",
        )
        start_child(proc)
        graph.procs[name] = proc
        actors = ", ".join(i.name for i in graph.plan.in_process(name))
        log.info("process %s (pid %s): %s", name, proc.pid, actors)


async def _handshake(graph: RunningGraph, timeout_s: float) -> None:
    """Wait for every child's Hello (failing fast if one dies); `_release` sends Ready."""
    assert graph.control is not None
    waiting = set(graph.procs)
    with anyio.move_on_after(timeout_s):
        while waiting and not graph.stopping:
            dead = {n: p.exitcode for n, p in graph.procs.items() if p.exitcode is not None}
            if dead:
                raise GraphStartError(f"graph process(es) exited during start: {dead}")
            with anyio.move_on_after(_MONITOR_S):
                for frames in await graph.control.recv_batch(64):
                    process, msg = decode_control(frames)
                    if isinstance(msg, Hello):
                        waiting.discard(process)
                        log.debug("HELLO from %s: %s", process, ", ".join(msg.actors))
                    else:
                        graph.on_control(process, msg)
    if graph.stopping:
        return
    if waiting:
        raise GraphStartError(
            f"no HELLO from process(es) {sorted(waiting)} within {timeout_s} s "
            "(graph.handshake_timeout_s)"
        )


async def _serve_control(graph: RunningGraph) -> None:
    assert graph.control is not None
    while True:
        for frames in await graph.control.recv_batch(64):
            graph.on_control(*decode_control(frames))


async def _monitor_children(graph: RunningGraph) -> None:
    while not graph.stopping:
        for name, proc in graph.procs.items():
            if proc.exitcode is not None:
                text = f"process {name} (pid {proc.pid}) exited with code {proc.exitcode}"
                log.error("%s", text)
                graph.on_failure(ActorFailed(f"process:{name}", text))
        await anyio.sleep(_MONITOR_S)


async def _serve_stats(graph: RunningGraph, sock: AsyncSocket) -> None:
    """Answer StatsRequest on the stats endpoint (for `rstar2 top` / `rstar2 profile`)."""
    while True:
        frames = await sock.recv()
        if len(frames) < 2:
            continue
        try:
            request = from_frames(frames[1:])
        except WireError as e:
            log.warning("malformed stats request: %s", e)
            continue
        if not isinstance(request, StatsRequest):
            continue
        for reply in await graph.collect(request.spans):
            sock.send_nowait([frames[0], *to_frames(reply)])


async def _start_children(graph: RunningGraph, tg: anyio.abc.TaskGroup, ipc_dir: str) -> None:
    """Spawn the child processes (if any), wait for their Hello, serve their control socket."""
    processes = graph.plan.processes()
    if len(processes) == (1 if MAIN_PROCESS in processes else 0):
        return
    endpoint = f"ipc://{ipc_dir}/control.sock"
    graph.control = graph.supervisor.factory.bind(zmq.ROUTER, endpoint)
    _spawn(graph, endpoint, sniffio.current_async_library())
    await _handshake(graph, graph.cfg.handshake_timeout_s)
    tg.start_soon(_serve_control, graph)
    tg.start_soon(_monitor_children, graph)


async def _start(graph: RunningGraph, tg: anyio.abc.TaskGroup, ipc_dir: str) -> None:
    """Local processes up, then (one node of several) every node up, then Ready to children:
    no actor starts anywhere before every process of the graph is wired."""
    await _start_children(graph, tg, ipc_dir)
    link = graph.link
    if link is not None and not graph.stopping:
        hello = Hello(link.role.host, [i.name for i in graph.plan.instances])
        try:
            await link.join(
                hello, graph.cfg.handshake_timeout_s, graph.on_node_message, lambda: graph.stopping
            )
        except NodeLinkError as e:
            raise GraphStartError(str(e)) from e
        tg.start_soon(link.serve, graph.on_node_message, graph.on_link_lost)
    if graph.control is not None and not graph.stopping:
        for name in graph.procs:
            send_control(graph.control, name, Ready(name))


async def _watch_signals(
    graph: RunningGraph, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    drain_s = graph.cfg.drain_timeout_s
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        draining = False
        async with anyio.create_task_group() as tg:
            async for signum in signals:
                name = signal.Signals(signum).name
                if not draining and graph.supervisor.request_stop(name):
                    draining = True
                    log.warning(
                        "signal %s: finishing cleanly (up to %.0fs; again to stop at once)",
                        name,
                        drain_s,
                    )
                    tg.start_soon(_stop_after, graph, drain_s, name)
                    continue
                log.warning("signal %s: stopping the graph", name)
                graph.stop("signal", name)


async def _stop_after(graph: RunningGraph, delay: float, name: str) -> None:
    await anyio.sleep(delay)
    if not graph.stopping:
        log.warning("the graph did not stop within %.0fs of %s: stopping it", delay, name)
        graph.stop("signal", name)


async def _shutdown_children(graph: RunningGraph, timeout_s: float) -> None:
    if graph.control is not None:
        for name, proc in graph.procs.items():
            if proc.exitcode is None:
                send_control(graph.control, name, Shutdown(graph.result.reason))
    for step in ("join", "terminate", "kill"):
        alive = [p for p in graph.procs.values() if p.exitcode is None]
        if not alive:
            return
        if step != "join":
            log.warning("%s %d graph process(es)", step, len(alive))
        for proc in alive:
            if step == "terminate":
                proc.terminate()
            elif step == "kill":
                proc.kill()
        with anyio.move_on_after(timeout_s):
            while any(p.exitcode is None for p in alive):
                await anyio.sleep(0.02)


def _reap(graph: RunningGraph, ipc_dir: str) -> None:
    """Last resort, synchronous: nothing outlives the graph, whatever happened before."""
    for proc in graph.procs.values():
        if proc.exitcode is None:
            proc.kill()
        proc.join(timeout=5)
    shutil.rmtree(ipc_dir, ignore_errors=True)


def _new_graph(
    cfg: GraphConfig, ipc_dir: str, factory: SocketFactory, host: str | None
) -> RunningGraph:
    """The whole graph, or with `host` that node's share and its link to the other nodes."""
    plan = build_plan(cfg, ipc_dir)
    if host is None:
        return RunningGraph(cfg, plan, factory)
    local, role = plan.on_host(host), node_role(cfg, host)
    link = (  # last: it opens sockets
        NodeLink(role, factory, cfg.node_heartbeat_s, cfg.node_timeout_s)
        if role is not None
        else None
    )
    return RunningGraph(cfg, local, factory, total_instances=len(plan.instances), link=link)


@asynccontextmanager
async def open_graph(
    cfg: GraphConfig, *, handle_signals: bool = False, host: str | None = None, run_dir: str = ""
) -> AsyncIterator[RunningGraph]:
    """Start the graph (with `host`, only that node's share); on exit stop it and clean up
    (see the module docstring). `run_dir`: the run directory it works for (`rstar2 top`
    shows it)."""
    sweep_stale_dirs()
    ipc_dir = make_graph_dir(cfg.name, run_dir)
    context = zmq.Context()
    factory = SocketFactory(context, hwm=cfg.hwm, curve=cfg.curve.keys())
    graph: RunningGraph | None = None
    try:
        graph = _new_graph(cfg, ipc_dir, factory, host)
        graph.supervisor.prepare()
        stats_sock = factory.bind(zmq.ROUTER, f"ipc://{ipc_dir}/stats.sock")
        start_error: GraphStartError | None = None
        async with anyio.create_task_group() as tg:
            if handle_signals:  # first, so that a signal during the handshake stops cleanly
                await tg.start(_watch_signals, graph)
            try:
                await _start(graph, tg, ipc_dir)
            except GraphStartError as e:
                start_error = e
                graph.stop("failed", "start")
            if start_error is None:
                if not graph.stopping:
                    tg.start_soon(graph.supervisor.run)
                tg.start_soon(_serve_stats, graph, stats_sock)
                try:
                    yield graph
                finally:
                    with anyio.CancelScope(shield=True):
                        graph.stop()
                        graph.result.stats = [s for r in await graph.collect() for s in r.actors]
            tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            graph.notify_nodes()
            await _shutdown_children(graph, cfg.shutdown_timeout_s)
        if start_error is not None:
            raise start_error
    finally:
        if graph is not None and graph.link is not None:
            graph.link.close(cfg.shutdown_timeout_s)
        factory.close()
        context.term()
        if graph is not None:
            _reap(graph, ipc_dir)
        else:
            shutil.rmtree(ipc_dir, ignore_errors=True)


async def run_graph(
    cfg: GraphConfig,
    *,
    handle_signals: bool = False,
    spans: bool = False,
    host: str | None = None,
    run_dir: str = "",
) -> GraphResult:
    """Run the graph (with `host`, one node's share) until it stops; the result carries final
    stats (and spans if asked) of this node's processes."""
    async with open_graph(cfg, handle_signals=handle_signals, host=host, run_dir=run_dir) as graph:
        await graph.wait()
        if spans:
            graph.result.spans = [s for r in await graph.collect(spans=True) for s in r.spans]
    return graph.result


def run_graph_blocking(
    cfg: GraphConfig,
    *,
    backend: str = "asyncio",
    handle_signals: bool = True,
    spans: bool = False,
    host: str | None = None,
    run_dir: str = "",
) -> GraphResult:
    """`run_graph` from synchronous code: asyncio (with uvloop when installed) or trio."""
    if backend not in ("asyncio", "trio"):
        raise ValueError(f"backend must be 'asyncio' or 'trio', got {backend!r}")
    return anyio.run(
        lambda: run_graph(
            cfg, handle_signals=handle_signals, spans=spans, host=host, run_dir=run_dir
        ),
        backend=backend,
        backend_options=backend_options(backend),
    )


def stats_endpoints() -> list[str]:
    """Stats endpoints of the graphs running on this machine (their stats socket answers)."""
    return [d.stats_endpoint for d in running_graphs()]
