"""The service primitive on an in-memory context, on asyncio and trio: replies, concurrency
and its limit, inline order, busy spans, errors answered as data."""

from __future__ import annotations

import sys

import anyio
import pytest

from rstar2.actors.actor import Incoming
from rstar2.actors.context import ActorContext, ContextSockets
from rstar2.actors.service import Route, Service
from rstar2.actors.trace import Tracer
from rstar2.wire import EngineLoad, EngineReport, EngineReportRequest, Item, Message

pytestmark = pytest.mark.anyio


class Ctx(ActorContext):
    """An actor context fed from a list; replies and failures are collected."""

    def __init__(self, incoming: list[Incoming]) -> None:
        tracer = Tracer("svc.0", "main")
        super().__init__("svc.0", {}, {}, ContextSockets(), tracer, max_message_bytes=1024)
        self.pending = list(incoming)
        self.replies: list[tuple[bytes, Message]] = []
        self.failures: list[tuple[bytes, str]] = []
        self.drained = anyio.Event()

    async def recv(self) -> Incoming:
        if not self.pending:
            self.drained.set()
            await anyio.sleep_forever()
        return self.pending.pop(0)

    async def reply(self, incoming: Incoming, msg: Message) -> None:
        assert incoming.reply_to is not None
        self.replies.append((incoming.reply_to[1], msg))

    def reply_failure(self, incoming: Incoming) -> None:
        assert incoming.reply_to is not None

        self.failures.append((incoming.reply_to[1], repr(sys.exc_info()[1])))


def request(i: int, port: str = "ask") -> Incoming:
    return Incoming(port, EngineReportRequest(), (b"client", str(i).encode()))


def report(i: int) -> EngineReport:
    return EngineReport(i, EngineLoad(0, 0, 0, 0))


async def serve_until_drained(service: Service, ctx: Ctx, settle: float = 0.2) -> None:
    with anyio.move_on_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.serve)
            await ctx.drained.wait()
            await anyio.sleep(settle)
            tg.cancel_scope.cancel()


async def test_concurrent_requests_are_answered_as_they_finish_within_the_limit() -> None:
    ctx = Ctx([request(i) for i in range(6)])
    running, peak = 0, 0

    async def slow(_: EngineReportRequest) -> EngineReport:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.05)
        running -= 1
        return report(7)

    await serve_until_drained(Service(ctx, {"ask": Route(slow)}, limit=2), ctx)
    assert len(ctx.replies) == 6 and peak == 2
    spans = ctx.tracer.spans()
    assert spans and all(s.kind == "handle" for s in spans)  # busy time, non-overlapping
    assert all(a.end <= b.start + 1e-9 for a, b in zip(spans, spans[1:], strict=False))


async def test_inline_messages_run_one_at_a_time_in_order() -> None:
    ctx = Ctx([Incoming("items", Item(i, b"")) for i in range(4)])
    seen: list[int] = []

    async def item(msg: Item) -> None:
        await anyio.sleep(0.01 * (4 - msg.seq))  # later ones are quicker: order must hold
        seen.append(msg.seq)

    await serve_until_drained(Service(ctx, {"items": Route(item, concurrent=False)}), ctx)
    assert seen == [0, 1, 2, 3] and [s.port for s in ctx.tracer.spans()] == ["items"] * 4


async def test_a_surviving_error_is_answered_as_data_and_serving_goes_on() -> None:
    ctx = Ctx([request(0), request(1), request(2)])

    calls = 0

    async def picky(_: EngineReportRequest) -> EngineReport:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ValueError("bad request")
        return report(1)

    await serve_until_drained(Service(ctx, {"ask": Route(picky, survives=(ValueError,))}), ctx)
    [(failed, error)] = ctx.failures
    assert error == "ValueError('bad request')"
    assert sorted([failed] + [rid for rid, _ in ctx.replies]) == [b"0", b"1", b"2"]


async def test_another_error_is_answered_then_stops_the_service() -> None:
    ctx = Ctx([request(0)])

    async def broken(_: EngineReportRequest) -> EngineReport:
        raise KeyError("bug")

    with pytest.raises(BaseException) as info:  # noqa: PT011 - an ExceptionGroup around it
        async with anyio.create_task_group() as tg:
            tg.start_soon(Service(ctx, {"ask": Route(broken)}).serve)
    assert "KeyError" in repr(info.value)
    assert ctx.failures[0][0] == b"0"  # the requester heard of it before the service stopped


async def test_a_per_message_choice_of_concurrency_and_spawned_work() -> None:
    ctx = Ctx([request(0, "mixed"), Incoming("mixed", Item(5, b""))])
    spawned: list[int] = []

    async def mixed(msg: Message) -> EngineReport | None:
        if isinstance(msg, Item):
            service.spawn(later, msg.seq)
            return None
        return report(0)

    async def later(seq: int) -> None:
        spawned.append(seq)

    service = Service(ctx, {"mixed": Route(mixed, concurrent=lambda m: isinstance(m, Item))})
    await serve_until_drained(service, ctx)
    assert [rid for rid, _ in ctx.replies] == [b"0"] and spawned == [5]


def test_bad_setup_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        Service(Ctx([]), {}, limit=0)
