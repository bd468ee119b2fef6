"""Shared pytest configuration: every test runs on a CPU-only machine; the tool-calling policy
(`tests/profile/tool_policy.py`), SFT'd once per session for the tests that need a policy that
earns reward (profile runs, resume).

The suite runs on pytest-xdist's workers (`make test`): a session fixture runs once per worker,
so the policy (about a minute of SFT) is built by the first worker that needs it and read by the
others (`tests/built_once.py`)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rstar2.cli import bound_openmp_spin  # imports no torch

# Before anything imports torch: bound how long torch's threads spin, as `rstar2.cli.main` does
# for every command. The tests that train in this process share the cores with the commands
# other tests start and with the other xdist worker; spinning threads made such work several
# times slower (its SFT 295 s instead of 55 beside the other worker).
bound_openmp_spin()

import pytest  # noqa: E402

from tests.built_once import built_once  # noqa: E402
from tests.profile.tool_policy import TASK, ToolPolicy, build_tool_policy  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# A shell without job control starts background jobs (`make test &`, `nohup ...`) with SIGINT
# ignored, and an ignored signal stays ignored across exec: every command the tests start would
# then ignore the Ctrl-C they send it. A handler, unlike SIG_IGN, is reset to the default on
# exec, so the commands start as they would from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def tool_policy(tmp_path_factory: pytest.TempPathFactory) -> ToolPolicy:
    path = built_once(tmp_path_factory, "tool-policy", lambda d: build_tool_policy(d).path)
    return ToolPolicy(path, list(TASK))


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A fresh directory with a short path, for tests that make unix sockets in it (a socket's
    path has at most 107 bytes; pytest-xdist's `tmp_path` has 70 and more)."""
    path = Path(tempfile.mkdtemp(prefix="r2-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
