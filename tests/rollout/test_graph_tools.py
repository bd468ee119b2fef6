"""`GraphTools` over a fake actor context: what a failing transport turns into."""

from __future__ import annotations

import pytest

from rstar2.rollout.graph_tools import GraphTools
from rstar2.wire import ExecRequest, ExecResult, Message, SandboxPong

pytestmark = pytest.mark.anyio

REQ = ExecRequest(id="p/0/t0", code="print(1)")


class FakeContext:
    """`peers` and `request` of an ActorContext; `request` answers with `reply` or raises it."""

    def __init__(self, reply: Message | Exception) -> None:
        self.reply = reply

    def peers(self, port: str) -> int:
        return 2

    async def request(
        self, port: str, msg: Message, *, peer: int | None = None, timeout: float | None = None
    ) -> Message:
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


async def run(reply: Message | Exception) -> ExecResult:
    return await GraphTools(FakeContext(reply)).run(REQ)  # type: ignore[arg-type]


async def test_a_result_passes_through_unflagged():
    result = await run(ExecResult(id=REQ.id, status="error", stderr="ZeroDivisionError"))
    assert (result.status, result.infra) == ("error", "")


async def test_no_reply_in_time_is_an_infrastructure_timeout():
    result = await run(TimeoutError())
    assert (result.status, result.infra) == ("timeout", "transport_timeout")


async def test_a_reply_of_the_wrong_kind_is_an_infrastructure_failure():
    result = await run(SandboxPong(seq=1))
    assert (result.status, result.infra) == ("killed", "bad_reply")
