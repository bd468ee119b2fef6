"""A graph placed on three "hosts" wired over tcp://127.0.0.1 with CURVE, run by `rstar2 launch`.

Each host name stands for one machine of a cluster (learner, engines, sandbox); all resolve to
loopback here, so the plan must wire every cross-host edge over tcp, and with the keys in the
config every tcp socket runs CURVE. The demo actors stand in for the real ones: Source on the
learner host, two Square instances in a process on the engine host, Sink on the sandbox host,
and a request/reply pair (Pinger -> Echo) across hosts.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import zmq

from rstar2.actors.graph_config import graph_config
from rstar2.actors.plan import build_plan

N = 200


def free_base_port(span: int = 8) -> int:
    """A port p such that p .. p + span - 1 are free now (racy, but only within this host)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + span > 65000:
            continue
        try:
            for port in range(base, base + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port range found")


def toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def multihost_toml(base_port: int, hosts: dict[str, str], rpc: bool = False) -> str:
    """The pipeline graph (Sink stops it) or, with `rpc`, the Pinger -> Echo graph."""
    (sp, ss), (cp, cs) = zmq.curve_keypair(), zmq.curve_keypair()
    host_lines = ", ".join(f"{k} = {toml_string(v)}" for k, v in hosts.items())
    actors = RPC_ACTORS if rpc else PIPELINE_ACTORS
    edges = '["pinger.req -> echo.req"]' if rpc else EDGES
    return f"""
[graph]
name = "multihost"
base_port = {base_port}
hosts = {{ {host_lines} }}
edges = {edges}

[graph.curve]
server_public_key = {toml_string(sp.decode())}
server_secret_key = {toml_string(ss.decode())}
client_public_key = {toml_string(cp.decode())}
client_secret_key = {toml_string(cs.decode())}
{actors}"""


EDGES = '["source.out -> square.in", "square.out -> sink.in"]'
PIPELINE_ACTORS = f"""
[[graph.actors]]
name = "source"
cls = "rstar2.actors.demo:Source"
host = "learner"
process = "learner"
params = {{ n = {N} }}

[[graph.actors]]
name = "square"
cls = "rstar2.actors.demo:Square"
count = 2
host = "engines"
process = "engines"

[[graph.actors]]
name = "sink"
cls = "rstar2.actors.demo:Sink"
host = "sandbox"
params = {{ n = {N} }}
"""
RPC_ACTORS = """
[[graph.actors]]
name = "echo"
cls = "rstar2.actors.demo:Echo"
host = "sandbox"
process = "sandbox"

[[graph.actors]]
name = "pinger"
cls = "rstar2.actors.demo:Pinger"
host = "learner"
params = { n = 5 }
"""


LOOPBACK_HOSTS = {"learner": "127.0.0.1", "engines": "127.0.0.1", "sandbox": "127.0.0.1"}


def test_cross_host_edges_are_tcp_on_consecutive_ports() -> None:
    cfg = graph_config(tomllib.loads(multihost_toml(6000, LOOPBACK_HOSTS)))
    cfg.validate()
    plan = build_plan(cfg, "/nonexistent")
    binds = {i.name: i.binds for i in plan.instances}
    assert binds["square.0"]["in"] == "tcp://127.0.0.1:6000"
    assert binds["square.1"]["in"] == "tcp://127.0.0.1:6001"
    assert binds["sink.0"]["in"] == "tcp://127.0.0.1:6002"
    source = next(i for i in plan.instances if i.name == "source.0")
    assert source.streams["out"] == ["tcp://127.0.0.1:6000", "tcp://127.0.0.1:6001"]


def test_a_real_address_without_curve_keys_is_refused() -> None:
    data = tomllib.loads(multihost_toml(6000, {**LOOPBACK_HOSTS, "engines": "10.0.0.7"}))
    del data["graph"]["curve"]
    with pytest.raises(ValueError, match="10.0.0.7"):
        graph_config(data).validate()


@pytest.mark.slow
def test_launch_runs_the_graph_across_hosts_over_curve_tcp(tmp_path: Path) -> None:
    path = tmp_path / "multihost.toml"
    path.write_text(multihost_toml(free_base_port(), LOOPBACK_HOSTS))
    done = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "launch", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["failures"] == []
    assert summary["stopped_by"].startswith("sink")
    assert summary["result"] == {"count": N, "sum": sum(i * i for i in range(N))}
    received = {a["actor"]: a["received"] for a in summary["actors"]}
    assert received["square.0"] > 0 and received["square.1"] > 0  # spread over both


@pytest.mark.slow
def test_requests_cross_hosts_over_curve_tcp(tmp_path: Path) -> None:
    path = tmp_path / "rpc.toml"
    path.write_text(multihost_toml(free_base_port(), LOOPBACK_HOSTS, rpc=True))
    done = subprocess.run(
        [sys.executable, "-m", "rstar2.cli", "launch", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["stopped_by"].startswith("pinger")
    assert len(summary["result"]["rtt_s"]) == 5
