"""`rstar2 bench bus [--json]`: actor bus throughput and round trips vs bare pyzmq + msgpack.

For each transport (inproc, ipc, tcp on loopback) and 1 KB messages (`wire.Item`):
- one-way throughput, msgs/s: `n` messages over the time from the first one's send (its
  `sent_at` stamp, the sender's `time.time()`) to the last one's receipt, the same clock and
  the same formula on both sides. Runtime = a `Source` actor (one `ctx.send` per message) ->
  `RateSink` actor graph; raw = one PUSH socket sending one encoded Item per `send()` call ->
  one PULL socket decoding each, with msgspec msgpack and nothing else. Both encode, send,
  receive and decode every message; the runtime packs messages into frames (up to
  `graph.batch` = 64 messages and `PACK_BYTES` = 60 KiB: ~58 of 1 KB), raw does not. So
  there is a second raw side, raw batched: the same PUSH -> PULL, but `raw_batch` messages
  (the same limits as the runtime's) encoded as one msgpack list per `send()` and decoded in
  one call, the batching a hand-written pyzmq program would do. `ratio` compares the runtime
  with raw, `batched_ratio` with raw batched; each side's CPU per message is reported too;
- round trip p50/p99: runtime = `Pinger` -> `Echo` over request/reply ports; raw = a blocking
  DEALER -> ROUTER echo.
- `--busy-thread`, instead of the above: in-process round trips (runtime only) alone and beside a
  thread that runs nothing but Python, as an embedded engine's thread does on a GPU, at each
  of `--switch-intervals-ms` (`rstar2.switch_interval`): the event loop gives the interpreter
  lock away in every socket call and waits up to the switch interval to get it back. Also
  the thread's loops per second, alone and beside the bus (over the graph's whole run).
inproc pairs run in one process (raw: a sender thread); ipc and tcp put the sender (or the
echo service) in a spawned process. The runtime side runs on asyncio (+uvloop) by default.
Each throughput figure is the median of `--repeats` runs, runtime, raw and raw batched in
turn so that load from other jobs hits all alike; the JSON also gives each side's min and max.

What it does not do: tune anything, or assert on the figures (they are printed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import msgspec
import zmq

from rstar2.actors.backend import BACKENDS
from rstar2.actors.graph import run_graph_blocking
from rstar2.actors.graph_config import GraphConfig, graph_config
from rstar2.actors.outbox import PACK_BYTES
from rstar2.commands.arguments import int_at_least, nonnegative_int, positive_int
from rstar2.config import UsageError
from rstar2.switch_interval import switch_interval
from rstar2.wire import Item

TRANSPORTS = ("inproc", "ipc", "tcp")
SWITCH_INTERVALS_MS = "5,0.5,0.1"
"""`--busy-thread`'s interpreter switch intervals, unless --switch-intervals-ms says others."""
_DEMO = "rstar2.actors.demo"
_RAW_TCP_PORT = 5690


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print one JSON list, one object per transport"
    )
    parser.add_argument(
        "--messages", type=int_at_least(2), default=20000, help="messages per throughput run"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="throughput runs per side (median)"
    )
    parser.add_argument(
        "--round-trips", type=positive_int, default=1000, help="round trips per latency run"
    )
    parser.add_argument(
        "--size", type=nonnegative_int, default=1024, help="payload bytes per message"
    )
    parser.add_argument("--backend", choices=BACKENDS, default="asyncio")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help="comma-separated subset")
    parser.add_argument(
        "--busy-thread",
        action="store_true",
        help="instead: in-process round trips alone and beside a thread that only runs Python, "
        "at each --switch-intervals-ms",
    )
    parser.add_argument(
        "--switch-intervals-ms",
        help="with --busy-thread: the interpreter switch intervals to measure (comma-separated; "
        f"default: {SWITCH_INTERVALS_MS})",
    )


# --- runtime side ---------------------------------------------------------------------------


def _placement(transport: str) -> dict[str, Any]:
    """Where the remote end runs so that the plan picks `transport` for the edge."""
    if transport == "inproc":
        return {}
    if transport == "ipc":
        return {"process": "remote"}
    return {"process": "remote", "host": "other"}


def _graph(transport: str, actors: list[dict[str, Any]], edge: str) -> GraphConfig:
    actors[0].update(_placement(transport))
    return graph_config(
        {
            "name": f"bench-{transport}",
            "edges": [edge],
            "actors": actors,
            "hosts": {"local": "127.0.0.1", "other": "127.0.0.1"},
            "trace": True,
        }
    )


