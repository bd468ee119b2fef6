"""Shared pytest configuration: every test runs on a CPU-only machine; the tool-calling policy
(`tests/profile/tool_policy.py`), SFT'd once per session for the tests that need a policy that
earns reward (profile runs, resume)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.profile.tool_policy import ToolPolicy, build_tool_policy

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# A shell without job control starts background jobs (`make test &`, `nohup ...`) with SIGINT
# ignored, and an ignored signal stays ignored across exec: every command the tests start would
# then ignore the Ctrl-C they send it. A handler, unlike SIG_IGN, is reset to the default on
# exec, so the commands start as they would from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def tool_policy(tmp_path_factory: pytest.TempPathFactory) -> ToolPolicy:
    return build_tool_policy(tmp_path_factory.mktemp("tool-policy"))
