"""One `rstar2 launch --node-rank K` per node: nodes, plans, the control link, real launches.

The launches are local OS processes over tcp://127.0.0.1 with CURVE, one per host name (all
names map to 127.0.0.1, ports differ), using the demo actors: a pipeline whose result is
checked exactly, a failure on a member node that stops every node, Ctrl-C on node 0, and a
member whose node 0 never comes. Every launch runs with a marker in its environment, so "no
process left" means no process on this machine still carries it (spawned children inherit it).
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
import zmq

from production.test_multihost_graph import free_base_port, toml_string
from rstar2.actors.graph import TMP_PREFIX
from rstar2.actors.graph_config import GraphConfig, graph_config
from rstar2.actors.nodes import NodeRole, node_host, node_role
from rstar2.actors.plan import build_plan
from rstar2.actors.running_graph import RunningGraph
from rstar2.actors.sockets import SocketFactory
from rstar2.config import ConfigError
from rstar2.profile.live_view import StatsUnavailable, poll_stats
from rstar2.wire import ActorFailed, ActorFinished, Message, Shutdown, StopGraph

DEMO = "rstar2.actors.demo"
N = 200
HOSTS = {"learner": "127.0.0.1", "engines": "127.0.0.1", "sandbox": "127.0.0.1"}
MARK = "RSTAR2_NODE_TEST_MARK"


def pipeline(square: str = "Square", params: str = "{}", n: int = N, sink: str = "Sink") -> str:
    """Source on node 0 (learner), Squares in a child process on node 1, Sink on node 2."""
    return f"""
[[graph.actors]]
name = "source"
cls = "{DEMO}:Source"
host = "learner"
params = {{ n = {n} }}

[[graph.actors]]
name = "square"
cls = "{DEMO}:{square}"
count = 2
host = "engines"
process = "engines"
params = {params}

[[graph.actors]]
name = "sink"
cls = "{DEMO}:{sink}"
host = "sandbox"
params = {{ n = {n} }}
"""


def graph_toml(
    name: str,
    actors: str,
    base_port: int = 6000,
    timeout_s: float = 60.0,
    heartbeat: tuple[float, float] = (1.0, 10.0),
) -> str:
    (sp, ss), (cp, cs) = zmq.curve_keypair(), zmq.curve_keypair()
    hosts = ", ".join(f"{k} = {toml_string(v)}" for k, v in HOSTS.items())
    return f"""
[graph]
name = "{name}"
base_port = {base_port}
hosts = {{ {hosts} }}
edges = ["source.out -> square.in", "square.out -> sink.in"]
handshake_timeout_s = {timeout_s}
node_heartbeat_s = {heartbeat[0]}
node_timeout_s = {heartbeat[1]}