class Run(msgspec.Struct, frozen=True):
    """One throughput run: messages per second, and CPU microseconds per message spent by the
    sending and the receiving thread (encode, send, receive, decode and, for the runtime,
    everything the actors' event loops do)."""

    msgs_per_s: float
    send_cpu_us: float
    recv_cpu_us: float

    @property
    def cpu_us(self) -> float:
        """Both ends' CPU per message (over inproc the runtime's two actors share one thread,
        whose cost `runtime_throughput` splits evenly between the ends)."""
        return self.send_cpu_us + self.recv_cpu_us


def runtime_throughput(transport: str, n: int, size: int, backend: str) -> Run:
    cfg = _graph(
        transport,
        [
            {
                "name": "source",
                "cls": f"{_DEMO}:Source",
                "params": {"n": n, "size": size, "stamp": True},
            },
            {"name": "sink", "cls": f"{_DEMO}:RateSink", "params": {"n": n}},
        ],
        "source.out -> sink.in",
    )
    result = run_graph_blocking(cfg, backend=backend, handle_signals=False)
    if result.reason != "stopped":
        raise RuntimeError(f"bench graph {transport} ended with {result.reason}: {result.failures}")
    r = result.result
    send_us, recv_us = r["send_cpu_s"] * 1e6 / n, r["recv_cpu_s"] * 1e6 / n
    if transport == "inproc":  # one thread runs both actors: each figure is the whole cost
        send_us = recv_us = max(send_us, recv_us) / 2
    return Run(n / r["elapsed_s"], send_us, recv_us)


def runtime_rtts(transport: str, n: int, size: int, backend: str) -> list[float]:
    cfg = _graph(
        transport,
        [
            {"name": "echo", "cls": f"{_DEMO}:Echo"},
            {"name": "pinger", "cls": f"{_DEMO}:Pinger", "params": {"n": n, "size": size}},
        ],
        "pinger.req -> echo.req",
    )
    result = run_graph_blocking(cfg, backend=backend, handle_signals=False)
    if result.reason != "stopped":
        raise RuntimeError(f"bench graph {transport} ended with {result.reason}: {result.failures}")
    return list(result.result["rtt_s"])


class BusyThread:
    """A daemon thread that only runs Python (the interpreter lock held but at its switch
    points), counting its loops of 1,000 additions."""

    def __init__(self) -> None:
        self.loops = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="busy", daemon=True)

    def _spin(self) -> None:
        while not self._stop.is_set():
            x = 0
            for _ in range(1000):
                x += 1
            self.loops += 1

    def __enter__(self) -> BusyThread:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def loops_per_s(busy: BusyThread, seconds: float) -> float:
    """The thread's loops per second over the next `seconds`."""
    start = busy.loops
    time.sleep(seconds)
    return (busy.loops - start) / seconds


def busy_thread_rtts(
    intervals_ms: list[float], n: int, size: int, backend: str
) -> list[dict[str, Any]]:
    """Per switch interval: in-process round trips alone and beside a `BusyThread`, and the
    thread's loops per second alone and beside them."""
    rows = []
    for ms in intervals_ms:
        with switch_interval(ms / 1e3):
            alone = runtime_rtts("inproc", n, size, backend)
            with BusyThread() as busy:
                by_itself = loops_per_s(busy, 1.0)
                start, began = busy.loops, time.perf_counter()
                beside = runtime_rtts("inproc", n, size, backend)
                during = (busy.loops - start) / (time.perf_counter() - began)
        rows.append(
            {
                "switch_interval_ms": ms,
                "rtt_p50_ms": round(percentile(alone, 0.5) * 1e3, 3),
                "busy_rtt_p50_ms": round(percentile(beside, 0.5) * 1e3, 3),
                "busy_rtt_p99_ms": round(percentile(beside, 0.99) * 1e3, 3),
                "thread_loops_per_s": round(by_itself),
                "busy_thread_loops_per_s": round(during),
            }
        )
    return rows


def run_busy_thread(args: argparse.Namespace) -> int:
    """`--busy-thread`: the table (or JSON list) of `busy_thread_rtts`."""
    try:
        text = args.switch_intervals_ms or SWITCH_INTERVALS_MS
        intervals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        intervals = []
    if not intervals or min(intervals) <= 0:
        raise UsageError(
            f"--switch-intervals-ms: got {args.switch_intervals_ms!r}, expected numbers > 0 "
            "separated by commas"
        )
    rows = busy_thread_rtts(intervals, args.round_trips, args.size, args.backend)
    if args.json:
        print(json.dumps(rows))
        return 0
    print(
        f"{args.size}-byte in-process round trips ({args.round_trips} each) on {args.backend}, "
        "alone and beside a thread that only runs Python"
    )
    print("switch ms   rtt p50 alone   beside p50     p99   thread loops/s alone  beside")
    for r in rows:
        print(
            f"{r['switch_interval_ms']:>9g} {r['rtt_p50_ms']:>13.3f}ms {r['busy_rtt_p50_ms']:>10.3f}ms"
            f" {r['busy_rtt_p99_ms']:>7.3f}ms {r['thread_loops_per_s']:>20,} "
            f"{r['busy_thread_loops_per_s']:>7,}"
        )
    return 0


