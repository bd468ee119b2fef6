"""Tracer: spans still open count in snapshots, once, and an idle actor reads as waiting."""

from __future__ import annotations

import anyio
import pytest
from actor_graphs import DEMO

from rstar2.actors import graph_config, open_graph, run_graph
from rstar2.actors.trace import Tracer


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_open_wait_counts_up_to_now_and_once_when_closed() -> None:
    clock = FakeClock()
    tracer = Tracer("sink.0", "main", clock=clock)
    token = tracer.begin("wait")
    clock.t = 103.0
    assert tracer.snapshot().wait_s == 3.0
    assert tracer.stats.wait_s == 0.0  # the counter itself only moves when the span ends
    [span] = tracer.spans()
    assert (span.kind, span.start, span.end) == ("wait", 100.0, 103.0)
    clock.t = 104.0
    tracer.end(token, depth=5)
    assert tracer.snapshot().wait_s == tracer.stats.wait_s == 4.0
    [span] = tracer.spans()
    assert (span.start, span.end, span.queue_depth) == (100.0, 104.0, 5)


def test_open_spans_of_each_kind_go_to_their_own_counter() -> None:
    clock = FakeClock()
    tracer = Tracer("a.0", "main", clock=clock)
    tracer.begin("blocked", "out")
    tracer.begin("handle", "in")
    clock.t = 102.0
    snap = tracer.snapshot()
    assert (snap.blocked_s, snap.busy_s, snap.wait_s) == (2.0, 2.0, 0.0)
    assert sorted(s.kind for s in tracer.spans()) == ["blocked", "handle"]


def test_open_spans_are_not_listed_when_tracing_is_off() -> None:
    clock = FakeClock()
    tracer = Tracer("a.0", "main", enabled=False, clock=clock)
    tracer.begin("wait")
    clock.t = 101.0
    assert tracer.spans() == [] and tracer.snapshot().wait_s == 1.0


def test_unknown_span_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown span kind"):
        Tracer("a.0", "main").begin("sleep")


@pytest.mark.anyio
async def test_an_actor_waiting_for_input_reads_as_waiting_before_any_message() -> None:
    cfg = graph_config(
        {"name": "test-idle", "actors": [{"name": "sink", "cls": f"{DEMO}:Sink", "params": {}}]}
    )
    async with open_graph(cfg) as graph:
        await anyio.sleep(0.05)
        [reply] = await graph.collect(spans=True)
        graph.stop()
    [stats] = reply.actors
    assert stats.handled == 0 and stats.wait_s > 0
    assert [s.kind for s in reply.spans] == ["wait"]


def test_reply_spans_go_to_their_own_counter() -> None:
    clock = FakeClock()
    tracer = Tracer("client.0", "main", clock=clock)
    token = tracer.begin("reply", "req")
    clock.t = 101.5
    assert tracer.snapshot().reply_s == 1.5
    tracer.end(token)
    assert tracer.stats.reply_s == 1.5 and tracer.stats.wait_s == 0.0


@pytest.mark.anyio
async def test_a_client_records_one_reply_span_per_request_it_waits_on() -> None:
    cfg = graph_config(
        {
            "name": "test-reply",
            "edges": ["pinger.req -> echo.req"],
            "actors": [
                {"name": "echo", "cls": f"{DEMO}:Echo"},
                {"name": "pinger", "cls": f"{DEMO}:Pinger", "params": {"n": 5}},
            ],
        }
    )
    result = await run_graph(cfg, spans=True)
    replies = [s for s in result.spans if s.kind == "reply"]
    assert len(replies) == 5 and {s.actor for s in replies} == {"pinger.0"}
    assert all(s.port == "req" and s.end >= s.start for s in replies)
    total = sum(s.end - s.start for s in replies)
    assert total == pytest.approx(sum(result.result["rtt_s"]), rel=0.5, abs=0.01)
    [pinger] = [a for a in result.stats if a.actor == "pinger.0"]
    assert pinger.reply_s == pytest.approx(total)


class _Counter:
    """A sink-like actor: handles everything, sends nothing."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def handle(self, port: str, msg: object) -> list:
        self.seen.append((port, msg.seq))  # type: ignore[attr-defined]
        return []


@pytest.mark.anyio
async def test_messages_handled_back_to_back_make_one_span_per_port_run() -> None:
    import zmq

    from rstar2.actors import port
    from rstar2.actors.actor import Incoming
    from rstar2.actors.context import ActorContext, ContextSockets
    from rstar2.actors.sockets import SocketFactory
    from rstar2.wire import Item

    factory = SocketFactory(zmq.Context())
    try:
        inputs = {p: factory.bind(zmq.PULL, f"inproc://runs-{p}") for p in ("a", "b")}
        socks = ContextSockets(inputs=inputs)
        order = ["a", "a", "a", "b", "a"]
        socks.received.extend(Incoming(p, Item(i, i)) for i, p in enumerate(order))
        ports = {"a": port(Item), "b": port(Item)}
        tracer = Tracer("c.0", "main")
        ctx = ActorContext("c.0", ports, {}, socks, tracer, max_message_bytes=1 << 20)
        actor = _Counter()
        with anyio.move_on_after(0.2):  # then it waits for input that never comes
            await ctx.serve_handle(actor)  # type: ignore[arg-type]
    finally:
        factory.close()
    assert actor.seen == [(p, i) for i, p in enumerate(order)]
    handles = [s for s in tracer.spans() if s.kind == "handle"]
    assert [(s.port, s.queue_depth) for s in handles] == [("a", 4), ("b", 1), ("a", 0)]
    assert all(x.end <= y.start for x, y in zip(handles, handles[1:], strict=False))
    assert tracer.stats.handled == 5
    assert tracer.stats.busy_s == pytest.approx(sum(s.end - s.start for s in handles))