[graph.curve]
server_public_key = {toml_string(sp.decode())}
server_secret_key = {toml_string(ss.decode())}
client_public_key = {toml_string(cp.decode())}
client_secret_key = {toml_string(cs.decode())}
{actors}"""


def config(actors: str, **graph: Any) -> GraphConfig:
    cfg = graph_config(tomllib.loads(graph_toml("nodes", actors, **graph)))
    cfg.validate()
    return cfg


# --- nodes and plans (no sockets) -----------------------------------------------------------


def test_nodes_are_hosts_with_actors_in_hosts_order() -> None:
    cfg = config(pipeline())
    cfg.hosts = {"spare": "127.0.0.1", **HOSTS}  # a host placing no actor is no node
    assert cfg.nodes() == ["learner", "engines", "sandbox"]
    assert node_host(cfg, 2) == "sandbox"
    with pytest.raises(ConfigError, match="--node-rank"):
        node_host(cfg, 3)


def test_node_roles_share_node_0s_endpoint_below_base_port() -> None:
    cfg = config(pipeline(), base_port=6100)
    roles = [node_role(cfg, h) for h in cfg.nodes()]
    assert [r.coordinator for r in roles if r] == [True, False, False]
    assert {r.endpoint for r in roles if r} == {"tcp://127.0.0.1:6099"}
    assert roles[1] is not None and roles[1].members == ("engines", "sandbox")
    one_node = config(
        pipeline().replace('"engines"', '"learner"').replace('"sandbox"', '"learner"')
    )
    assert node_role(one_node, "learner") is None  # nothing to join


def test_a_node_plan_keeps_its_instances_and_the_graphs_endpoints() -> None:
    plan = build_plan(config(pipeline()), "/nonexistent")
    node = plan.on_host("engines")
    assert [i.name for i in node.instances] == ["square.0", "square.1"]
    whole = {i.name: (i.binds, i.streams) for i in plan.instances}
    assert all(whole[i.name] == (i.binds, i.streams) for i in node.instances)
    with pytest.raises(ValueError, match="no actor is placed on host 'nowhere'"):
        plan.on_host("nowhere")


# --- event routing between nodes (no sockets: a fake link) ----------------------------------


class FakeLink:
    """Records what a node would send over the control link."""

    def __init__(self, role: NodeRole) -> None:
        self.role = role
        self.sent: list[Message] = []
        self.broadcasts: list[Message] = []

    def send(self, msg: Message, to: str = "") -> None:
        self.sent.append(msg)

    def broadcast(self, msg: Message) -> None:
        self.broadcasts.append(msg)


def node_graph(host: str) -> tuple[RunningGraph, FakeLink]:
    cfg = config(pipeline())
    plan = build_plan(cfg, "/nonexistent")
    role = node_role(cfg, host)
    assert role is not None
    link = FakeLink(role)
    graph = RunningGraph(
        cfg,
        plan.on_host(host),
        SocketFactory(zmq.Context.instance()),
        total_instances=len(plan.instances),
        link=link,  # type: ignore[arg-type]
    )
    return graph, link


@pytest.mark.anyio
async def test_a_member_forwards_events_and_stops_when_node_0_says() -> None:
    graph, link = node_graph("engines")
    graph._on_finished("square.0")
    graph.on_failure(ActorFailed("square.1", "tb", restarting=True))
    assert link.sent == [ActorFinished("square.0"), ActorFailed("square.1", "tb", True)]
    assert not graph.stopping  # its own instances finishing is not the graph finishing
    graph.on_node_message("learner", Shutdown("stopped"))
    assert (graph.result.reason, graph.result.stopped_by) == ("stopped", "node:learner")
    graph.notify_nodes()
    assert link.sent[-1] == ActorFailed("square.1", "tb", True)  # no Shutdown echoed back


@pytest.mark.anyio
async def test_a_member_that_stops_on_its_own_tells_node_0() -> None:
    graph, link = node_graph("sandbox")
    graph._on_stop(StopGraph("sink.0", "done", {"count": 1}))
    graph.notify_nodes()
    assert link.sent == [StopGraph("sink.0", "done", {"count": 1}), Shutdown("stopped")]


@pytest.mark.anyio
async def test_node_0_counts_the_whole_graph_and_stops_every_member() -> None:
    graph, link = node_graph("learner")
    for name in ("source.0", "square.0", "square.1"):
        graph.on_node_message("engines", ActorFinished(name))
    assert not graph.stopping
    graph.on_node_message("sandbox", ActorFinished("sink.0"))
    assert graph.result.reason == "finished"
    graph.notify_nodes()
    assert link.broadcasts == [Shutdown("finished")] and link.sent == []


@pytest.mark.anyio
async def test_node_0_stops_on_a_members_final_failure_or_lost_link() -> None:
    graph, _ = node_graph("learner")
    graph.on_node_message("engines", ActorFailed("square.0", "tb", restarting=True))
    assert not graph.stopping
    graph.on_node_message("engines", ActorFailed("square.0", "tb"))
    assert (graph.result.reason, graph.result.stopped_by) == ("failed", "square.0")
    lost, _ = node_graph("learner")
    lost.on_link_lost("control connection to a member node dropped")
    assert (lost.result.reason, lost.result.failures[0].actor) == ("failed", "node")


# --- real launches: one OS process per node -------------------------------------------------


_LAUNCHED: list[Nodes] = []


@pytest.fixture(autouse=True)
def _kill_leftover_launches() -> Any:
    """A test that fails half-way (an assertion, a timeout) leaves no launch running."""
    yield
    while _LAUNCHED:
        nodes = _LAUNCHED.pop()
        for proc in nodes.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        for pid in nodes._marked():  # their spawned children
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class Nodes:
    """`rstar2 launch CONFIG --node-rank K` for K in `ranks`, marked in their environment."""

    def __init__(self, tmp_path: Path, actors: str, ranks: list[int], **graph: Any) -> None:
        _LAUNCHED.append(self)
        self.name = f"nodes{uuid.uuid4().hex[:8]}"
        self.mark = self.name
        path = tmp_path / "graph.toml"
        base = free_base_port(span=8) + 1  # node 0's control socket takes base_port - 1
        path.write_text(graph_toml(self.name, actors, base, **graph))
        env = {**os.environ, MARK: self.mark}
        cmd = [sys.executable, "-m", "rstar2.cli", "launch", str(path), "--json", "--node-rank"]
        self.procs = {
            k: subprocess.Popen(
                [*cmd, str(k)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
            )
            for k in ranks
        }

    def finish(self, timeout_s: float = 180) -> dict[int, tuple[int, dict[str, Any], str]]:
        """Each rank's (exit code, JSON summary, stderr)."""
        out = {}
        try:
            for k, proc in self.procs.items():
                stdout, stderr = proc.communicate(timeout=timeout_s)
                lines = stdout.strip().splitlines()
                out[k] = (proc.returncode, json.loads(lines[-1]) if lines else {}, stderr)
        finally:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
        return out

    def leftovers(self) -> list[str]:
        """Processes still carrying the mark, and this graph's temp dirs (ipc socket files)."""
        pattern = os.path.join(tempfile.gettempdir(), f"{TMP_PREFIX}{self.name}-*")
        return [f"pid {pid}" for pid in self._marked()] + glob.glob(pattern)

    def _marked(self) -> list[int]:
        needle = f"{MARK}={self.mark}".encode()
        pids = []
        for environ in glob.glob("/proc/[0-9]*/environ"):
            try:
                if needle in Path(environ).read_bytes().split(b"\0"):
                    pids.append(int(Path(environ).parent.name))
            except OSError:
                continue
        return pids

    def wait_gone(self, timeout_s: float = 15) -> list[str]:
        # multiprocessing's resource tracker exits when it sees its launcher gone
        deadline = time.monotonic() + timeout_s
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.leftovers()