# --- bare pyzmq + msgpack ------------------------------------------------------------------


def _endpoint(transport: str, name: str, tmp: str) -> str:
    if transport == "inproc":
        return f"inproc://bench-raw-{name}"
    if transport == "ipc":
        return f"ipc://{tmp}/raw-{name}.sock"
    return f"tcp://127.0.0.1:{_RAW_TCP_PORT + (name == 'echo')}"


def _raw_send(endpoint: str, n: int, size: int, context: zmq.Context | None = None) -> None:
    ctx = context or zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(endpoint)
    enc = msgspec.msgpack.Encoder()
    payload = b"x" * size
    cpu_start = time.thread_time_ns()
    for seq in range(n - 1):
        sock.send(enc.encode(Item(seq, seq, payload, time.time())))
    cpu = time.thread_time_ns() - cpu_start  # the last Item carries it, as `demo.Source` does
    sock.send(enc.encode(Item(n - 1, cpu, payload, time.time())))
    sock.close(linger=-1)  # deliver everything before the process exits
    if context is None:
        ctx.term()


def raw_batch(size: int, batch: int | None = None, max_bytes: int = PACK_BYTES) -> int:
    """Messages of `size`-byte payloads per frame for raw batched: as many as the runtime
    packs, i.e. up to `batch` (default: the graph's default `batch`) and within `max_bytes`."""
    if batch is None:
        batch = next(f.default for f in dataclasses.fields(GraphConfig) if f.name == "batch")
    body = len(msgspec.msgpack.encode(Item(0, 0, b"x" * size, time.time())))
    return max(1, min(batch, (max_bytes - 6) // body))  # 6: the list's largest header


def _raw_send_batched(
    endpoint: str, n: int, size: int, per_frame: int, context: zmq.Context | None = None
) -> None:
    ctx = context or zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.connect(endpoint)
    enc = msgspec.msgpack.Encoder()
    payload = b"x" * size
    batch: list[Item] = []
    cpu_start = time.thread_time_ns()
    for seq in range(n - 1):
        batch.append(Item(seq, seq, payload, time.time()))
        if len(batch) == per_frame:
            sock.send(enc.encode(batch))
            batch = []
    cpu = time.thread_time_ns() - cpu_start  # carried by the last Item, as in `_raw_send`
    batch.append(Item(n - 1, cpu, payload, time.time()))
    sock.send(enc.encode(batch))
    sock.close(linger=-1)
    if context is None:
        ctx.term()


def _raw_echo(endpoint: str, n: int, context: zmq.Context | None = None) -> None:
    ctx = context or zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.bind(endpoint)
    dec = msgspec.msgpack.Decoder(Item)
    enc = msgspec.msgpack.Encoder()
    for _ in range(n):
        ident, body = sock.recv_multipart()
        sock.send_multipart([ident, enc.encode(dec.decode(body))])
    sock.close(linger=-1)
    if context is None:
        ctx.term()


def _start_peer(transport: str, target: Any, args: tuple, ctx: zmq.Context) -> Any:
    if transport == "inproc":
        thread = threading.Thread(target=target, args=(*args, ctx), daemon=True)
        thread.start()
        return thread
    # daemon: ended with this process, should Ctrl-C stop it before the peer is done
    proc = multiprocessing.get_context("spawn").Process(
        target=_peer_main, args=(target, *args), daemon=True
    )
    proc.start()
    return proc


def _peer_main(target: Any, *args: Any) -> None:
    """A spawned peer's body: Ctrl-C reaches it with the whole process group, and ends it
    without the traceback multiprocessing would print (the parent reports the interruption)."""
    try:
        target(*args)
    except KeyboardInterrupt:
        sys.exit(130)


PEER_CHECK_MS = 1000
"""How long a raw side's receive waits before it looks whether its peer is still there
(`_recv_from`): a peer that died would otherwise leave the bench waiting forever."""


def _receiver(ctx: zmq.Context, kind: int) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.RCVTIMEO, PEER_CHECK_MS)
    return sock


def _recv_from(sock: zmq.Socket, peer: Any) -> bytes:
    """The next frame from a socket whose receives time out (`_receiver`): wait on while the
    peer (a thread or process) is alive; a receive that found nothing in `PEER_CHECK_MS` after
    the peer had ended stops the bench with a message (what the peer sent before it ended is
    still received). The hot loops call this only when their own `recv` timed out, so a frame
    that arrives in time costs nothing more."""
    while True:
        alive = peer.is_alive()
        try:
            return sock.recv()
        except zmq.Again:
            if not alive:
                code = getattr(peer, "exitcode", None)
                how = f" (exit code {code})" if code else ""
                raise SystemExit(
                    f"bench bus: the raw side's peer ended{how} before its last message"
                ) from None


def raw_throughput(transport: str, n: int, size: int, tmp: str) -> Run:
    ctx = zmq.Context()
    sock = _receiver(ctx, zmq.PULL)
    endpoint = _endpoint(transport, "stream", tmp)
    sock.bind(endpoint)
    peer = _start_peer(transport, _raw_send, (endpoint, n, size), ctx)
    dec = msgspec.msgpack.Decoder(Item)
    first_sent_at = dec.decode(_recv_from(sock, peer)).sent_at
    cpu_start = time.thread_time()
    for _ in range(n - 2):
        try:
            frame = sock.recv()
        except zmq.Again:
            frame = _recv_from(sock, peer)
        dec.decode(frame)
    send_cpu_ns = dec.decode(_recv_from(sock, peer)).value
    elapsed = time.time() - first_sent_at
    recv_cpu = time.thread_time() - cpu_start
    peer.join()
    sock.close(linger=0)
    ctx.term()
    return Run(n / elapsed, send_cpu_ns / 1e3 / n, recv_cpu * 1e6 / n)


def raw_batched_throughput(transport: str, n: int, size: int, tmp: str) -> Run:
    """Like `raw_throughput`, with `raw_batch(size)` messages per frame."""
    ctx = zmq.Context()
    sock = _receiver(ctx, zmq.PULL)
    endpoint = _endpoint(transport, "stream", tmp)
    sock.bind(endpoint)
    peer = _start_peer(transport, _raw_send_batched, (endpoint, n, size, raw_batch(size)), ctx)
    dec = msgspec.msgpack.Decoder(list[Item])
    items = dec.decode(_recv_from(sock, peer))
    first_sent_at = items[0].sent_at
    count = len(items)
    cpu_start = time.thread_time()
    while count < n:
        try:
            frame = sock.recv()
        except zmq.Again:
            frame = _recv_from(sock, peer)
        items = dec.decode(frame)
        count += len(items)
    elapsed = time.time() - first_sent_at
    recv_cpu = time.thread_time() - cpu_start
    send_cpu_ns = items[-1].value
    peer.join()
    sock.close(linger=0)
    ctx.term()
    return Run(n / elapsed, send_cpu_ns / 1e3 / n, recv_cpu * 1e6 / n)


def raw_rtts(transport: str, n: int, size: int, tmp: str) -> list[float]:
    ctx = zmq.Context()
    endpoint = _endpoint(transport, "echo", tmp)
    peer = _start_peer(transport, _raw_echo, (endpoint, n), ctx)
    sock = _receiver(ctx, zmq.DEALER)
    sock.connect(endpoint)
    enc, dec = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(Item)
    payload = b"x" * size
    rtts = []
    for seq in range(n):
        start = time.perf_counter()
        sock.send(enc.encode(Item(seq, seq, payload)))
        try:
            frame = sock.recv()
        except zmq.Again:
            frame = _recv_from(sock, peer)
        dec.decode(frame)
        rtts.append(time.perf_counter() - start)
    peer.join()
    sock.close(linger=0)
    ctx.term()
    return rtts


# --- report --------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _median_run(runs: list[Run]) -> Run:
    return Run(
        statistics.median(r.msgs_per_s for r in runs),
        statistics.median(r.send_cpu_us for r in runs),
        statistics.median(r.recv_cpu_us for r in runs),
    )


def measure(transport: str, args: argparse.Namespace, tmp: str) -> dict[str, Any]:
    runtimes: list[Run] = []
    raws: list[Run] = []
    batched: list[Run] = []
    for _ in range(args.repeats):
        runtimes.append(runtime_throughput(transport, args.messages, args.size, args.backend))
        raws.append(raw_throughput(transport, args.messages, args.size, tmp))
        batched.append(raw_batched_throughput(transport, args.messages, args.size, tmp))
    runtime, raw, raw_b = _median_run(runtimes), _median_run(raws), _median_run(batched)
    rtts = runtime_rtts(transport, args.round_trips, args.size, args.backend)
    raw_rt = raw_rtts(transport, args.round_trips, args.size, tmp)
    return {
        "transport": transport,
        "runtime_msgs_per_s": round(runtime.msgs_per_s),
        "raw_msgs_per_s": round(raw.msgs_per_s),
        "ratio": round(runtime.msgs_per_s / raw.msgs_per_s, 3),
        "runtime_range": [
            round(min(r.msgs_per_s for r in runtimes)),
            round(max(r.msgs_per_s for r in runtimes)),
        ],
        "raw_range": [
            round(min(r.msgs_per_s for r in raws)),
            round(max(r.msgs_per_s for r in raws)),
        ],
        "raw_batched_msgs_per_s": round(raw_b.msgs_per_s),
        "batched_ratio": round(runtime.msgs_per_s / raw_b.msgs_per_s, 3),
        "raw_batch": raw_batch(args.size),
        "raw_batched_range": [
            round(min(r.msgs_per_s for r in batched)),
            round(max(r.msgs_per_s for r in batched)),
        ],
        "runtime_cpu_us_per_msg": {
            "send": round(runtime.send_cpu_us, 3),
            "recv": round(runtime.recv_cpu_us, 3),
        },
        "raw_cpu_us_per_msg": {
            "send": round(raw.send_cpu_us, 3),
            "recv": round(raw.recv_cpu_us, 3),
        },
        "raw_batched_cpu_us_per_msg": {
            "send": round(raw_b.send_cpu_us, 3),
            "recv": round(raw_b.recv_cpu_us, 3),
        },
        "cpu_ratio": round(raw.cpu_us / runtime.cpu_us, 3),
        "batched_cpu_ratio": round(raw_b.cpu_us / runtime.cpu_us, 3),
        "rtt_p50_ms": round(percentile(rtts, 0.5) * 1e3, 3),
        "rtt_p99_ms": round(percentile(rtts, 0.99) * 1e3, 3),
        "raw_rtt_p50_ms": round(percentile(raw_rt, 0.5) * 1e3, 3),
        "raw_rtt_p99_ms": round(percentile(raw_rt, 0.99) * 1e3, 3),
        "median_rtt_ratio": round(statistics.median(rtts) / statistics.median(raw_rt), 2),
    }


def run(args: argparse.Namespace) -> int:
    if args.busy_thread:
        return run_busy_thread(args)
    if args.switch_intervals_ms is not None:
        raise UsageError("--switch-intervals-ms is for --busy-thread (the intervals it measures)")
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    bad = [t for t in transports if t not in TRANSPORTS]
    if bad or not transports:
        raise UsageError(
            f"--transports: got {args.transports!r}, expected a subset of {TRANSPORTS}"
        )
    rows = []
    with tempfile.TemporaryDirectory(prefix="rstar2-bench-") as tmp:
        for transport in transports:
            rows.append(measure(transport, args, tmp))
    if args.json:
        print(json.dumps(rows))
        return 0
    print(
        f"{args.size}-byte messages, {args.messages} one way (median of {args.repeats}), "
        f"{args.round_trips} round trips, runtime on {args.backend}"
    )
    head = (
        "transport",
        "runtime/s",
        "raw/s",
        "ratio",
        "cpu ratio",
        "batched/s",
        "ratio",
        "cpu ratio",
    )
    print("{:<9} {:>10} {:>10} {:>6} {:>9} {:>10} {:>6} {:>9}".format(*head), end="")
    print("   rtt p50    p99  raw p50, p99")
    for r in rows:
        rtts = [r[k] for k in ("rtt_p50_ms", "rtt_p99_ms")]
        print(
            f"{r['transport']:<9} {r['runtime_msgs_per_s']:>10} {r['raw_msgs_per_s']:>10} "
            f"{r['ratio']:>6.2f} {r['cpu_ratio']:>9.2f} {r['raw_batched_msgs_per_s']:>10} "
            f"{r['batched_ratio']:>6.2f} {r['batched_cpu_ratio']:>9.2f} "
            + " ".join(f"{v:>7.3f}ms" for v in rtts)
            + f"  {r['raw_rtt_p50_ms']:.3f}ms, {r['raw_rtt_p99_ms']:.3f}ms"
        )
    print(
        "ratio: runtime / raw msgs/s (load from other jobs moves it); cpu ratio: raw / runtime "
        "CPU per message, both ends (what the ratio becomes when the machine is CPU-bound); "
        f"batched: raw with {rows[0]['raw_batch']} messages per send(), as the runtime packs"
    )
    return 0
