"""Output files and directories that appear whole or not at all.

`replacing(path)` yields a temporary name next to `path` (the same directory, so the same file
system) for the caller to write; when the block ends without an exception the temporary is
renamed over `path` (`os.replace`, atomic on POSIX), and on any exception, Ctrl-C's
`KeyboardInterrupt` included, it is removed. So a reader, or a rerun after an interruption, a
full disk or a crash in the writer, finds the old output or the new one, never a cut one, and
no temporary left behind. `write_text(path, text)` is the one-call form. A directory works the
same way (the caller makes the temporary directory and fills it); it replaces a `path` that is
absent or an empty directory, and into a non-empty one (`init-model --force`) its entries are
moved one by one, each whole.

What it does not do: fsync (a power cut may still lose the last write; checkpoints add that
themselves, `rstar2.learner.checkpoint`) or merge subdirectories into existing ones.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """The name `replacing` writes under: hidden, beside `path`, with this process's id (two
    writers of one path do not share a temporary)."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write `path`'s new content to; rename it over `path` when the
    block succeeds, remove it when the block raises (see the module docstring)."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        yield tmp
        if tmp.is_dir() and path.is_dir() and any(path.iterdir()):
            for entry in tmp.iterdir():
                os.replace(entry, path / entry.name)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` whole or not at all."""
    path = Path(path)
    with replacing(path) as tmp:
        tmp.write_text(text)
    return path