@pytest.mark.slow
def test_three_nodes_run_the_pipeline_exactly(tmp_path: Path) -> None:
    nodes = Nodes(tmp_path, pipeline(), [2, 1, 0])
    done = nodes.finish()
    for k, (rc, summary, err) in done.items():
        assert rc == 0, f"node {k}: {err[-3000:]}"
        assert summary["reason"] == "stopped" and summary["failures"] == []
    expected = {"count": N, "sum": sum(i * i for i in range(N))}
    assert (done[0][1]["stopped_by"], done[0][1]["result"]) == ("sink.0", expected)
    assert done[1][1]["stopped_by"] == "node:learner"  # node 0 stopped the squares' node
    received = {a["actor"]: a["received"] for k in done for a in done[k][1]["actors"]}
    assert received["square.0"] + received["square.1"] == N == received["sink.0"]
    assert nodes.wait_gone() == []


@pytest.mark.slow
def test_a_failure_on_a_member_node_stops_every_node(tmp_path: Path) -> None:
    nodes = Nodes(tmp_path, pipeline("Flaky", "{ fail_at = 5 }"), [0, 1, 2])
    done = nodes.finish()
    assert {k: rc for k, (rc, _, _) in done.items()} == {0: 1, 1: 1, 2: 1}
    assert done[0][1]["reason"] == "failed"
    assert done[0][1]["stopped_by"] in ("square.0", "square.1")
    assert "flaky actor failing" in done[0][1]["failures"][0]["traceback"]
    assert done[2][1]["stopped_by"] == "node:learner"  # the sink's node, told by node 0
    assert nodes.wait_gone() == []


