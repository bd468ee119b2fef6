"""The zygote's process seen from the host: starting it, its ready handshake, stopping it.

`start_process(argv)` starts the zygote (argv from `isolation.zygote_argv`), `handshake(proc,
timeout_s)` waits for its ready frame (its isolation layers; a zygote that dies or stays silent
is a `SandboxStartError` carrying its first words on stderr), `relay_stderr` logs its stderr,
`kill` and `stop` end it.

What it does not do: decide when to start or restart a zygote, or feed it requests
(`executor.py`), or run code (`zygote.py`, the program on the other side).
"""

from __future__ import annotations

import logging
import subprocess

import anyio
import anyio.abc

from rstar2.sandbox import framing
from rstar2.sandbox.isolation import ENV

log = logging.getLogger(__name__)


class SandboxStartError(RuntimeError):
    """The zygote did not start (or did not report ready in time)."""


async def start_process(argv: list[str]) -> anyio.abc.Process:
    """The zygote's process started from `argv` (in /tmp, with the sandbox's environment), in
    a session of its own: a terminal's Ctrl-C, sent to its whole foreground process group,
    does not reach it (bubblewrap, the zygote's parent, died of it, and with it the zygote,
    which the executor then restarted while its command was stopping); the executor stops it
    (`stop`), and it dies with us (bubblewrap's --die-with-parent, or its stdin closing)."""
    env = dict(ENV)
    try:
        return await anyio.open_process(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, cwd="/tmp", start_new_session=True,
        )  # fmt: skip
    except OSError as e:
        raise SandboxStartError(f"cannot start the sandbox zygote: {e}") from e


async def handshake(
    proc: anyio.abc.Process, timeout_s: float
) -> tuple[dict[str, str], framing.FrameBuffer]:
    """Wait up to `timeout_s` for the zygote's ready frame: its isolation layers, and the frame
    buffer holding whatever it sent after (its results are read on from there)."""
    assert proc.stdout is not None and proc.stderr is not None
    frames = framing.FrameBuffer()
    with anyio.move_on_after(timeout_s):
        while True:
            try:
                data = await proc.stdout.receive(1 << 16)
            except anyio.EndOfStream:
                break
            got = frames.feed(data)
            if got:
                ready = got[0]
                for name, err in ready.get("errors", {}).items():
                    log.warning("sandbox preload of %s failed: %s", name, err)
                return dict(ready.get("layers", {})), frames
    err = b""
    with anyio.move_on_after(1.0):
        try:
            err = await proc.stderr.receive(4096)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # it died without a word
    raise SandboxStartError(f"sandbox zygote did not start: {err.decode(errors='replace')}")


async def relay_stderr(stream: anyio.abc.ByteReceiveStream) -> None:
    """Log the zygote's stderr until it ends, or until `aclose` closes the stream under us
    (shutdown races the relay: nothing is left to relay then)."""
    try:
        async for chunk in stream:
            for line in chunk.decode(errors="replace").splitlines():
                log.warning("sandbox zygote: %s", line)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        return


def kill(proc: anyio.abc.Process) -> None:
    """SIGKILL `proc`, which may have died already."""
    try:
        proc.kill()
    except ProcessLookupError:
        pass


async def stop(proc: anyio.abc.Process) -> None:
    """Wait (shielded) up to 5 s for `proc` to exit, then SIGKILL it and reap it; then close its
    pipes (left to the garbage collector, they are closed after the event loop, with a
    traceback)."""
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(5.0):
            await proc.wait()
        if proc.returncode is None:
            kill(proc)
            await proc.wait()
        await proc.aclose()
