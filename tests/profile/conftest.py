"""Profile-test fixtures: the tool-calling policy (tool_policy.py), SFT'd once per session."""

from __future__ import annotations

import pytest
from tool_policy import ToolPolicy, build_tool_policy


@pytest.fixture(scope="session")
def tool_policy(tmp_path_factory: pytest.TempPathFactory) -> ToolPolicy:
    return build_tool_policy(tmp_path_factory.mktemp("tool-policy"))
