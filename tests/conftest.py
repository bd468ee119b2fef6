"""Shared pytest configuration: every test runs on a CPU-only machine; the tool-calling policy
(`tests/profile/tool_policy.py`), SFT'd once per session for the tests that need a policy that
earns reward (profile runs, resume)."""

from __future__ import annotations

import os

import pytest

from tests.profile.tool_policy import ToolPolicy, build_tool_policy

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tool_policy(tmp_path_factory: pytest.TempPathFactory) -> ToolPolicy:
    return build_tool_policy(tmp_path_factory.mktemp("tool-policy"))
