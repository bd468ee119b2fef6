"""A session fixture's product built once per test session, also under pytest-xdist.

xdist runs a session-scoped fixture once in each worker process, so a fixture that trains or
converts a model (a minute of CPU) would run on both workers at once, each slowing the other.
`built_once` builds it in the first worker that asks, under a file lock (filelock, which torch
already depends on) in the directory the session's workers share, as pytest-xdist's
documentation recommends; the other workers wait for the lock and read the path."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]
) -> Path:
    """What `build(directory)` returns, built once per test session: by this process without
    xdist, else by the first worker that asks (in its own temp directory), under a file lock in
    the directory the session's workers share (the parent of each one's base directory); the
    others read the path it returned. A build that fails is tried again by the next worker."""
    directory = tmp_path_factory.mktemp(name)
    if "PYTEST_XDIST_WORKER" not in os.environ:  # set in xdist's workers
        return build(directory)
    shared = tmp_path_factory.getbasetemp().parent / f"{name}.built"
    with FileLock(f"{shared}.lock"):
        if not shared.exists():
            shared.write_text(str(build(directory)))
        return Path(shared.read_text())
