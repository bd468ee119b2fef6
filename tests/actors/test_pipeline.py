"""A 3-actor pipeline and a request/reply pair, in one process and across processes."""

from __future__ import annotations

import glob
import os

import pytest
from actor_graphs import DEMO, expected_sum, pipeline

from rstar2.actors import graph_config, open_graph, run_graph

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("process", ["main", "workers"], ids=["inproc", "ipc"])
async def test_pipeline_delivers_every_message_once(process: str) -> None:
    result = await run_graph(pipeline(n=300, process=process))
    assert result.reason == "stopped" and result.stopped_by == "sink.0"
    assert result.result == {"count": 300, "sum": expected_sum(300)}
    by_actor = {s.actor: s for s in result.stats}
    assert by_actor["source.0"].sent == 300
    assert by_actor["square.0"].handled + by_actor["square.1"].handled == 300
    assert by_actor["square.0"].handled > 0 and by_actor["square.1"].handled > 0


async def test_ipc_graph_uses_ipc_between_processes_and_cleans_up() -> None:
    async with open_graph(pipeline(n=50, process="workers")) as graph:
        endpoints = [ep for inst in graph.plan.instances for ep in inst.binds.values()]
        assert any(ep.startswith("ipc://") for ep in endpoints)
        assert glob.glob(os.path.join(graph.plan.ipc_dir, "*.sock"))
        procs = list(graph.procs.values())
        assert len(procs) == 1 and procs[0].is_alive()
        await graph.wait()
    assert not os.path.exists(graph.plan.ipc_dir)
    assert all(p.exitcode is not None for p in procs)


async def test_instances_in_processes_of_their_own() -> None:
    """`process_per_instance`: each square in a process of its own, wired by ipc to the source
    (main) and to the sink (its own process), and every message still arrives once."""
    cfg = pipeline(n=200, process="workers")
    cfg.actors[1].process_per_instance = True
    async with open_graph(cfg) as graph:
        where = {inst.name: inst.process for inst in graph.plan.instances}
        assert where == {
            "source.0": "main", "square.0": "workers-0", "square.1": "workers-1",
            "sink.0": "workers",
        }  # fmt: skip
        assert sorted(graph.procs) == ["workers", "workers-0", "workers-1"]
        binds = [ep for inst in graph.plan.instances for ep in inst.binds.values()]
        assert binds and all(ep.startswith("ipc://") for ep in binds)
        result = await graph.wait()
    assert result.reason == "stopped" and result.result == {"count": 200, "sum": expected_sum(200)}
    by_actor = {s.actor: s for s in result.stats}
    assert by_actor["square.0"].handled > 0 and by_actor["square.1"].handled > 0
    assert by_actor["square.0"].process == "workers-0"


@pytest.mark.parametrize("process", ["main", "svc"], ids=["inproc", "ipc"])
async def test_request_reply_round_trips(process: str) -> None:
    cfg = graph_config(
        {
            "name": "test-rr",
            "edges": ["pinger.req -> echo.req"],
            "actors": [
                {"name": "pinger", "cls": f"{DEMO}:Pinger", "params": {"n": 50}},
                {"name": "echo", "cls": f"{DEMO}:Echo", "count": 2, "process": process},
            ],
        }
    )
    result = await run_graph(cfg)
    assert result.reason == "stopped", result.failures
    assert len(result.result["rtt_s"]) == 50
    echoes = [s for s in result.stats if s.actor.startswith("echo")]
    assert [s.handled for s in echoes] == [25, 25]  # round-robin over the two instances


async def test_spans_are_recorded_and_collected() -> None:
    result = await run_graph(pipeline(n=100), spans=True)
    kinds = {(s.actor, s.kind) for s in result.spans}
    assert ("square.0", "handle") in kinds and ("sink.0", "handle") in kinds
    assert all(s.end >= s.start for s in result.spans)