def sink_received(name: str) -> int:
    """What sink.0 has received so far, from the stats endpoints of graph `name`."""
    count = 0
    for endpoint in glob.glob(os.path.join(tempfile.gettempdir(), f"{TMP_PREFIX}{name}-*")):
        try:
            replies = poll_stats(f"ipc://{endpoint}/stats.sock", timeout_s=1.0)
        except StatsUnavailable:
            continue
        count += sum(a.received for r in replies for a in r.actors if a.actor == "sink.0")
    return count


@pytest.mark.slow
def test_ctrl_c_on_node_0_stops_every_node(tmp_path: Path) -> None:
    endless = pipeline(n=10**9, sink="SlowSink")
    nodes = Nodes(tmp_path, endless, [0, 1, 2])
    deadline = time.monotonic() + 120
    while sink_received(nodes.name) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sink_received(nodes.name) > 0, "the graph never ran across its nodes"
    assert nodes.leftovers(), "the marker finds running node processes"
    nodes.procs[0].send_signal(signal.SIGINT)
    done = nodes.finish()
    assert {k: (rc, s["reason"]) for k, (rc, s, _) in done.items()} == {
        k: (130, "signal") for k in (0, 1, 2)
    }
    assert done[1][1]["stopped_by"] == "node:learner"
    assert nodes.wait_gone() == []


@pytest.mark.slow
def test_a_frozen_member_node_is_lost_by_heartbeat_and_every_node_stops(tmp_path: Path) -> None:
    endless = pipeline(n=10**9, sink="SlowSink")
    nodes = Nodes(tmp_path, endless, [0, 1, 2], heartbeat=(0.2, 2.0))
    deadline = time.monotonic() + 120
    while sink_received(nodes.name) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sink_received(nodes.name) > 0, "the graph never ran across its nodes"
    frozen = nodes.procs[1]  # the squares' launcher: its TCP connections stay open, silent
    os.kill(frozen.pid, signal.SIGSTOP)
    start = time.monotonic()
    try:
        nodes.procs[0].wait(timeout=60)
        noticed_s = time.monotonic() - start
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    done = nodes.finish()
    rc, summary, _ = done[0]
    assert (rc, summary["reason"], summary["stopped_by"]) == (1, "failed", "node")
    assert "control connection to a member node dropped" in summary["failures"][0]["traceback"]
    assert noticed_s < 2.0 + 15.0, noticed_s  # the 2 s timeout plus stopping, on a busy machine
    assert {k: rc for k, (rc, _, _) in done.items()} == {0: 1, 1: 1, 2: 1}
    assert nodes.wait_gone() == []


def test_heartbeat_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match="graph.node_timeout_s"):
        config(pipeline(), heartbeat=(1.0, 0.5))
    with pytest.raises(ConfigError, match="graph.node_heartbeat_s"):
        config(pipeline(), heartbeat=(0.0, 5.0))


@pytest.mark.slow
def test_a_member_without_node_0_fails_with_a_clear_error(tmp_path: Path) -> None:
    nodes = Nodes(tmp_path, pipeline(), [2], timeout_s=3.0)
    rc, summary, err = nodes.finish()[2]
    assert rc == 1 and summary["reason"] == "start failed"
    assert "no answer from node 0 (learner)" in summary["error"]
    assert "--node-rank 0" in err
    assert nodes.wait_gone() == []
