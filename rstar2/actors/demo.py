"""Small actors for the docs, the tests and `rstar2 bench bus` (all on `wire.Item`).

- `Source`: sends `n` Items (payload of `size` bytes; `stamp`: `sent_at` = send time, and the
  last Item's `value` = the CPU ns its loop spent) on "out", then finishes;
- `Square`: "in" -> "out", value squared (a pure `handle`);
- `Sink`: counts Items on "in"; after `n` it stops the graph with {"count", "sum"};
- `Echo`: a request/reply service on "req": replies with the same Item;
- `Pinger`: a client: `n` sequential requests on "req", stops the graph with their round trips;
- `Flaky`: like Square, but raises on every Item with seq >= `fail_at` (only before its first
  restart when `once`), to exercise failure reports and restarts;
- `SlowSink`: like Sink but sleeps `delay_s` per message (a slow consumer);
- `RateSink`: times `n` stamped Items from the first one's send to the last one's receipt,
  with the CPU time of both ends (for the bus benchmark).

What it does not do: anything useful beyond demonstrating and measuring the runtime.
"""

from __future__ import annotations

import time
from typing import ClassVar

import anyio

from rstar2.actors.actor import Actor, Incoming, Outputs, Port, port
from rstar2.actors.context import ActorContext
from rstar2.wire import Item, Message


class Source(Actor):
    outputs: ClassVar[dict[str, Port]] = {"out": port(Item)}

    def __init__(self, n: int = 100, size: int = 0, stamp: bool = False) -> None:
        if n < 0 or size < 0:
            raise ValueError(f"n and size must be >= 0, got n={n}, size={size}")
        self.n = n
        self.payload = b"x" * size
        self.stamp = stamp

    async def serve(self, ctx: ActorContext) -> None:
        cpu_start = time.thread_time_ns()
        for seq in range(self.n - 1):
            sent_at = time.time() if self.stamp else 0.0
            await ctx.send("out", Item(seq, seq, self.payload, sent_at))
        if self.n:  # stamped: the last Item's value is the CPU this loop spent, in ns
            last = self.n - 1
            sent_at = time.time() if self.stamp else 0.0
            value = time.thread_time_ns() - cpu_start if self.stamp else last
            await ctx.send("out", Item(last, value, self.payload, sent_at))


class Square(Actor):
    inputs: ClassVar[dict[str, Port]] = {"in": port(Item)}
    outputs: ClassVar[dict[str, Port]] = {"out": port(Item)}

    def handle(self, port: str, msg: Message) -> Outputs:
        assert isinstance(msg, Item)
        return [("out", Item(msg.seq, msg.value * msg.value))]


class Sink(Actor):
    inputs: ClassVar[dict[str, Port]] = {"in": port(Item)}

    def __init__(self, n: int = 100) -> None:
        self.n = n
        self.count = 0
        self.total = 0

    def handle(self, port: str, msg: Message) -> Outputs:
        assert isinstance(msg, Item)
        self.count += 1
        self.total += msg.value
        if self.count == self.n:
            self.stop_graph("done", {"count": self.count, "sum": self.total})
        return []


class Echo(Actor):
    inputs: ClassVar[dict[str, Port]] = {"req": port(Item, reply=Item)}

    def handle(self, port: str, msg: Message) -> Outputs:
        return [("req", msg)]


class Pinger(Actor):
    outputs: ClassVar[dict[str, Port]] = {"req": port(Item, reply=Item)}

    def __init__(self, n: int = 100, size: int = 0) -> None:
        self.n = n
        self.payload = b"x" * size

    async def serve(self, ctx: ActorContext) -> None:
        rtts = []
        for seq in range(self.n):
            start = time.perf_counter()
            reply = await ctx.request("req", Item(seq, seq, self.payload), timeout=30.0)
            rtts.append(time.perf_counter() - start)
            if not (isinstance(reply, Item) and reply.seq == seq):
                raise RuntimeError(f"reply {reply!r} does not match request {seq}")
        ctx.stop_graph("done", {"rtt_s": rtts})


class Flaky(Square):
    def __init__(self, fail_at: int = 0, once: bool = False) -> None:
        self.fail_at = fail_at
        self.once = once

    def handle(self, port: str, msg: Message) -> Outputs:
        assert isinstance(msg, Item)
        if msg.seq >= self.fail_at and not (self.once and self.restarts > 0):
            raise RuntimeError(f"flaky actor failing on item {msg.seq}")
        return super().handle(port, msg)


class SlowSink(Sink):
    def __init__(self, n: int = 100, delay_s: float = 0.001) -> None:
        super().__init__(n)
        self.delay_s = delay_s

    async def serve(self, ctx: ActorContext) -> None:
        while True:
            incoming: Incoming = await ctx.recv()
            await anyio.sleep(self.delay_s)
            await ctx.dispatch(self, incoming)


class RateSink(Actor):
    """Counts `n` Items and stops the graph with the time from the first one's `sent_at` (the
    sender's wall clock, so a `Source` with `stamp=True`) to the receipt of the last, and the
    CPU time of both ends: this thread's from the first receipt to the last, and the sender's
    (carried in the last stamped Item's `value`, in ns)."""

    inputs: ClassVar[dict[str, Port]] = {"in": port(Item)}

    def __init__(self, n: int = 100) -> None:
        if n < 2:
            raise ValueError(f"RateSink needs n >= 2 to time anything, got {n}")
        self.n = n
        self.seen = 0
        self.first_sent_at = 0.0
        self.cpu_start = 0.0

    def handle(self, port: str, msg: Message) -> Outputs:
        assert isinstance(msg, Item)
        self.seen += 1
        if self.seen == 1:
            self.first_sent_at = msg.sent_at
            self.cpu_start = time.thread_time()
        elif self.seen == self.n:
            elapsed = time.time() - self.first_sent_at
            result = {
                "count": self.n,
                "elapsed_s": elapsed,
                "recv_cpu_s": time.thread_time() - self.cpu_start,
                "send_cpu_s": msg.value / 1e9,
            }
            self.stop_graph("done", result)
        return []
