"""`HandleRuns` without sockets: the one call of `handle` (a failed request answered, a list
required) and the "handle" spans of runs of messages on one port."""

from __future__ import annotations

from collections import deque

import pytest

from rstar2.actors.actor import Incoming, Outputs
from rstar2.actors.handle_runs import Handle, HandleRuns
from rstar2.actors.trace import Tracer
from rstar2.wire import Item, Message


def make_runs(ports: str) -> tuple[HandleRuns, Tracer, list[Incoming]]:
    """Runs over a buffer of one `Item(i, i)` per letter of `ports` (the letter is the port);
    the failures answered are collected in the returned list."""
    tracer = Tracer("a.0", "main")
    buffer = deque(Incoming(p, Item(i, i)) for i, p in enumerate(ports))
    failed: list[Incoming] = []
    return HandleRuns("a.0", tracer, buffer, failed.append), tracer, failed


def forward_on(port: str) -> Handle:
    """A `handle` that forwards the messages of `port` and sends nothing for the others."""

    def handle(p: str, msg: Message) -> Outputs:
        return [("out", msg)] if p == port else []

    return handle


def handle_spans(tracer: Tracer) -> list[tuple[str, int]]:
    return [(s.port, s.queue_depth) for s in tracer.spans() if s.kind == "handle"]


def test_a_failed_request_is_answered_and_the_error_raised() -> None:
    runs, _, failed = make_runs("")
    request = Incoming("ask", Item(0, 0), (b"client", b"1"))

    def fail(port: str, msg: Message) -> Outputs:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        runs.handle_one(fail, request)
    with pytest.raises(KeyError):
        runs.handle_one(fail, Incoming("in", Item(1, 1)))  # a stream message: nobody to answer
    assert failed == [request]


def test_handle_must_return_a_list() -> None:
    runs, _, failed = make_runs("")
    request = Incoming("ask", Item(0, 0), (b"client", b"1"))

    def returns_a_tuple(port: str, msg: Message) -> Outputs:
        return (("out", msg),)  # type: ignore[return-value]

    with pytest.raises(TypeError, match=r"a\.0\.handle must return a list, got tuple"):
        runs.handle_one(returns_a_tuple, request)
    assert failed == [request]  # the requester hears of it rather than waiting
    assert runs.handle_one(lambda p, m: [], Incoming("in", Item(0, 0))) == []


def test_runs_stop_at_each_output_and_make_one_span_per_port_run() -> None:
    runs, tracer, _ = make_runs("aaba")
    runs.begin()
    step = runs.handle_until_output(forward_on("b"))
    assert step == (Incoming("b", Item(2, 2)), [("out", Item(2, 2))])
    runs.sent(yielded=False)  # the send was this actor's time: the run goes on
    assert runs.handle_until_output(forward_on("b")) is None
    runs.close()
    # depth: the deepest queue left behind a message of the run
    assert handle_spans(tracer) == [("a", 3), ("b", 1), ("a", 0)]
    assert tracer.stats.handled == 4


def test_a_send_that_yielded_ends_the_run_before_it() -> None:
    runs, tracer, _ = make_runs("aa")
    runs.begin()
    assert runs.handle_until_output(forward_on("a")) is not None
    runs.sent(yielded=True)
    assert runs.handle_until_output(forward_on("a")) is not None
    runs.sent(yielded=False)
    runs.close()
    runs.close()  # nothing left to record
    assert handle_spans(tracer) == [("a", 1), ("a", 0)]
    assert tracer.stats.handled == 2


def test_the_run_so_far_is_recorded_when_handle_raises() -> None:
    runs, tracer, failed = make_runs("aab")

    def fail_on_b(port: str, msg: Message) -> Outputs:
        if port == "b":
            raise RuntimeError("boom")
        return []

    runs.begin()
    with pytest.raises(RuntimeError):
        runs.handle_until_output(fail_on_b)
    runs.close()
    assert handle_spans(tracer) == [("a", 2)]
    assert tracer.stats.handled == 2
    assert failed == []  # stream messages: nobody to answer


def test_handle_one_is_a_span_of_its_own() -> None:
    runs, tracer, _ = make_runs("aa")  # two messages still queued
    assert runs.handle_one(forward_on("x"), Incoming("x", Item(9, 9))) == [("out", Item(9, 9))]
    assert handle_spans(tracer) == [("x", 2)]
