"""A rollout worker's tool calls over the graph: its client of the sandbox services.

`GraphTools` is the agent loop's `ToolExecutor` on the live graph: each call leaves through the
worker's ``tools`` client port to the sandbox service instance with the fewest of this worker's
calls outstanding. A call with no reply in time ("transport_timeout") or a reply of the wrong
kind ("bad_reply") comes back as a failed result flagged as an infrastructure failure
(`ExecResult.infra`), which marks its trajectory. (Each call's wall time is the agent loop's:
`Trajectory.tool_latencies`.)

What it does not do: run code (the sandbox actor) or retry a failed call.
"""

from __future__ import annotations

from rstar2.actors import ActorContext
from rstar2.wire import ExecRequest, ExecResult


class GraphTools:
    """A `ToolExecutor` over the graph's sandbox services: least outstanding calls first."""

    def __init__(self, ctx: ActorContext, port_name: str = "tools", timeout_s: float = 120.0):
        self.ctx = ctx
        self.port = port_name
        self.timeout_s = timeout_s
        self.outstanding = [0] * max(ctx.peers(port_name), 1)

    def pick(self) -> int:
        return min(range(len(self.outstanding)), key=lambda i: (self.outstanding[i], i))

    async def run(self, req: ExecRequest) -> ExecResult:
        peer = self.pick()
        self.outstanding[peer] += 1
        try:
            reply = await self.ctx.request(self.port, req, peer=peer, timeout=self.timeout_s)
        except TimeoutError:
            message = "the sandbox service did not answer in time"
            return _failed(req.id, "timeout", message, infra="transport_timeout")
        finally:
            self.outstanding[peer] -= 1
        if not isinstance(reply, ExecResult):
            message = f"unexpected reply {type(reply).__name__}"
            return _failed(req.id, "killed", message, infra="bad_reply")
        return reply


def _failed(request_id: str, status: str, message: str, *, infra: str) -> ExecResult:
    return ExecResult(
        id=request_id,
        status=status,
        stdout="",
        stderr=message,
        exit_code=-1,
        wall_s=0.0,
        truncated=False,
        infra=infra,
    )
