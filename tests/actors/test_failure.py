"""An actor that raises is reported with its name and traceback; restart or stop."""

from __future__ import annotations

import pytest
from actor_graphs import DEMO

from rstar2.actors import graph_config, run_graph

pytestmark = pytest.mark.anyio


def flaky_graph(restarts: int, once: bool, process: str = "main", n: int = 50):
    return graph_config(
        {
            "name": "test-flaky",
            "edges": ["source.out -> flaky.in", "flaky.out -> sink.in"],
            "actors": [
                {"name": "source", "cls": f"{DEMO}:Source", "params": {"n": n}},
                {
                    "name": "flaky",
                    "cls": f"{DEMO}:Flaky",
                    "params": {"fail_at": 7, "once": once},
                    "restarts": restarts,
                    "process": process,
                },
                {"name": "sink", "cls": f"{DEMO}:Sink", "params": {"n": n - 1}},
            ],
        }
    )


@pytest.mark.parametrize("process", ["main", "workers"], ids=["inproc", "ipc"])
async def test_crash_is_reported_and_stops_the_graph(process: str) -> None:
    result = await run_graph(flaky_graph(restarts=0, once=False, process=process))
    assert result.reason == "failed" and result.stopped_by == "flaky.0"
    (failure,) = result.failures
    assert failure.actor == "flaky.0" and not failure.restarting
    assert "RuntimeError: flaky actor failing on item 7" in failure.traceback
    assert "demo.py" in failure.traceback  # a real traceback, not just the message


async def test_crash_with_restart_budget_is_restarted_and_graph_completes() -> None:
    # The failing item is lost (it was being handled); the other 49 arrive.
    result = await run_graph(flaky_graph(restarts=2, once=True))
    assert result.reason == "stopped", result.failures
    assert result.result["count"] == 49
    (failure,) = result.failures
    assert failure.restarting and failure.actor == "flaky.0"
    assert {s.actor: s.restarts for s in result.stats}["flaky.0"] == 1


async def test_restart_budget_exhausted_stops_the_graph() -> None:
    result = await run_graph(flaky_graph(restarts=1, once=False, n=200))
    # Items 7 fails on every run: after the budget, the graph stops.
    assert result.reason == "failed"
    assert [f.restarting for f in result.failures] == [True, False]
