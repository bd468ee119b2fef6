"""Actor runtime tests run on both anyio backends: asyncio (with uvloop) and trio."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio"), "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    return request.param
