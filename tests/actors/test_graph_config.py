"""Config errors name the key; tcp on a non-loopback address needs CURVE keys."""

from __future__ import annotations

from typing import Any

import pytest
import zmq
from actor_graphs import DEMO

from rstar2.actors import graph_config
from rstar2.actors.graph_config import actor_node
from rstar2.actors.plan import build_plan
from rstar2.actors.sockets import SocketFactory, is_local_endpoint
from rstar2.commands.launch import one_process
from rstar2.config import ConfigError
from rstar2.sandbox.actor import SandboxActor
from rstar2.sandbox.config import SandboxConfig


def base(**graph: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "cfg",
        "edges": ["source.out -> sink.in"],
        "actors": [
            {"name": "source", "cls": f"{DEMO}:Source"},
            {"name": "sink", "cls": f"{DEMO}:Sink"},
        ],
    }
    data.update(graph)
    return {"graph": data}


def error_key(data: dict[str, Any], plan: bool = False) -> str:
    with pytest.raises(ConfigError) as e:
        cfg = graph_config(data)
        if plan:
            build_plan(cfg, "/tmp")
    return e.value.key


def test_unknown_key_is_named() -> None:
    data = base()
    data["graph"]["actors"][1]["cuont"] = 2
    assert error_key(data) == "graph.actors[1].cuont"


def test_bad_values_are_named() -> None:
    data = base()
    data["graph"]["actors"][0]["count"] = 0
    assert error_key(data) == "graph.actors[0].count"
    assert error_key(base(hwm=0)) == "graph.hwm"
    assert error_key(base(edges=["source.out => sink.in"])) == "graph.edges[0]"


def test_a_process_per_instance_must_be_a_spawned_one() -> None:
    data = base()
    data["graph"]["actors"][1]["process_per_instance"] = True
    assert error_key(data) == "graph.actors[1].process"  # "main" is this process, one only
    data["graph"]["actors"][1]["process"] = "sinks"
    graph_config(data)
    # `rstar2 launch --one-process` puts every instance in this process, these too
    assert {i.process for i in build_plan(one_process(graph_config(data)), "/tmp").instances} == {
        "main"
    }


def test_unknown_port_and_class_are_named_when_planning() -> None:
    assert error_key(base(edges=["source.nope -> sink.in"]), plan=True) == "graph.edges[0]"
    data = base()
    data["graph"]["actors"][0]["cls"] = "rstar2.actors.demo:Missing"
    assert error_key(data, plan=True) == "graph.actors[0].cls"


def test_non_loopback_host_without_curve_keys_is_refused() -> None:
    data = base(hosts={"local": "127.0.0.1", "gpu": "10.1.2.3"})
    data["graph"]["actors"][1]["host"] = "gpu"
    with pytest.raises(ConfigError) as e:
        graph_config(data)
    assert e.value.key == "graph.curve" and "10.1.2.3" in str(e.value)


def test_non_loopback_host_with_curve_keys_is_accepted() -> None:
    server_pub, server_sec = zmq.curve_keypair()
    client_pub, client_sec = zmq.curve_keypair()
    keys = {
        "server_public_key": server_pub.decode(),
        "server_secret_key": server_sec.decode(),
        "client_public_key": client_pub.decode(),
        "client_secret_key": client_sec.decode(),
    }
    data = base(hosts={"local": "127.0.0.1", "gpu": "10.1.2.3"}, curve=keys)
    data["graph"]["actors"][1]["host"] = "gpu"
    cfg = graph_config(data)
    plan = build_plan(cfg, "/tmp")
    assert plan.instances[1].binds["in"].startswith("tcp://10.1.2.3:")


def test_socket_factory_refuses_exposed_tcp_bind_without_curve() -> None:
    factory = SocketFactory(zmq.Context())
    try:
        with pytest.raises(ConfigError):
            factory.bind(zmq.PULL, "tcp://0.0.0.0:5799")
    finally:
        factory.close()
        factory.context.term()


@pytest.mark.parametrize(
    ("endpoint", "local"),
    [
        ("inproc://x", True),
        ("ipc:///tmp/x.sock", True),
        ("tcp://127.0.0.1:1", True),
        ("tcp://localhost:1", True),
        ("tcp://[::1]:1", True),
        ("tcp://0.0.0.0:1", False),
        ("tcp://*:1", False),
        ("tcp://10.0.0.1:1", False),
    ],
)
def test_is_local_endpoint(endpoint: str, local: bool) -> None:
    assert is_local_endpoint(endpoint) is local


def test_typed_params_are_checked_when_planning_and_name_the_key(tmp_path: Any) -> None:
    good = actor_node("sandbox", SandboxActor, SandboxConfig(concurrency=3), count=2)
    assert good["cls"] == "rstar2.sandbox.actor:SandboxActor"
    assert good["params"]["concurrency"] == 3 and good["count"] == 2
    cfg = graph_config({"name": "g", "actors": [good]})
    assert len(build_plan(cfg, str(tmp_path)).instances) == 2
    for params, key in [
        ({"concurency": 2}, "graph.actors[0].params.concurency"),
        ({"concurrency": 0}, "graph.actors[0].params.concurrency"),
        ({"concurrency": "two"}, "graph.actors[0].params.concurrency"),
    ]:
        bad = graph_config({"name": "g", "actors": [{**good, "params": params}]})
        with pytest.raises(ConfigError) as info:
            build_plan(bad, str(tmp_path))
        assert info.value.key == key
