"""The sandbox as a graph actor: a client actor's request is answered over the runtime."""

from __future__ import annotations

from typing import ClassVar

import pytest

from rstar2.actors import Actor, ActorContext, Port, graph_config, port, run_graph_blocking
from rstar2.wire import ExecRequest, ExecResult


class Client(Actor):
    """Sends two requests (one hostile) and stops the graph with their statuses and stdout."""

    outputs: ClassVar[dict[str, Port]] = {"exec": port(ExecRequest, reply=ExecResult)}

    async def serve(self, ctx: ActorContext) -> None:
        bad = await ctx.request("exec", ExecRequest(id="bad", code="1/0"), timeout=30.0)
        good = await ctx.request("exec", ExecRequest(id="good", code="6 * 7"), timeout=30.0)
        assert isinstance(bad, ExecResult) and isinstance(good, ExecResult)
        self.stop_graph("done", [bad.status, good.status, good.stdout])


@pytest.mark.timeout(60)
def test_sandbox_actor_answers_requests_in_a_graph() -> None:
    cfg = graph_config(
        {
            "name": "sandbox-actor",
            "edges": ["client.exec -> sandbox.exec"],
            "actors": [
                {"name": "client", "cls": "tests.sandbox.test_actor:Client"},
                {
                    "name": "sandbox",
                    "cls": "rstar2.sandbox.actor:SandboxActor",
                    "params": {"preload": [], "warmup": False},
                },
            ],
        }
    )
    result = run_graph_blocking(cfg, handle_signals=False)
    assert result.result == ["error", "ok", "42\n"], result
