"""The sandbox as an actor: a request/reply service on port ``exec`` over one local executor.

Each `ExecRequest` is run by the executor (`executor.py`: warm zygote, isolation layers,
bounded queue) in its own task (`rstar2.actors.service.Service`), and answered the moment it
finishes, so a slow call never holds back the others; a full queue answers `rejected` at once.
Every request gets exactly one reply.

Each run is recorded for the profiler (`rstar2.actors.handling.BusyTrack`, port "exec"): the
instance counts as busy while any request is in the executor.

What it does not do: spread work over several services (the caller picks a peer; see
`rstar2.rollout.graph_tools.GraphTools`).
"""

from __future__ import annotations

from typing import ClassVar

from rstar2.actors import Actor, ActorContext, Port, port
from rstar2.actors.handling import BusyTrack
from rstar2.actors.service import Route, Service
from rstar2.sandbox.config import SandboxConfig
from rstar2.sandbox.executor import open_executor
from rstar2.wire import ExecRequest, ExecResult


class SandboxActor(Actor):
    inputs: ClassVar[dict[str, Port]] = {"exec": port(ExecRequest, reply=ExecResult)}
    Params = SandboxConfig

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg = cfg

    async def serve(self, ctx: ActorContext) -> None:
        busy = BusyTrack(ctx, "exec", slots=self.cfg.concurrency)
        async with open_executor(self.cfg) as ex:
            await Service(ctx, {"exec": Route(ex.run)}, busy=busy).serve()
