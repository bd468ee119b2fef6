"""`LineFile`: a text file written one whole line at a time, as results come in.

Lines are gathered in memory and written in batches (at `flush_bytes` gathered, `flush_s` after
the last write, and on close), each batch with `os.write` calls on the file itself, so a reader
sees the file grow while the run goes on, and the memory held is one batch whatever the count.
A write that fails part-way (a full disk, a quota, the device gone) cuts the file back to the
end of its last whole line before the error goes on (raised once), and the file takes no
more lines (later ones are dropped: the run is stopping on that error): whatever stops the run
(that error, Ctrl-C, a bug), the file holds only whole lines, those written before it stopped.
`lines` counts them.

What it does not do: replace a file atomically (a run's results appear as it goes: an
interrupted run keeps what it finished), fsync, or write from several threads.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType


class LineFile:
    """Whole lines appended to `path` (created, or truncated if it exists)."""

    def __init__(
        self,
        path: str | Path,
        *,
        flush_bytes: int = 1 << 16,
        flush_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.flush_bytes = flush_bytes
        self.flush_s = flush_s
        self.clock = clock
        self.lines = 0  # whole lines on disk
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._size = 0  # bytes on disk, all of them whole lines
        self._pending = bytearray()
        self._pending_lines = 0
        self._last_flush = clock()
        self._failed: OSError | None = None

    def write_line(self, text: str) -> None:
        """Add `text` (without its newline) as one line; it is written with its batch."""
        if "\n" in text:
            raise ValueError("a line must not contain a newline")
        if self._failed is not None:
            return
        self._pending += text.encode() + b"\n"
        self._pending_lines += 1
        if (
            len(self._pending) >= self.flush_bytes
            or self.clock() - self._last_flush >= self.flush_s
        ):
            self.flush()

    def flush(self) -> None:
        """Write the gathered lines. On an OSError the file is cut back to its last whole line
        and the error (naming the file) raised; that batch and any later line are dropped."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        if self._failed is not None:
            return
        data, self._pending = bytes(self._pending), bytearray()
        lines, self._pending_lines = self._pending_lines, 0
        self._last_flush = self.clock()
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as e:
            if written:
                os.ftruncate(self._fd, self._size)
                os.lseek(self._fd, self._size, os.SEEK_SET)
            self._failed = OSError(e.errno, e.strerror, str(self.path))
            raise self._failed from None
        self._size += written
        self.lines += lines

    def close(self) -> None:
        """Write what is gathered and close the file (closing twice does nothing)."""
        if self._fd is None:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LineFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
