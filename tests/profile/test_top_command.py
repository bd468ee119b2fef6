"""`rstar2 top`: rates between snapshots (pure) and a live attach to a running graph."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from rstar2.actors.graph import run_graph_blocking, stats_endpoints
from rstar2.cli import main
from rstar2.commands import top as top_command
from rstar2.commands.top import SHARES
from rstar2.profile.live_view import format_rows, graph_dir, live_rows
from rstar2.profile.synthetic import synthetic_graph
from rstar2.wire import ActorStats


def test_live_rows_are_rates_over_the_interval() -> None:
    prev = [ActorStats("sandbox.0", "main", received=10, busy_s=1.0, wait_s=0.5, reply_s=1.0)]
    cur = [
        ActorStats(
            "sandbox.0",
            "main",
            received=30,
            sent=5,
            busy_s=1.5,
            wait_s=0.75,
            queue_depth=4,
            reply_s=2.0,
        ),
        ActorStats("reward.0", "tools", received=3, busy_s=3.0, alive=False),
    ]
    rows = {r.actor: r for r in live_rows(prev, cur, 2.0)}
    s = rows["sandbox.0"]
    assert (s.msgs_per_s, s.sent_per_s, s.busy, s.idle, s.queue_depth) == (
        10.0,
        2.5,
        0.25,
        0.125,
        4,
    )
    assert s.replies == 0.5
    assert rows["reward.0"].busy == 1.0  # new instance counts from zero, capped at 100%
    text = format_rows("graph g", list(rows.values()))
    assert "(dead)" in text and "sandbox.0" in text
    with pytest.raises(ValueError):
        live_rows(prev, cur, 0.0)


def test_shares_of_overlapping_counters_add_to_at_most_100_percent() -> None:
    """A service receives in one task while it works in others: its wait and busy counters
    overlap (each near the whole interval); the shares are busy, then blocked, then idle."""
    prev = [ActorStats("engine.0", "main")]
    cur = [ActorStats("engine.0", "main", busy_s=1.8, wait_s=2.0, blocked_s=0.4, reply_s=1.0)]
    (row,) = live_rows(prev, cur, 2.0)
    assert (row.busy, row.blocked, row.replies) == pytest.approx((0.9, 0.1, 0.5))
    assert row.idle == 0.0
    assert row.busy + row.blocked + row.idle <= 1.0


def test_graph_dir_from_endpoint() -> None:
    assert graph_dir("ipc:///tmp/rstar2-graph-synthetic-sandbox-4242-k2j3/stats.sock").name == (
        "synthetic-sandbox"
    )
    # a folder named by an older rstar2 (no pid)
    assert graph_dir("ipc:///tmp/rstar2-graph-synthetic-sandbox-k2j3/stats.sock").name == (
        "synthetic-sandbox"
    )


def test_top_attaches_to_a_running_graph(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = synthetic_graph("sandbox", steps=8)  # about 2 s of sandbox work
    before = set(stats_endpoints())
    runner = threading.Thread(
        target=run_graph_blocking, args=(cfg,), kwargs={"handle_signals": False}, daemon=True
    )
    runner.start()
    try:
        deadline = time.monotonic() + 10
        mine: list[str] = []
        while not mine and time.monotonic() < deadline:
            mine = [
                e
                for e in set(stats_endpoints()) - before
                if graph_dir(e).name == "synthetic-sandbox"
            ]
            time.sleep(0.02)
        assert mine, "the graph's stats endpoint did not appear"
        code = main(["-q", "top", "--json", "--interval", "0.3", "--endpoint", mine[0]])
        assert code == 0
        rows = json.loads(capsys.readouterr().out)[mine[0]]
        by_actor = {r["actor"]: r for r in rows}
        assert set(by_actor) == {
            "learner.0",
            "rollout.0",
            "rollout.1",
            "engine.0",
            "sandbox.0",
            "reward.0",
        }
        assert by_actor["sandbox.0"]["busy"] > by_actor["reward.0"]["busy"]
    finally:
        runner.join(timeout=20)
    assert not runner.is_alive()


def test_top_titles_each_graph_with_its_pid_and_run_directory(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = synthetic_graph("sandbox", steps=8)
    cfg.name = f"titled{os.getpid()}"
    runner = threading.Thread(
        target=run_graph_blocking,
        args=(cfg,),
        kwargs={"handle_signals": False, "run_dir": "runs/demo-run"},
        daemon=True,
    )
    runner.start()
    try:
        deadline = time.monotonic() + 10
        mine: list[str] = []
        while not mine and time.monotonic() < deadline:
            mine = [e for e in stats_endpoints() if graph_dir(e).name == cfg.name]
            time.sleep(0.02)
        assert mine, "the graph's stats endpoint did not appear"
        assert main(["-q", "top", "--once", "--interval", "0.2", "--endpoint", mine[0]]) == 0
        out = capsys.readouterr().out
        assert f"graph {cfg.name}  pid {os.getpid()}  since " in out
        assert out.splitlines()[2].endswith("run runs/demo-run")
        assert out.startswith(SHARES)
    finally:
        runner.join(timeout=20)


def test_top_without_graphs_or_with_bad_interval(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 34 row 13: exit 1 is a bug's; a graph that is not there is exit 2, one line
    argv = ["top", "--once", "--endpoint", "ipc:///nonexistent/stats.sock", "--interval", "0.01"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "rstar2 top: error: no graph answered at --endpoint ipc:///nonexistent/stats.sock "
        "(did it stop?)\n"
    )
    monkeypatch.setattr(top_command, "stats_endpoints", lambda: [])
    monkeypatch.setattr(top_command, "sweep_stale_dirs", lambda: None)
    assert main(["top", "--once"]) == 2
    assert "error: no running graph found on this machine" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["top", "--interval", "0"])
    assert info.value.code == 2
