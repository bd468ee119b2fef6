"""The verifier worker: a child process that runs math-verify, one request at a time.

Why a process: math-verify's parser and comparisons are sympy code that can run for minutes or
eat memory on a pathological answer (`9^{9^{9^{9}}}`, `(10^{10^7})!`), and its own timeouts
use SIGALRM, which only works in a main thread. So each request runs here, in the main thread
of a fresh interpreter (started by `verifier_process`, like a multiprocessing "spawn" child):

- a soft timeout: an `ITIMER_REAL` alarm around parse + verify raises out of sympy and the
  reply says "timeout"; the worker lives on. (math-verify's own alarms are switched off so they
  cannot cancel ours.)
- the parent's hard timeout covers what the alarm cannot interrupt (a long C-level big-integer
  operation holds the interpreter): the parent kills the process and starts another.
- an address-space limit (`--memory-mb`) turns runaway allocation into a MemoryError reply.

Protocol on stdin/stdout: frames of a 4-byte big-endian length and a msgpack message from
`rstar2.wire` (VerifierReady once, then one VerifyReply per VerifyRequest). File descriptor 1
is redirected to stderr at start so stray prints cannot corrupt the frames. EOF on stdin ends
the worker.

What it does not do: the normaliser fast path (the parent does that) or answer extraction.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import struct
import sys
import time
from collections.abc import Callable
from typing import TypeVar

from rstar2.wire import Message, VerifierReady, VerifyReply, VerifyRequest, decode, encode

T = TypeVar("T")
HEADER = struct.Struct(">I")
MAX_FRAME = 16 * 1024 * 1024


class _Alarm(BaseException):
    """Raised by the SIGALRM handler; a BaseException so sympy's `except Exception` misses it."""


def _raise_alarm(signum: int, frame: object) -> None:
    raise _Alarm()


def run_with_alarm(fn: Callable[[], T], timeout_s: float) -> T:
    """Call `fn` in the main thread; raise TimeoutError when it runs past `timeout_s`."""
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    previous = signal.signal(signal.SIGALRM, _raise_alarm)
    outer_delay, _ = signal.setitimer(signal.ITIMER_REAL, timeout_s)
    started = time.monotonic()
    try:
        return fn()
    except _Alarm:
        raise TimeoutError(f"verification ran past {timeout_s:g}s") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay > 0:  # someone else's alarm was pending (e.g. pytest-timeout): re-arm it
            left = outer_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))


def math_verify_equal(extracted: str, reference: str) -> bool:
    """math-verify's verdict on two bare answers (both wrapped in `\\boxed{}` to parse)."""
    from math_verify import parse, verify  # heavy (sympy): loaded only inside the worker

    gold = parse("\\boxed{" + reference + "}", parsing_timeout=None)  # type: ignore[arg-type]
    pred = parse("\\boxed{" + extracted + "}", parsing_timeout=None)  # type: ignore[arg-type]
    return bool(verify(gold, pred, timeout_seconds=None))


def check(request: VerifyRequest) -> VerifyReply:
    """Answer one request. Must run in the main thread (it uses SIGALRM)."""
    try:
        equal = run_with_alarm(
            lambda: math_verify_equal(request.extracted, request.reference), request.timeout_s
        )
    except TimeoutError as e:
        return VerifyReply(request.id, "timeout", str(e))
    except Exception as e:  # untrusted input: any failure (MemoryError too) is data
        return VerifyReply(request.id, "error", f"{type(e).__name__}: {str(e)[:200]}")
    return VerifyReply(request.id, "equal" if equal else "unequal")


def write_frame(fd: int, msg: Message) -> None:
    data = encode(msg)
    os.write(fd, HEADER.pack(len(data)) + data)


def read_exactly(fd: int, n: int) -> bytes | None:
    """`n` bytes from `fd`, or None at EOF."""
    chunks: list[bytes] = []
    while n > 0:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def serve(in_fd: int, out_fd: int) -> None:
    """Answer requests from `in_fd` on `out_fd` until EOF."""
    write_frame(out_fd, VerifierReady(os.getpid()))
    while True:
        header = read_exactly(in_fd, HEADER.size)
        if header is None:
            return
        (size,) = HEADER.unpack(header)
        if size > MAX_FRAME:
            raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME}")
        body = read_exactly(in_fd, size)
        if body is None:
            return
        request = decode(body)
        if not isinstance(request, VerifyRequest):
            raise TypeError(f"expected VerifyRequest, got {type(request).__name__}")
        write_frame(out_fd, check(request))


def _limit_memory(memory_mb: int) -> None:
    if memory_mb > 0:
        import resource

        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(argv: list[str] | None = None) -> int:
    # the parent decides when we stop; set first: a Ctrl-C during the seconds of sympy's
    # imports below printed a KeyboardInterrupt traceback from every worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parser = argparse.ArgumentParser(description="rstar2 math-verify worker (internal)")
    parser.add_argument("--memory-mb", type=int, default=0)
    args = parser.parse_args(argv)
    out_fd = os.dup(1)
    os.dup2(2, 1)  # stray prints from sympy/math-verify go to stderr, not into our frames
    # This process is an entry point of its own: silence math-verify's per-call warnings
    # about disabled timeouts (we time out with our own alarm).
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    _limit_memory(args.memory_mb)
    math_verify_equal("\\frac{1}{2}", "0.5")  # warm up sympy's lazy imports before READY
    serve(sys.stdin.fileno(), out_fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
